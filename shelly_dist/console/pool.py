"""The console's pool backend: every answer read from Redis, every new session a root on the pool.

Nothing is kept in this process between requests, so replicas behind one load balancer answer
alike (a session started through one is listed, followed and cancelled through any other):

- sessions are listed from the index of sessions with runs (``…:run-sessions``, scored by their
  newest root, written with each root: ``Journal.create_root``), each summed from its roots'
  records alone (own usage plus what their children delivered so far: a root waiting on its
  children counts them once it resumes), so a page of 50 costs two round trips whatever the
  trees' sizes; one session's answer sums every run of its trees;
- a session's tree is its runs' records (``shelly runs`` reads the same); a run's chat its journal;
- a new session is a root run submitted to the workers as ``shelly batch`` submits an item: no
  coordinator process is needed, the run's record is the truth (``CeleryRuntime.submit``);
- cancelling is ``shelly cancel --session``'s (a coordinator's root left running by a killed
  coordinator is ended in the background after the grace);
- events are the session's stream, each with an id ``<stream entry id>:<index in the entry>``
  (an entry holds a step's batch of events), so a reader resumes exactly after the last event it
  got; the feed of every session is :mod:`.pool_feed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from shelly_dist.agent.naming import instance_name
from shelly_dist.agent.records import ChildRequest
from shelly_dist.console.backend import Page
from shelly_dist.console.pool_feed import every_session, global_position, stream_after, stream_position
from shelly_dist.console.views import RunView, SessionView
from shelly_dist.engine.decisions import Decisions
from shelly_dist.engine.session import user_messages
from shelly_dist.engine.sessions import new_session_id
from shelly_dist.errors import UsageError
from shelly_dist.events import Event
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.runtime.spending import Spent, spent_by_run

if TYPE_CHECKING:
    from shelly_dist.engine.config_models import Config
    from shelly_dist.runtime.celery import CeleryRuntime
    from shelly_dist.runtime.celery.journal import RunRecord

SUMMARY_FIELDS = ("agent", "status", "task", "created", "updated", "usage", "state", "error", "reply", "depth",
                  "instance", "worker", "session")
"""The root record fields a session's summary reads (not its input or request)."""


def agent_to_run(config: Config, agent: str | None) -> str:
    """``agent``, or the config's entry agent (or entry team); an unknown name is a ``UsageError``."""
    if not agent:
        return config.entry_agent if config.team(config.entry_agent) else config.entry().name
    if config.agent(agent) is None and config.team(agent) is None:
        known = ", ".join([a.name for a in config.agents] + [t.name for t in config.teams])
        raise UsageError(f'serve: unknown agent "{agent}" (known: {known})')
    return agent


def run_view(record: RunRecord) -> RunView:
    """A run record as the console shows it (a running child's instance name computed as its
    worker names it, from its request and number: the record keeps the name once it ended)."""
    instance = record.instance
    if not instance and record.request and record.instance_n:
        request = ChildRequest.model_validate_json(record.request)
        instance = instance_name(request.spawned(), request.task, record.instance_n)
    return RunView(
        id=record.id, agent=record.agent, parent=record.parent, root=record.root, depth=record.depth,
        instance=instance, status=str(record.status), worker=record.worker, task=record.task, error=record.error,
        handoff=record.handoff, spawned=record.spawned, created=record.created,
        ended=record.updated if record.ended else None, usage=record.spent(), reply=record.reply,
    )


def tree_spent(record: RunRecord) -> Spent:
    """What a root's tree spent as its record knows it: its own usage and what its children's
    entries delivered (each child with its subtree), read from its last checkpoint."""
    delivered = json.loads(record.state or "{}").get("children_usage") or {}
    return Spent.of(record.spent()) + Spent.of(delivered)


class PoolBackend:
    """Answers from the pool's Redis; submits through ``runtime`` (closed with the backend when it
    owns it)."""

    name = "pool"

    def __init__(self, config: Config, runtime: CeleryRuntime, *, owns_runtime: bool = True) -> None:
        self.config = config
        self.runtime = runtime
        self._owns_runtime = owns_runtime
        """Whether :meth:`aclose` closes ``runtime`` (not when an engine that opened it does)."""
        self.client = runtime.client
        self.keys = runtime.journal.keys
        self.decisions = Decisions(pool=runtime)
        """Every session's decisions, from the pool-wide index in Redis."""
        self._background: set[asyncio.Task[Any]] = set()

    async def start(self, task: str, *, agent: str | None, context: str) -> tuple[str, str]:
        name = agent_to_run(self.config, agent)
        session = new_session_id()
        run_id = await self.runtime.submit(name, user_messages(task, context), session=session)
        return session, run_id

    async def _roots(self, sessions: list[str]) -> dict[str, list[RunRecord]]:
        """Each session's root records, oldest first (two round trips for any number)."""
        from shelly_dist.runtime.celery.journal import RunRecord

        with redis_errors("serve"):
            async with self.client.pipeline(transaction=False) as pipe:
                for s in sessions:
                    pipe.zrange(self.keys.session_runs(s), 0, -1)
                ids: list[list[str]] = await pipe.execute()
            async with self.client.pipeline(transaction=False) as pipe:
                for roots in ids:
                    for rid in roots:
                        pipe.hmget(self.keys.run(rid), SUMMARY_FIELDS)
                raw = iter(await pipe.execute())
        out: dict[str, list[RunRecord]] = {}
        for s, roots in zip(sessions, ids, strict=True):
            found = [(rid, next(raw)) for rid in roots]
            records = [RunRecord.parse({"id": rid, **{k: v for k, v in zip(SUMMARY_FIELDS, values, strict=True)
                                                       if v is not None}})
                       for rid, values in found if values[1] is not None]  # status: the record exists
            out[s] = sorted(records, key=lambda r: r.created)
        return out

    def _view(self, session: str, roots: list[RunRecord]) -> SessionView:
        spent = Spent()
        for r in roots:
            spent = spent + tree_spent(r)
        return SessionView(id=session, roots=[run_view(r) for r in roots], spent=spent)

    async def sessions(self, *, limit: int, cursor: str | None) -> Page:
        try:
            top = f"({float(cursor)!r}" if cursor else "+inf"
        except ValueError:
            raise UsageError(f"serve: cursor {cursor!r} is not a cursor of this server") from None
        with redis_errors("serve"):
            scored = await self.client.zrevrangebyscore(self.keys.run_sessions(), top, "-inf", start=0, num=limit,
                                                        withscores=True)
        roots = await self._roots([s for s, _ in scored])
        views = [self._view(s, roots[s]) for s, _ in scored if roots[s]]
        return Page(views, repr(scored[-1][1]) if len(scored) == limit else None)

    async def session(self, session: str) -> SessionView | None:
        """The session with what its whole trees spent, summed from every run's record (the list
        reads only the roots' records: see :func:`tree_spent`)."""
        roots = (await self._roots([session]))[session]
        if not roots:
            return None
        runs = await self.runs(session) or []
        totals = spent_by_run((r.id, r.parent, r.usage) for r in runs)
        spent = Spent()
        for r in roots:
            spent = spent + (totals[r.id][1] if r.id in totals else tree_spent(r))
        return SessionView(id=session, roots=[run_view(r) for r in roots], spent=spent)

    async def runs(self, session: str) -> list[RunView] | None:
        from shelly_dist.runtime.celery.client.trees import load_runs

        with redis_errors("serve"):
            records = await load_runs(self.client, self.keys, session)
        return [run_view(r) for r in records] if records else None

    async def chat(self, run_id: str) -> tuple[RunView, list[dict[str, Any]], bool] | None:
        with contextlib.suppress(UsageError):  # an id that cannot be a run's (braces, spaces)
            record = await self.runtime.journal.record(run_id)
            if record is None:
                return None
            messages = await self.runtime.journal.messages(run_id, record.msg_count)
            return run_view(record), [m.model_dump(mode="json") for m in messages], True
        return None

    async def cancel(self, session: str) -> list[str] | None:
        from shelly_dist.runtime.celery.children.cancel import cancel_session, end_orphaned_root

        with redis_errors("serve"):
            if not await self.client.exists(self.keys.session_runs(session)):
                return None
        roots = await cancel_session(self.client, self.keys, session)
        for root in roots:  # a root whose coordinator was killed would stay `running` forever
            task = asyncio.ensure_future(end_orphaned_root(self.client, self.keys, root))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return roots

    def events(self, session: str | None, after: str | None) -> AsyncIterator[tuple[str, Event]]:
        if session is None:
            global_position(after)  # a bad id is refused now, not once the stream has begun
            return every_session(self.client, self.keys, after)
        entry, skip = stream_position(after)
        return stream_after(self.client, self.keys, session, entry, skip)

    async def health(self) -> dict[str, Any]:
        with redis_errors("serve"):
            await self.client.ping()
        return {"ok": True, "backend": self.name, "queue": self.runtime.settings.queue}

    async def aclose(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._owns_runtime:
            await self.runtime.aclose()
