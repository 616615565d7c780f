"""Layer 7 — the task board: shared tasks per session with atomic claims, in memory or in Redis,
and its ``shared_tasks_*`` tools."""
