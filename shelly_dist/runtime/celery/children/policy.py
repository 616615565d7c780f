"""The delegation policy on the pool: what a worker consults so a config means what it means
embedded (DESIGN §3 rule 12). The decisions and texts are the agent layer's
(:mod:`shelly_dist.agent.slots`, :mod:`shelly_dist.agent.stops`); this module only keeps their
state in Redis, where every worker sees it.

* ``max_concurrency``: before a task advances a child run it takes a leased slot of the child's
  agent (:class:`~shelly_dist.state.slots.RedisSlots`), renewed while the task runs and given back
  when the task ends (finished, or suspended on its own children: a waiting run holds no slot).
  A child that finds its agent full is **re-queued with a delay** — the task returns ``busy`` and
  the Celery task retries with a growing countdown (at most 10 s) — rather than waiting in Redis
  for a wake-up: a worker never blocks a task on a slot (DESIGN §3 rule 1), a lost wake-up cannot
  strand a child, and a slot freed by an expired lease (a holder killed outright) needs nobody to
  announce it. The cost is up to one countdown of latency after a slot frees.
* ``delegate_fail_fast``: a child that fails stops its siblings of the same ``delegate`` call: a
  ``stop`` field on each sibling's run record and on those of its unfinished descendants (the
  flag, read with the claim and with every checkpoint, and checked before every model call of a
  child run) and its run id on the cancel channel (the wake-up that aborts the in-flight step, as
  the tree cancel does).
  A stopped run ends with ``canceled: sibling failed`` and joins its parent like any child.

The stop itself is :func:`.stops.stop_runs`, the one mechanism every stopper of a subtree calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import redis.asyncio as aioredis

from shelly_dist.agent import ChildRequest, DelegateEntry, Registry
from shelly_dist.agent.children import run_id_of
from shelly_dist.agent.slots import DEFAULT_SLOT_LEASE, Acquired, SlotLease
from shelly_dist.agent.stops import SIBLING_FAILED, stops_siblings
from shelly_dist.errors import ShellyError
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.children.stops import stop_runs
from shelly_dist.state.slots import RedisSlots

STOP_FIELD = "stop"
"""Run record field holding why the run must stop (its entry's error), set by a failed sibling."""

sibling_run_id = run_id_of
"""The run id of the child joined under a key of its parent's (one scheme: ``agent.children``)."""


class PoolPolicy:
    """Slots and sibling stops for one worker process's Redis and key prefix."""

    def __init__(self, client: aioredis.Redis, keys: Keys, *, slot_lease: float = DEFAULT_SLOT_LEASE) -> None:
        self._client = client
        self._keys = keys
        self.slots = RedisSlots(client, keys)
        self.slot_lease = slot_lease

    # -- max_concurrency -----------------------------------------------------------------------

    async def slot(
        self, registry_for: Callable[[str], Awaitable[Registry]], run_id: str, *, session: str = "", agent: str = ""
    ) -> AbstractAsyncContextManager[object] | None:
        """A held slot for child run ``run_id`` (a no-op lease when its agent has no limit), or
        ``None`` when the agent is full and the task must come back later.

        ``registry_for`` is the worker context's ``registry(session)``; ``session`` and ``agent``
        are the task's kwargs when it has them (a resume reads them from the record)."""
        parent = None
        if not (session and agent):
            with redis_errors("max_concurrency"):
                fields = await self._client.hmget(self._keys.run(run_id), ["agent", "session", "parent"])
            agent, session, parent = fields
            if not (agent and session):
                return contextlib.nullcontext()  # a missing run: the claim says so
        try:
            entry = (await registry_for(session)).get(agent)
        except ShellyError:  # a config this worker cannot build: the run's start fails it, naming why
            return contextlib.nullcontext()
        limit = entry.max_concurrency if entry is not None else 0
        if limit > 0 and parent is None:
            with redis_errors("max_concurrency"):
                parent = await self._client.hget(self._keys.run(run_id), "parent")
        if limit <= 0 or not parent:  # only delegated children count, as embedded
            return contextlib.nullcontext()
        got = await self.slots.try_acquire(session, agent, run_id, limit, self.slot_lease)
        if got == Acquired.FULL:
            return None
        return SlotLease(self.slots, session, agent, run_id, got, self.slot_lease)

    # -- delegate_fail_fast ----------------------------------------------------------------------

    async def stop_reason(self, run_id: str) -> str:
        with redis_errors("journal"):
            return await self._client.hget(self._keys.run(run_id), STOP_FIELD) or ""

    async def on_end(self, parent: str, parent_key: str, request: ChildRequest | str | None,
                     entry: DelegateEntry) -> None:
        """A child run (joined into ``parent`` under ``parent_key``; its request, parsed or as
        journaled) is about to finish with ``entry``: under fail-fast, a failure stops its
        siblings (called before the finish, so a retried finish stops them again)."""
        if isinstance(request, str):
            request = ChildRequest.model_validate_json(request) if request else None
        if stops_siblings(request, entry):
            await self.stop_siblings(parent, parent_key)

    async def stop_siblings(self, parent: str, key: str) -> list[str]:
        """Stop every unfinished sibling of the run joined into ``parent`` under ``key`` (its
        ``delegate`` call's other children), and each
        one's own subtree (a sibling waiting on its children ends once they are stopped, as an
        in-process sibling's cancel takes its children with it); returns the run ids stopped.

        The siblings are the parent's expected children of the same suspension and tool call
        (their join keys share ``<iteration>:<tool_call_id>:``)."""
        if not parent or not key:
            return []
        group = key.rsplit(":", 1)[0] + ":"
        with redis_errors("journal"):
            members = await self._client.smembers(self._keys.run_expected(parent))
        return await stop_runs(self._client, self._keys, [sibling_run_id(parent, m) for m in sorted(members)
                                                          if m.startswith(group) and m != key], SIBLING_FAILED)
