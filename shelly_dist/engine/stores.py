"""Where a session's blackboard and task board live: in this process, or in Redis.

One board per session, the same object for every agent of that session in this process (and, with
Redis, the same keys for the coordinator and every worker). The backend is chosen once per engine:
Redis when the config names one (``distributed.redis_url``, or a Redis ``broker_url``), memory
otherwise. Each backend's module is imported when its first store is built: redis never on a
laptop's ``shelly run``, and the memory stores (the chat types, the tools under them) never in
``shelly state get`` (STYLE lesson 21). Stores are created on first use: a session whose agents
never reference ``state``/``tasks`` never has any (behaviour 83).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shelly_dist.engine.session_cache import SessionCache
from shelly_dist.events import Event, EventSink
from shelly_dist.redisio.keys import Keys

if TYPE_CHECKING:
    from shelly_dist.agent.effects.offload import OffloadStore
    from shelly_dist.agent.limits import BudgetLedger
    from shelly_dist.agent.reflections import ReflectionStore
    from shelly_dist.engine.config_models import DistributedConfig
    from shelly_dist.state import Store
    from shelly_dist.tasks import Board
    from shelly_dist.workspace import ChannelMessage, Workspace
    from shelly_dist.workspace.due import DueIndex


class SessionStores:
    """Blackboards and task boards by session id; memory, or Redis when ``redis_url`` is given."""

    def __init__(self, *, redis_url: str = "", key_prefix: str = "shelly:", retention: float = 0) -> None:
        self.redis_url = redis_url
        self.keys = Keys(key_prefix)
        self.retention = retention
        self._lock = threading.Lock()
        self._stores: SessionCache[Store] = SessionCache()
        self._boards: SessionCache[Board] = SessionCache()
        self._offload: SessionCache[OffloadStore] = SessionCache()
        self._workspaces: SessionCache[Workspace] = SessionCache()
        self._ledger: BudgetLedger | None = None
        self._due: DueIndex | None = None
        self._reflections: ReflectionStore | None = None
        self._client: Any = None
        self.on_event: EventSink | None = None
        """Where the workspaces' events go (posts, acks, wakes): the engine's bus embedded, the
        session's stream on a pool."""
        self.on_post: Callable[[str, ChannelMessage, list[str]], Awaitable[None]] | None = None
        """Told of every team post that lands in some inbox, with its session (set by the
        engine or the worker to start wakes: ``runtime/local/wakes.py``, ``runtime/celery/children/wakes.py``)."""

    @classmethod
    def from_config(cls, cfg: DistributedConfig) -> SessionStores:
        return cls(redis_url=cfg.effective_redis_url(), key_prefix=cfg.key_prefix, retention=cfg.retention)

    @property
    def shared(self) -> bool:
        """True when the stores are in Redis (visible to other processes)."""
        return bool(self.redis_url)

    def client(self) -> Any:
        """The Redis client (opened on first use); only when :attr:`shared`."""
        return self._redis()

    def _redis(self) -> Any:
        if self._client is None:
            from shelly_dist.redisio.connection import connect

            self._client = connect(self.redis_url, client_name="shelly-engine")
        return self._client

    def _options(self, session: str) -> dict[str, Any]:
        opts: dict[str, Any] = {"session": session}
        if self.retention:
            opts["retention"] = int(self.retention)
        return opts

    def store(self, session: str) -> Store:
        """The blackboard of ``session`` (created on first use)."""
        return self._cached(self._stores, session, "shelly_dist.state.memory:MemoryStore",
                            "shelly_dist.state.redis:RedisStore")

    def board(self, session: str) -> Board:
        """The task board of ``session`` (created on first use)."""
        return self._cached(self._boards, session, "shelly_dist.tasks.memory:MemoryBoard",
                            "shelly_dist.tasks.redis:RedisBoard")

    def workspace(self, session: str) -> Workspace:
        """The team workspace of ``session`` (channel, inboxes, documents; created on first use).
        Its posts that land in an inbox are passed to :attr:`on_post` (the runtime's wakes)."""
        def build() -> Workspace:
            if self.shared:
                from shelly_dist.workspace.redis import RedisWorkspace

                ws: Workspace = RedisWorkspace(self._redis(), self.keys, **self._options(session))
            else:
                from shelly_dist.workspace.memory import MemoryWorkspace

                ws = MemoryWorkspace()

            async def posted(message: ChannelMessage, agents: list[str]) -> None:
                if self.on_post is not None:
                    await self.on_post(session, message, agents)

            def observed(kind: str, agent: str, data: dict[str, Any]) -> None:
                if self.on_event is not None:
                    self.on_event(Event(kind=kind, agent=agent, session_id=session, data=data))

            ws.listeners.append(posted)
            ws.observers.append(observed)
            return ws

        return self._workspaces.get(session, build)

    def due_index(self) -> DueIndex:
        """The team schedules' due index of this engine (every session): Redis when shared."""
        with self._lock:
            if self._due is None:
                if self.shared:
                    from shelly_dist.workspace.redis import RedisDueIndex

                    retention = {"retention": int(self.retention)} if self.retention else {}
                    self._due = RedisDueIndex(self._redis(), self.keys, **retention)
                else:
                    from shelly_dist.workspace.due import MemoryDueIndex

                    self._due = MemoryDueIndex()
            return self._due

    def offload(self, session: str) -> OffloadStore:
        """Where the ``offload`` effect of ``session`` keeps results (Redis when shared)."""
        return self._cached(self._offload, session, "shelly_dist.agent.effects.offload:MemoryOffloadStore",
                            "shelly_dist.state.offload:RedisOffloadStore")

    def ledger(self) -> BudgetLedger:
        """The tree-limits ledger of this engine (every session): Redis when shared, so the
        coordinator and every worker reserve against the same totals."""
        with self._lock:
            if self._ledger is None:
                if self.shared:
                    from shelly_dist.state.limits import RedisLedger

                    retention = {"retention": int(self.retention)} if self.retention else {}
                    self._ledger = RedisLedger(self._redis(), self.keys, **retention)
                else:
                    from shelly_dist.agent.limits.memory import MemoryLedger

                    self._ledger = MemoryLedger()
            return self._ledger

    def reflections(self, directory: Path) -> ReflectionStore:
        """Where notes of failed children go: Redis when shared (every worker of this config
        sees them), else files in ``directory`` (in the state directory)."""
        with self._lock:
            if self._reflections is None:
                if self.shared:
                    from shelly_dist.state.reflections import RedisReflectionStore

                    retention = {"retention": int(self.retention)} if self.retention else {}
                    self._reflections = RedisReflectionStore(self._redis(), self.keys, **retention)
                else:
                    from shelly_dist.engine.reflections import DirectoryReflectionStore

                    self._reflections = DirectoryReflectionStore(directory)
            return self._reflections

    def _cached(self, cache: SessionCache[Any], session: str, memory: str, redis: str) -> Any:
        """``session``'s store from ``cache``, built on first use from the class ``redis`` (when
        shared) or ``memory`` names as ``module:Class``."""
        def build() -> Any:
            module, _, name = (redis if self.shared else memory).partition(":")
            cls = getattr(importlib.import_module(module), name)
            return cls(self._redis(), self.keys, **self._options(session)) if self.shared else cls()

        return cache.get(session, build)

    def has(self, session: str) -> bool:
        """Whether any store or board of ``session`` is held in this process."""
        return session in self._stores or session in self._boards

    def discard(self, session: str) -> None:
        """Forget ``session``'s blackboard and task board handles (in memory: their data too)."""
        self._stores.discard(session)
        self._boards.discard(session)
        self._offload.discard(session)
        self._workspaces.discard(session)

    def bound(self, *, max_size: int, ttl: float) -> None:
        """Forget Redis-backed handles beyond ``max_size`` sessions or unused for ``ttl`` seconds
        (a handle is rebuilt on next use; the data is in Redis). Memory stores are the only copy
        of their data and are never evicted."""
        if self.shared:
            self._stores.set_limits(max_size=max_size, ttl=ttl)
            self._boards.set_limits(max_size=max_size, ttl=ttl)
            self._offload.set_limits(max_size=max_size, ttl=ttl)
            self._workspaces.set_limits(max_size=max_size, ttl=ttl)

    def cached_sessions(self) -> dict[str, int]:
        """Sessions with a blackboard, and with a task board, held in this process."""
        return {"stores": len(self._stores), "boards": len(self._boards)}

    async def aclose(self) -> None:
        """Close the Redis client, if one was opened. Idempotent."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
