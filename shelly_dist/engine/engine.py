"""The composition root: one :class:`Engine` wires config, skills, context, MCP, providers,
stores, toolboxes, the event bus and the runtime, and hands out sessions.

Nothing is written into ``.shelly/`` (it may be a read-only mount, DESIGN §3 rule 13): runtime
state goes to the state directory (:func:`~shelly_dist.engine.shellydir.state_dir`), saved
sessions to Redis when the engine has one.

Start-up follows Shelly: skills, the project context and the MCP connections load concurrently,
and one failing MCP server fails the whole start (the others are closed). The runtime is
:class:`~shelly_dist.runtime.LocalRuntime` unless ``distributed.broker_url`` (or
``SHELLY_BROKER_URL``) is set; then :func:`_open_distributed_runtime` is the single place that
reaches into ``shelly_dist.runtime.celery``, lazily, so the embedded path never imports Celery.

:meth:`Engine.registry_async` is what a Celery worker calls to rebuild a session's agents: it
depends only on the engine's config and collaborators (and, on a worker, the session's workflow
agents), never on CLI state, and is cached per session.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from shelly_dist import events, identity
from shelly_dist.agent import Registry
from shelly_dist.engine.a2a.remote import RemoteAgent, remote_agents
from shelly_dist.engine.agents import build_registry, config_warnings
from shelly_dist.engine.config import find_config, fingerprint, load_config, report
from shelly_dist.engine.config_models import Config, MCPServerConfig
from shelly_dist.engine.config_rules import shadowed_mcp_servers
from shelly_dist.engine.decisions import Decisions
from shelly_dist.engine.event_log import EventRecorder
from shelly_dist.engine.eventbus import EventBus
from shelly_dist.engine.legacy import permissions_file
from shelly_dist.engine.pricing import load_prices
from shelly_dist.engine.project_context import load_project_context
from shelly_dist.engine.providers import Providers
from shelly_dist.engine.session import Session
from shelly_dist.engine.session_cache import SessionCache
from shelly_dist.engine.sessions import ProviderInfo, SessionInfo, SessionStore, new_session_id
from shelly_dist.engine.shellydir import ShellyDir, state_dir
from shelly_dist.engine.stores import SessionStores
from shelly_dist.engine.team import StreamEvents, team_events, team_wakes
from shelly_dist.engine.toolboxes import Toolboxes
from shelly_dist.errors import UsageError
from shelly_dist.events import Event, EventSink
from shelly_dist.runtime import LocalRuntime, Runtime
from shelly_dist.runtime.local.steering import MemoryInbox
from shelly_dist.runtime.wake import Wakes
from shelly_dist.skills import SkillStore, load_skills
from shelly_dist.tools import ToolBox
from shelly_dist.tools.builtin.answers import WaitingAnswerer
from shelly_dist.tools.builtin.ask import Answerer, NoAnswerer, Request
from shelly_dist.tools.decisions import Approval

log = logging.getLogger(__name__)


async def _open_distributed_runtime(engine: Engine) -> Runtime:
    """The Celery runtime for ``engine``: the only place the engine reaches into
    ``shelly_dist.runtime.celery`` (imported lazily, so the embedded path never imports Celery).

    Provider cooldowns and the API keys' accounts (the provider governor) move to Redis too, so
    every worker and the coordinator share them.
    """
    from shelly_dist.engine.config_runtime import runtime_settings
    from shelly_dist.runtime.celery import open_runtime
    from shelly_dist.runtime.redis_cooldown import RedisCooldownStore
    from shelly_dist.state.governor import RedisGovernorStore
    from shelly_dist.state.spend import RedisSpendLedger

    settings = runtime_settings(engine.config)
    runtime = open_runtime(settings, fingerprint(engine.config))
    engine.providers.cooldowns = RedisCooldownStore(runtime.client, prefix=settings.key_prefix)
    engine.providers.governor = RedisGovernorStore(runtime.client, prefix=settings.key_prefix)
    engine.providers.spend = RedisSpendLedger(runtime.client, prefix=settings.key_prefix)
    return runtime


def _mcp_spec(server: MCPServerConfig) -> Any:
    from shelly_dist.tools.mcp import MCPServerSpec

    return MCPServerSpec(
        name=server.name,
        command=server.command or None,
        args=server.args,
        env=server.env,
        url=server.url or None,
        headers=server.headers,
        retry_on_crash=server.retry_on_crash,
    )


class Engine:
    """The wired application. Open with ``await Engine.open(...)``; close with ``aclose()``."""

    def __init__(
        self,
        config: Config,
        shelly_dir: ShellyDir,
        *,
        skills: SkillStore,
        context: str,
        mcp_clients: list[Any],
        mcp_toolboxes: Mapping[str, ToolBox],
    ) -> None:
        """Use :meth:`open`; this constructor does no I/O and sets ``runtime`` to local."""
        self.config = config
        self.shelly_dir = shelly_dir
        self.skills = skills
        self.context = context
        self.bus = EventBus()
        self.stores = SessionStores.from_config(config.distributed)
        self.sessions = session_store(self.stores, shelly_dir)
        self.providers = Providers(config, on_event=self.bus.publish)
        self.toolboxes = Toolboxes(config, shelly_dir, self.stores, mcp_toolboxes)
        self.toolboxes.responder.on_ask = self._announce_question
        self.runtime: Runtime = LocalRuntime()
        self.inbox = MemoryInbox()
        """The steering inboxes of the runs this process drives (``Session.steer`` embedded)."""
        self.decisions = Decisions(self)
        """People in the loop: list every pending decision, answer, approve or reject one or all,
        steer a run — the same calls embedded and on the pool (:class:`Decisions`)."""
        self.event_log: EventRecorder | None = None
        """Keeps the sessions' events in the state directory when no Redis stream does (embedded)."""
        self.wakes: Wakes | None = None
        """Who runs the team wakes that @mentions start: this process, or the pool (see ``team_wakes``)."""
        self._mcp_clients = mcp_clients
        self._mcp_started: set[str] | None = None
        """The MCP servers started when :meth:`open` was given a ``root`` on a pool (the others start
        when a session of an agent that uses them begins: :meth:`start_servers_for`); ``None``: all."""
        self._mcp_starting = asyncio.Lock()
        self.remote_agents: list[RemoteAgent] = []
        """The ``a2a_agents:`` with their cards' descriptions (read by :meth:`open`)."""
        self._registries: SessionCache[Registry] = SessionCache()
        self.session_config: Callable[[str], Awaitable[Config | None]] | None = None
        """Reads the config of one session when it widens the engine's (a workflow's inline agents,
        which a worker reads from the session's workspace: ``engine/worker.py``; ``None`` from it: the
        engine's). Async, so that read never blocks the worker's loop: set, it makes
        :meth:`registry_async` the way to a session's registry."""
        self._counter = itertools.count(1)
        self._closed = False

    @classmethod
    async def open(
        cls,
        config: Config | str | os.PathLike[str] | None = None,
        *,
        shelly_dir: str | os.PathLike[str] = ".shelly",
        runtime: Runtime | None = None,
        env: Mapping[str, str] | None = None,
        approver: object | None = None,
        answerer: Answerer | None = None,
        root: str | bool = False,
    ) -> Engine:
        """Load and wire everything; ``config`` is a ``Config``, a path, or ``None`` (find it).

        ``approver`` answers permission questions of the built-in tools (a
        ``shelly_dist.tools.permissions.Approver``); without one, anything not allowed by the
        config or ``.shelly/local/permissions.json`` is refused, as on a worker.

        ``answerer`` answers the agents' ``ask_user`` questions (a terminal prompt, or any
        ``shelly_dist.tools.builtin.ask.Answerer``). Without one, a question waits for
        ``Session.respond`` (Shelly's ``Session.Respond``), on both runtimes: embedded in this
        engine, on the pool in Redis (``shelly answer`` too), at most ``options.question_timeout``.
        ``NoAnswerer()`` says nobody in this process answers: embedded, each question is then an
        error result telling the model so; on the pool it still waits in Redis for ``shelly answer``.

        ``root``: the top-level agent this process runs first (``True``: the entry agent), as
        ``shelly run``, the chat and ``a2a serve`` do. On a pool its children run on the workers,
        which start the MCP servers their agents use, so only the servers of the root agent are
        started here; a session of another agent (a resumed one) starts its own when it begins
        (:meth:`start_servers_for`). Embedded, or with a root that is a team, every server starts
        at once as before.

        Raises ``ConfigError`` (bad config, unknown skill, distributed runtime missing) or the
        first failing MCP server's ``MCPError``; nothing is left open on failure.
        """
        sd = ShellyDir(Path(shelly_dir), state=state_dir(shelly_dir, {**os.environ, **env} if env else None))
        if not isinstance(config, Config):
            path = find_config(config, sd.root, env)
            config = await asyncio.to_thread(load_config, path, env)
        only = _servers_of_root(config, root) if runtime is None else None
        skills, context, clients = await asyncio.gather(
            asyncio.to_thread(_load_skills, sd),
            asyncio.to_thread(load_project_context, sd.root, config.context.max_external_file_size),
            _connect_mcp(config, only),
        )
        try:
            boxes = {c.name: await c.toolbox() for c in clients}
        except BaseException:
            await _close_mcp(clients)
            raise
        engine = cls(config, sd, skills=skills, context=context, mcp_clients=clients, mcp_toolboxes=boxes)
        engine._mcp_started = None if only is None else set(only)
        engine.toolboxes.approver = approver
        engine.toolboxes.responder.answerer = WaitingAnswerer() if answerer is None else answerer
        try:
            engine.toolboxes.permissions_file = await asyncio.to_thread(permissions_file, sd)
            # Prices before any agent is built: defaults, .shelly/local/pricing.yaml, config pricing:.
            engine.providers.prices = await asyncio.to_thread(load_prices, config, sd)
            await asyncio.to_thread(engine.toolboxes.prepare)
            report(config_warnings(config, skills, env))  # strict mode: raises ConfigError
            engine.remote_agents = await remote_agents(config.a2a_agents)
            if runtime is not None:
                engine.runtime = runtime
            elif config.distributed.broker_url:
                engine.runtime = await _open_distributed_runtime(engine)
            if engine.runtime.name == "local" and not engine.stores.shared:  # nothing else keeps them
                engine.event_log = EventRecorder(engine.bus, sd.sessions)
            engine.wakes = team_wakes(engine)
            engine.stores.on_post = engine.wakes.on_post
            engine.stores.on_event = team_events(engine)
            pool_answerer = getattr(engine.runtime, "answerer", None)
            if pool_answerer is not None and (answerer is None or isinstance(answerer, NoAnswerer)):
                # Nobody answers in this process: the top-level run's questions wait in Redis.
                engine.toolboxes.responder.answerer = pool_answerer
        except BaseException:
            await engine.aclose()
            raise
        log.info("engine started: %d agents, runtime %s", len(config.agents), engine.runtime.name)
        return engine

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the runtime, MCP clients, Redis client and HTTP client. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.wakes is not None:
                await self.wakes.aclose()
            if isinstance(self.stores.on_event, StreamEvents):  # its last events reach the stream
                await self.stores.on_event.aclose()
            await self.runtime.aclose()
            if self.event_log is not None:
                await self.event_log.aclose()
        finally:
            await _close_mcp(self._mcp_clients)
            await self.stores.aclose()
            from shelly_dist.providers import aclose_http_client

            await aclose_http_client()

    # -- agents ------------------------------------------------------------------------------

    def _announce_question(self, question: Request) -> None:
        """Publish an ``ask_user`` event (Shelly's) for ``question``, or ``approval_requested`` for a
        gated call's approval, from whoever is asking."""
        self.bus.publish(Event(
            kind=events.APPROVAL_REQUESTED if isinstance(question, Approval) else events.ASK_USER,
            agent=identity.agent_name(),
            session_id=identity.session_id(),
            run_id=identity.run_id(),
            data=question.event_data(),
        ))

    def event_sink(self, session: str) -> EventSink:
        """A sink that publishes to the engine's bus with ``session_id`` set to ``session``."""

        def sink(event: Event) -> None:
            if event.session_id != session:
                event = event.model_copy(update={"session_id": session})
            self.bus.publish(event)

        return sink

    def registry(self, session: str) -> Registry:
        """The registry of ``session``: every configured agent, bound to that session's stores.

        Cached per session (bounded by :meth:`bound_sessions`); safe to call from several threads.
        With a :attr:`session_config` reader (a worker) only a cached registry is returned: building
        one needs the session's config read first, which :meth:`registry_async` does off the loop's
        critical path (a registry built here would silently lack the workflow's inline agents).
        """
        if self.session_config is None:
            return self._registries.get(session, lambda: self._build_registry(session, None))
        found = self._registries.lookup(session)
        if found is None:
            raise RuntimeError(f"engine: the registry of session {session} is built by registry_async "
                               "(its workflow agents are read first)")
        return found

    async def registry_async(self, session: str) -> Registry:
        """:meth:`registry`, reading the session's own config first on a miss with the async
        :attr:`session_config` (one awaited read per session this process caches, where a
        synchronous read stalled every run of the worker's loop for a round trip, issue 27).

        Two concurrent misses of one session may both read; the cache keeps the first registry."""
        found = self._registries.lookup(session)
        if found is not None:
            return found
        widened = await self.session_config(session) if self.session_config is not None else None
        return self._registries.get(session, lambda: self._build_registry(session, widened))

    def _build_registry(self, session: str, widened: Config | None) -> Registry:
        """A new registry of ``session`` from the engine's config, or from ``widened`` (a
        workflow's inline agents added, on a worker) with the providers it adds."""
        config, providers = self.config, self.providers
        if widened is not None:
            config, providers = widened, self.providers.widened(widened)
        return build_registry(
            config,
            session=session,
            providers=providers,
            toolboxes=self.toolboxes,
            skills=self.skills,
            context=self.context,
            on_event=self.event_sink(session),
            remotes=self.remote_agents,
            inbox=self.inbox,
        )

    def bound_sessions(self, *, max_size: int, ttl: float) -> None:
        """Keep per-session objects (registries; store handles when the stores are in Redis) for
        at most ``max_size`` sessions, none unused for more than ``ttl`` seconds: a long-lived
        worker sees a new session per batch item. In-memory boards are never evicted."""
        self._registries.set_limits(max_size=max_size, ttl=ttl)
        self.stores.bound(max_size=max_size, ttl=ttl)

    def discard_session(self, session: str) -> None:
        """Forget everything held for ``session`` in this process (its registry, its boards; for
        in-memory boards, their data): for a caller that knows the session is over, such as an
        in-process batch item."""
        self._registries.discard(session)
        self.stores.discard(session)

    def cached_sessions(self) -> dict[str, int]:
        """How many sessions this engine holds objects for, by kind (for bounds checks and soaks)."""
        return {"registries": len(self._registries), **self.stores.cached_sessions()}

    def agent_name(self, agent: str | None = None) -> str:
        """``agent``, or the entry agent; an unknown name is a ``UsageError`` listing the known."""
        if not agent:
            return self.config.entry_agent if self.config.team(self.config.entry_agent) else self.config.entry().name
        if self.config.agent(agent) is None and self.config.team(agent) is None:
            known = ", ".join([a.name for a in self.config.agents] + [t.name for t in self.config.teams])
            raise UsageError(f'engine: unknown agent "{agent}" (known: {known})')
        return agent

    # -- sessions ----------------------------------------------------------------------------

    def session(self, id: str | None = None, agent: str | None = None, *, persist: bool = True) -> Session:
        """A new session with ``agent`` (default: the entry agent) under persisted id ``id``
        (default: a fresh 16-hex id)."""
        name = self.agent_name(agent)
        info = SessionInfo(id=id or new_session_id(), agent=name, provider=self._provider_info(name))
        return self._session(info, persist)

    async def start_servers_for(self, agent: str) -> None:
        """Start the MCP servers agent ``agent`` (an agent or a team of the config) uses that this
        engine has not started yet: an engine opened for one root on a pool (``root``) starts only
        that root's servers, and a session of another agent — a resumed session, an agent an MCP
        client or the console runs — starts its own before it begins. A no-op otherwise. The first
        failing server's ``MCPError`` is raised; nothing of this call is left open."""
        if self._mcp_started is None:
            return
        wanted = _servers_of_root(self.config, agent)
        names = {s.name for s in self.config.mcp_servers} if wanted is None else wanted
        async with self._mcp_starting:
            missing = names - self._mcp_started
            if not missing:
                return
            clients = await _connect_mcp(self.config, missing)
            try:
                boxes = {c.name: await c.toolbox() for c in clients}
            except BaseException:
                await _close_mcp(clients)
                raise
            self._mcp_clients.extend(clients)
            self.toolboxes.mcp.update(boxes)
            self._mcp_started |= missing

    async def resume_session(self, id: str, *, persist: bool = True) -> Session:
        """The saved session ``id`` with its messages restored after the system prompt.

        Keeps the persisted id and ``created_at``; later saves overwrite the same record. A
        missing session is a ``StoreError``; a saved agent no longer in the config a ``UsageError``.
        """
        info, messages = await self.sessions.load(id)
        self.agent_name(info.agent)
        await self.start_servers_for(info.agent)
        session = self._session(info, persist)
        session.restore(messages)
        return session

    def _session(self, info: SessionInfo, persist: bool) -> Session:
        agent = self.registry(info.id).spawn(info.agent, 0)
        return Session(self, name=f"session-{next(self._counter)}", agent=agent, info=info, persist=persist)

    def _provider_info(self, agent: str) -> ProviderInfo:
        spec = self.config.agent(agent)
        team = self.config.team(agent)
        if spec is None and team is not None:  # a team: its coordinator's model, if it has one
            provider = self.config.provider(team.coordinator.provider) or self.config.providers[0]
            return ProviderInfo(kind=provider.kind, model=provider.model)
        assert spec is not None
        provider = self.config.provider_for(spec)
        return ProviderInfo(kind=provider.kind, model=provider.model)


def session_store(stores: SessionStores, sd: ShellyDir) -> Any:
    """Where saved sessions go: Redis when the stores are shared (every process of a deployment
    sees them, and no directory needs to be writable), else the state directory."""
    if not stores.shared:
        return SessionStore(sd.sessions)
    from shelly_dist.engine.redis_sessions import RedisSessionStore

    return RedisSessionStore(stores.client, stores.keys, retention=stores.retention)


def _load_skills(sd: ShellyDir) -> SkillStore:
    skills = load_skills(sd.skills) if sd.skills.is_dir() else []
    return SkillStore(skills, work_dir=sd.project_root)


def _servers_of_root(config: Config, root: str | bool) -> set[str] | None:
    """The MCP servers a pool coordinator running only agent ``root`` needs (its toolboxes), or
    ``None`` for every server: embedded, no root given, or a root that is a team."""
    if root is False or not config.distributed.broker_url:
        return None
    name = config.entry_agent if root is True else root
    if name and config.team(name):
        return None
    spec = config.agent(name) if root is not True else config.entry()
    return None if spec is None else {box for box, _ in spec.toolbox_refs()}


async def _connect_mcp(config: Config, only: set[str] | None = None) -> list[Any]:
    """Connect every MCP server (of ``only``, when given) except those named like a built-in
    toolbox (whose name resolves to the built-in, as in Shelly, so nothing could reach their tools)."""
    shadowed = set(shadowed_mcp_servers(config))
    servers = [s for s in config.mcp_servers if s.name not in shadowed and (only is None or s.name in only)]
    if not servers:
        return []
    from shelly_dist.tools.mcp import connect_all

    return await connect_all([_mcp_spec(s) for s in servers])


async def _close_mcp(clients: list[Any]) -> None:
    if clients:
        from shelly_dist.tools.mcp import close_all

        await close_all(clients)
