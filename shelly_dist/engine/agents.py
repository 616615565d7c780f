"""Agent factories from config: the registry of one session.

:func:`build_registry` is the one function that turns a config into runnable agents. The CLI calls
it (through ``Engine.registry``) and so will a Celery worker rebuilding a session's agents, so it
depends on nothing but its arguments: no CLI state, no globals. Each factory call builds a
**fresh** :class:`~shelly_dist.agent.Agent` (own chat, own completer for scripted providers, own
loop detector) bound to the session's blackboard and task board.

``max_delegation_depth`` when the config omits it: Shelly's zero value (0 = cannot delegate) for
every agent **except** the entry agent of a team of two or more, which gets 1. A config that
names an entry agent and lists others clearly means it to delegate to them, and one level is the
safe minimum; deeper trees must be asked for explicitly, as the templates do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from shelly_dist.agent import Agent, AgentOptions, Registry
from shelly_dist.agent.effects import Effect
from shelly_dist.agent.limits import Budget
from shelly_dist.engine.config import forgive
from shelly_dist.engine.config_models import AgentConfig, Config, TeamConfig
from shelly_dist.engine.effects import build_effects
from shelly_dist.engine.extensions import hooks_for
from shelly_dist.engine.providers import Providers
from shelly_dist.engine.toolboxes import Toolboxes
from shelly_dist.events import EventSink
from shelly_dist.skills import SkillStore
from shelly_dist.state import blackboard_prompt
from shelly_dist.tasks import board_hook
from shelly_dist.tools.loopdetect import LoopDetector
from shelly_dist.tools.policy import ToolPolicy

if TYPE_CHECKING:
    from shelly_dist.engine.a2a.remote import RemoteAgent


def delegation_depth(config: Config, spec: AgentConfig) -> int:
    """The agent's ``max_delegation_depth``, with the default of the module docstring."""
    if spec.options.max_delegation_depth is not None:
        return spec.options.max_delegation_depth
    return 1 if spec.name == config.entry().name and len(config.agents) > 1 else 0


def config_warnings(config: Config, skills: SkillStore, env: Mapping[str, str] | None = None) -> list[str]:
    """Every warning about ``config`` with these skills loaded: the loader's (unknown keys,
    shadowed names) and one per skill an agent lists that has no folder (Shelly drops it).

    Under strict mode (``SHELLY_STRICT_CONFIG=1``) a missing skill is a ``ConfigError``.
    """
    missing = [
        (f"agents[{i}].skills[{spec.skills.index(name)}]", f'skill "{name}" has no folder in .shelly/skills')
        for i, spec in enumerate(config.agents)
        for name in skills.missing(spec.skills)
    ]
    return [*config.warnings, *forgive(missing, env, outcome=" (skipped, as Shelly does)")]


def tool_policy(spec: AgentConfig) -> ToolPolicy | None:
    """The agent's ``tools:`` rules, or ``None`` when it sets none."""
    t = spec.tools
    if t.allow is None and not t.deny and not t.deny_at_depth:
        return None
    return ToolPolicy(t.allow, t.deny, t.deny_at_depth)


def _sections(config: Config, spec: AgentConfig, toolboxes: Toolboxes, session: str) -> (
    Callable[[], Awaitable[list[str]]] | None
):
    if not spec.blackboard_in_prompt:
        return None
    store = toolboxes.stores.store(session)

    async def sections() -> list[str]:
        text = await blackboard_prompt(store)
        return [text] if text else []

    return sections


def build_registry(
    config: Config,
    *,
    session: str,
    providers: Providers,
    toolboxes: Toolboxes,
    skills: SkillStore,
    context: str = "",
    on_event: EventSink | None = None,
    remotes: Sequence[RemoteAgent] = (),
) -> Registry:
    """A registry with one factory per configured agent, bound to ``session``, and one per remote
    A2A agent (``remotes``).

    A skill an agent lists that is not loaded is skipped (see :func:`config_warnings`).
    """
    registry = Registry()
    # Without any ``limits:`` no run ever carries a scope, so no agent needs the ledger.
    limited = any(a.limits is not None and a.limits.any() for a in config.agents)

    board = board_hook(toolboxes.stores.board(session)) if config.uses_toolbox("tasks") else None
    reflections = toolboxes.stores.reflections(toolboxes.shelly_dir.reflections)
    for index, spec in enumerate(config.agents):
        chosen = skills.select(spec.skills)
        effects = build_effects(config, index, spec, offload=lambda: toolboxes.stores.offload(session))
        budget = Budget(toolboxes.stores.ledger(), spec.limits, providers.price_bound(spec.name),
                        providers.max_output_tokens(spec.name)) if limited else None

        def factory(
            spec: AgentConfig = spec, chosen: SkillStore = chosen, effects: list[Effect] = effects,
            budget: Budget | None = budget,
        ) -> Agent:
            options = AgentOptions(
                max_iterations=spec.options.max_iterations or 0,
                warn_iterations=spec.options.warn_iterations or 0,
                max_delegation_depth=delegation_depth(config, spec),
                max_handoffs=spec.options.max_handoffs or 0,
                interaction_mode=spec.options.interaction_mode,
                question_timeout=spec.options.question_timeout or 0.0,
                delegate_fail_fast=spec.options.delegate_fail_fast,
                max_children=5 if spec.options.max_children is None else spec.options.max_children,
                spawn_timeout=spec.options.spawn_timeout or 300.0,
                skills=chosen.skills(),
                context=context,
                tool_policy=tool_policy(spec),
                tool_hooks=[
                    LoopDetector(
                        warn_after=config.loop_detection.warn_after, stop_after=config.loop_detection.stop_after
                    )
                ],
                prompt_sections=_sections(config, spec, toolboxes, session),
                task_board=board,
                on_event=on_event,
                effects=effects,
                budget=budget,
                window=providers.window_for(spec.name),
                reflections=reflections,
                hooks=hooks_for(spec),
                session=session,
            )
            agent = Agent(
                spec.name,
                spec.description,
                spec.instructions,
                completer=providers.for_agent(spec.name),
                options=options,
            )
            agent.add_toolboxes(*toolboxes.for_agent(spec, session))
            if chosen.on_demand():
                agent.add_toolboxes(chosen.tools())
            return agent

        registry.register(
            spec.name,
            spec.description,
            factory,
            skills=list(spec.skills_tags or spec.skills),
            estimated_cost=spec.estimated_cost,
            max_concurrency=spec.max_concurrency,
        )
    for remote in remotes:
        register_remote(registry, remote, on_event)
    for team in config.teams:
        register_team(registry, team, providers, on_event)
    return registry


def register_team(registry: Registry, team: TeamConfig, providers: Providers, on_event: EventSink | None) -> None:
    """A team as a delegation target: an agent whose "model" is its coordinator
    (:class:`~shelly_dist.agent.reactor.Reactor`); its members are read from the registry when it
    is built, so teams may name teams registered after them."""
    from shelly_dist.agent.reactor import Member, Reactor

    c = team.coordinator

    def factory() -> Agent:
        members = [Member(m, entry.description if (entry := registry.get(m)) is not None else "")
                   for m in team.members]
        model = providers.for_team(team.name, c.provider) if c.kind == "llm" else None
        reactor = Reactor(team.name, members, kind=c.kind, rounds=c.rounds, max_rounds=c.max_rounds, model=model)
        return Agent(team.name, team.description, "", completer=reactor,
                     options=AgentOptions(max_delegation_depth=TEAM_DEPTH, behavioral_hints=False, on_event=on_event))

    registry.register(team.name, team.description, factory, skills=["team"])


TEAM_DEPTH = 64
"""A team may hand turns to its members at any depth (their own limits still hold for them)."""


def register_remote(registry: Registry, remote: RemoteAgent, on_event: EventSink | None) -> None:
    """A remote A2A agent as a delegation target: an agent with no tools whose one "model call" is
    the remote task (:class:`~shelly_dist.engine.a2a.remote.A2ACompleter`)."""
    from shelly_dist.engine.a2a.remote import A2ACompleter

    def factory() -> Agent:
        return Agent(remote.name, remote.description, "", completer=A2ACompleter(remote.config),
                     options=AgentOptions(on_event=on_event))

    registry.register(remote.name, remote.description, factory, skills=["a2a"])
