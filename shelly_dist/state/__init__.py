"""Layer 7 — the blackboard: a shared key/value store per session, in memory or in Redis, and
its ``shared_state_*`` tools."""
