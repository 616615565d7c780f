"""Layer 7 — the Redis plumbing every Redis-backed part shares: the one place clients are built
and Redis errors translated (``connection``), every key and channel name (``keys``), reads that
outlast outages and end when cancelled (``blocking``), a Redis refusing writes (``refusal``), pub/sub
wake-ups (``subscription``, ``hub``, ``sharded``), per-client objects (``per_client``), a command
sent under ``socket_timeout`` (``timed_send``) and what a server says about itself (``server``).

It imports nothing of shelly-dist but ``errors`` and ``cancellation``; the blackboard
(:mod:`shelly_dist.state`), the task board, the workspace, the journal and the engine build on it.
Modules are imported by path (``shelly_dist.redisio.keys``), so the embedded path never imports redis.
"""
