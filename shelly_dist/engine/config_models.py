"""The config file's schema: Shelly's ``config.yaml`` keys plus shelly-dist's additions.

Shelly's keys and their meanings are kept exactly (§1.12), so a ``config.yaml`` written by Go
Shelly's tooling loads unchanged. That tooling writes every field, with Go's zero value where
nothing is set, so a zero here means what it means in Go:

- ``""`` for a duration (``rate_limit.base_delay``, ``batch.*``, ``options.question_timeout``)
  is "not set" (the default; no timeout for ``question_timeout``, as is ``0``);
- ``rate_limit.max_retries: 0`` is the default 3 retries, ``batch.max_batch_size: 0`` the
  default 100, ``context.max_external_file_size: 0`` the default 512 KB;
- ``null`` for a list, mapping or section is its empty value.

Unknown keys in Go's sections are dropped with a warning by the loader
(:mod:`shelly_dist.engine.config`), as Go ignores them; in shelly-dist's own sections
(``distributed``, ``permissions``, ``loop_detection``, an agent's ``tools``, a ``script``) they
stay errors (see :class:`Section`). Cross-field rules
(names that must exist, ranges that depend on each other) live in
:mod:`shelly_dist.engine.config_rules`; type and shape checks are here. Durations accept Go
syntax (``"1m30s"``, ``"500ms"``) or a number of seconds and are stored as float seconds.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, PrivateAttr, Tag

from shelly_dist.agent.limits import Limits
from shelly_dist.models.governor.spend import SpendLimit
from shelly_dist.models.pricing import PriceEntry

_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(value: Any) -> float:
    """Seconds from a Go duration string (``"5m"``, ``"1h30m"``, ``"0"``) or a number."""
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"invalid duration {value!r}")
    text = value.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(body):
        m = _GO_PART.match(body, pos)
        if not m:
            raise ValueError(f'invalid duration "{value}" (use Go syntax such as "30s", "5m", "1h30m")')
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    if not body:
        raise ValueError(f'invalid duration "{value}"')
    return sign * total


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""Float seconds, parsed from a Go duration string or a number."""


def _unset_if_empty(value: Any) -> Any:
    """Go writes ``""`` for a duration nobody set: that is "not set", not an invalid duration."""
    return None if isinstance(value, str) and not value.strip() else value


def _unset_if_zero(value: Any) -> Any:
    """Go's ``0`` for a field whose zero value means "the default"."""
    return None if value == 0 and not isinstance(value, bool) else value


OptionalDuration = Annotated[Duration | None, BeforeValidator(_unset_if_empty)]
"""A duration where ``""`` (Go's zero value) means not set."""

DefaultIfZero = Annotated[int | None, BeforeValidator(_unset_if_zero)]
"""An int where ``0`` (Go's zero value) means the default, stored as ``None``."""

DEFAULT_MAX_EXTERNAL_FILE_SIZE = 512 * 1024

BUILTIN_TOOLBOXES = ("state", "tasks", "team", "ask", "filesystem", "exec", "search", "git", "http", "notes")
EFFECT_KINDS = (
    "compact",
    "trim_tool_results",
    "observation_mask",
    "sliding_window",
    "loop_detect",
    "reflection",
    "progress",
    "tool_scope",
    "offload",
    "token_budget",
    "time_budget",
    "stall_detect",
)
PROVIDER_KINDS = ("anthropic", "openai", "grok", "gemini", "scripted")
INTERACTION_MODES = ("", "auto", "interactive", "blocking")
ESTIMATED_COSTS = ("", "cheap", "medium", "expensive")
DEFAULT_CONTEXT_WINDOWS = {"anthropic": 200_000, "openai": 128_000, "grok": 131_072, "gemini": 1_048_576}


class Section(BaseModel):
    """Base of every config section. ``go_section``: a section Go Shelly's configs hold, whose
    unknown keys the loader drops with a warning as Go does; in shelly-dist's own sections
    (``OursSection``) an unknown key stays an error, since no Go config holds them and a typo
    there (``distributed: {broker_ur: …}``) would silently change where runs execute."""

    model_config = ConfigDict(extra="forbid")
    go_section: ClassVar[bool] = True


class OursSection(Section):
    """A section only shelly-dist configs have: unknown keys are errors ("did you mean")."""

    go_section: ClassVar[bool] = False


# --- providers ------------------------------------------------------------------------------


class RateLimit(Section):
    """One API key's limits (per model), shared by every process of a pool (the provider governor)."""

    input_tpm: int = Field(0, ge=0)
    output_tpm: int = Field(0, ge=0)
    rpm: int = Field(0, ge=0)
    max_concurrent: int = Field(0, ge=0)
    """Calls in flight at once on one key (ours; 0: no limit)."""
    max_retries: DefaultIfZero = Field(None, ge=1)
    """``None`` (or Go's 0) = 3 retries."""
    base_delay: OptionalDuration = None


BATCH_APIS = ("openai", "anthropic")
OPENAI_ROOTS = ("", "https://api.openai.com", "https://api.openai.com/v1")
"""``base_url`` values that are OpenAI itself (whose Batch API is known to be there)."""


class Batch(Section):
    """Shelly's ``batch:`` block: the provider's model calls go through the vendor's batch API."""

    enabled: bool = False
    collect_window: OptionalDuration = None
    poll_interval: OptionalDuration = None
    timeout: OptionalDuration = None
    max_batch_size: DefaultIfZero = Field(None, ge=1)
    """``None`` (or Go's 0) = 100."""
    api: Literal["", "openai", "anthropic"] = ""
    """Which batch API the server speaks (ours): ``""`` = the vendor's own (OpenAI's for ``kind:
    openai`` at OpenAI, Anthropic's); ``openai`` says an OpenAI-compatible server (``base_url``)
    implements OpenAI's ``/v1/files`` and ``/v1/batches``."""


class ScriptToolCall(OursSection):
    """A tool call a scripted model makes; ``arguments`` is an object or raw JSON text."""

    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: str = ""


class ScriptStep(OursSection):
    """One scripted reply in mapping form (see ``shelly_dist.providers.scripted``)."""

    text: str = ""
    tool_calls: list[ScriptToolCall] = Field(default_factory=list)
    delay: float = Field(0.0, ge=0)
    error: str = ""
    until: str = ""
    """A file path: the reply waits until that file exists (tests and demos)."""
    mark: str = ""
    """A file path the call creates as it starts: a test knows the call is in flight."""
    suspend: float | Literal["reply"] | None = None
    """The call suspends its run the first time it is asked: for that many seconds, or (``reply``)
    until a reply is delivered for it (a model call that must wait: tests and demos)."""


def _str_or_obj(value: Any) -> str:
    """Discriminates the "string or mapping" unions; ``~`` tags are dropped from error paths."""
    return "~str" if isinstance(value, str) else "~obj"


ScriptReply = Annotated[
    Annotated[str, Tag("~str")] | Annotated[ScriptStep, Tag("~obj")],
    Discriminator(_str_or_obj),
]


class ProviderConfig(Section):
    name: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    base_url: str = ""
    api_key: str = ""
    api_keys: list[str] = Field(default_factory=list)
    """Extra keys rotated on rate limits (ours)."""
    model: str = ""
    context_window: int | None = None
    """``None`` = the kind's default; 0 = no compaction."""
    max_tokens: int | None = None
    rate_limit: RateLimit | None = None
    batch: Batch | None = None
    fallback: list[str] = Field(default_factory=list)
    """Names of providers tried in order when this one fails (ours)."""
    timeout: Duration | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    prompt_cache: bool = True
    """Mark the tools and system prompt as cacheable where the vendor needs it said (Anthropic's
    ``cache_control`` breakpoints; ours). Other vendors cache a repeated prefix on their own."""
    stream: bool = True
    """Stream replies when a person watches the run (the chat, ``shelly run``'s live view, an A2A
    stream; ours); ``false`` always waits for the whole answer. Batch work never streams."""
    script: dict[str, list[ScriptReply]] = Field(default_factory=dict)
    """``kind: scripted`` only: replies per agent config name; key ``"*"`` serves any other agent."""
    options: dict[str, Any] = Field(default_factory=dict)
    """A ``@provider`` kind's own settings, handed to its factory as ``options=`` (ours)."""
    spend: SpendLimit | None = None
    """USD each of its keys may spend per UTC day and month, across the pool (ours)."""

    def batch_api(self, *, force: bool = False) -> str | None:
        """The batch API this provider's calls go through (``openai``/``anthropic``), or ``None``:
        batches off, or no batch API known for it (the config rules warn then; calls go direct).
        ``force``: the API its calls would go through with ``batch.enabled`` (``--provider-batch``)."""
        if not force and (self.batch is None or not self.batch.enabled):
            return None
        if self.batch is not None and self.batch.api:
            return self.batch.api
        if self.kind == "anthropic":
            return "anthropic"
        if self.kind == "openai" and self.base_url.rstrip("/") in OPENAI_ROOTS:
            return "openai"
        return None

    def keys(self) -> list[str]:
        """``api_key`` then ``api_keys``, empty and repeated ones dropped."""
        return list(dict.fromkeys(k for k in [self.api_key, *self.api_keys] if k))

    def script_for(self, agent: str) -> list[str | ScriptStep] | None:
        """The scripted replies for ``agent`` (falling back to ``"*"``), or ``None``."""
        return self.script.get(agent, self.script.get("*"))


class MCPServerConfig(Section):
    name: str = Field(min_length=1)
    command: str = ""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    retry_on_crash: bool = False
    """The server's tools are safe to run again after a worker died while one ran."""


class A2AAgentConfig(OursSection):
    """A remote A2A agent other agents may delegate to like a local one (``a2a_agents:``)."""

    name: str = Field(min_length=1)
    """How our agents call it (``delegate``, ``list_agents``)."""
    url: str = Field(min_length=1)
    """Its base URL: the Agent Card is read from ``<url>/.well-known/agent-card.json``."""
    token: str = ""
    """Bearer token its server requires (``${VAR}`` to keep it out of the file)."""
    description: str = ""
    """Overrides the card's description in ``list_agents`` (default: the card's)."""
    timeout: float = Field(600.0, gt=0)
    """Seconds a delegated task may take before it is cancelled and fails."""


# --- agents ---------------------------------------------------------------------------------


class ToolboxSpec(Section):
    """``{name, tools}``: a toolbox restricted to some of its tools."""

    name: str = Field(min_length=1)
    tools: list[str] | None = None


ToolboxRef = Annotated[
    Annotated[str, Tag("~str")] | Annotated[ToolboxSpec, Tag("~obj")],
    Discriminator(_str_or_obj),
]
"""A toolbox reference: a name, or ``{name, tools}``. Dumps back in the form it was given."""


class EffectConfig(Section):
    kind: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)


class AgentOptions(Section):
    max_iterations: int | None = Field(None, ge=0)
    warn_iterations: int | None = Field(None, ge=0)
    max_delegation_depth: int | None = Field(None, ge=0)
    max_handoffs: int | None = Field(None, ge=0)
    context_threshold: float = 0.0
    """0 = the default (0.8); otherwise strictly between 0 and 1."""
    interaction_mode: str = ""
    question_timeout: OptionalDuration = None
    """Seconds to wait for an answer to ``ask_user``; ``None``, ``""`` or 0 = no limit."""
    delegate_fail_fast: bool = False
    max_children: int | None = Field(None, ge=0)
    """Spawned children running at once per parent (ours; ``None``: 5); one more is rejected."""
    spawn_timeout: OptionalDuration = None
    """Seconds a spawned child may run before it is cancelled and announced as failed (``None``: 300)."""


class ToolPolicy(OursSection):
    """Which tools an agent may call (ours). ``allow`` ``None`` = everything not denied.

    Entries are tool names or ``group:<name>``. ``deny_at_depth`` maps a depth to tools denied
    when the agent runs at that depth or deeper (``{1: [delegate]}``: no delegating as a child).
    """

    allow: list[str] | None = None
    deny: list[str] = Field(default_factory=list)
    deny_at_depth: dict[int, list[str]] = Field(default_factory=dict)


class ApprovalConfig(OursSection):
    """``approval: {tools: [...], timeout: 10m}`` (ours): the tools a person approves before each
    call runs — a name or glob, ``group:<g>``, or ``toolbox:<t>`` (every tool of a toolbox the
    agent lists) — and how long a call waits for the verdict (``None``: no limit; past it the call
    is rejected, ``approval timed out``)."""

    tools: list[str] = Field(default_factory=list)
    timeout: OptionalDuration = None


class Guardrails(OursSection):
    """``guardrails: {input: [...], output: [...]}``: names registered with ``@input_guardrail`` /
    ``@output_guardrail`` in a module of ``python:``."""

    input: list[str] = Field(default_factory=list)
    output: list[str] = Field(default_factory=list)


class AgentConfig(Section):
    name: str = Field(min_length=1)
    description: str = ""
    instructions: str = ""
    provider: str = ""
    """Provider name; "" = the first provider."""
    prefix: str = ""
    toolboxes: list[ToolboxRef] = Field(default_factory=list)
    skills: list[str] = Field(default_factory=list)
    """A filter over ``.shelly/skills``; empty = all skills."""
    effects: list[EffectConfig] = Field(default_factory=list)
    skills_tags: list[str] = Field(default_factory=list)
    estimated_cost: str = ""
    max_concurrency: int = 0
    options: AgentOptions = Field(default_factory=AgentOptions)
    blackboard_in_prompt: bool = False
    """Show the blackboard's keys in the system prompt (ours)."""
    tools: ToolPolicy = Field(default_factory=ToolPolicy)
    limits: Limits | None = None
    """Bounds on this agent's runs and everything they delegate, on any worker (ours)."""
    hooks: list[str] = Field(default_factory=list)
    """Names of ``@hook`` classes from the modules of ``python:``, called in this order (ours)."""
    guardrails: Guardrails = Field(default_factory=Guardrails)
    approval: ApprovalConfig | None = None
    """Tools a person approves before each call (ours): see :class:`ApprovalConfig`."""

    def toolbox_refs(self) -> list[tuple[str, list[str] | None]]:
        """Each toolbox as (name, tool filter or ``None`` for all tools), in config order."""
        return [(t, None) if isinstance(t, str) else (t.name, t.tools) for t in self.toolboxes]

    def toolbox_names(self) -> list[str]:
        return [name for name, _ in self.toolbox_refs()]


# --- top level ------------------------------------------------------------------------------


class FilesystemConfig(Section):
    permissions_file: str = ""


def _default_if_zero_size(value: Any) -> Any:
    return DEFAULT_MAX_EXTERNAL_FILE_SIZE if value == 0 and not isinstance(value, bool) else value


class ContextConfig(Section):
    max_external_file_size: Annotated[int, BeforeValidator(_default_if_zero_size)] = Field(
        DEFAULT_MAX_EXTERNAL_FILE_SIZE, ge=0
    )
    """Bytes read per external context file; 0 (Go's zero value) = the default 512 KB."""


class GitConfig(Section):
    work_dir: str = ""


class PermissionsConfig(OursSection):
    """Pre-approved permissions (ours), merged with ``.shelly/local/permissions.json``."""

    fs_directories: list[str] = Field(default_factory=list)
    trusted_commands: list[str] = Field(default_factory=list)
    trusted_domains: list[str] = Field(default_factory=list)
    exec_env: list[str] = Field(default_factory=list)
    """Environment variables ``exec_run`` and the git tools pass on to programs, besides PATH, HOME
    and LANG (ours): provider keys and the Redis password never reach a program unless listed."""


class LoopDetectionConfig(OursSection):
    warn_after: int | None = Field(None, ge=1)
    stop_after: int | None = Field(None, ge=1)


class DistributedConfig(OursSection):
    """Where the distributed runtime finds its broker and Redis. No ``broker_url`` = embedded."""

    broker_url: str = ""
    result_backend: str = ""
    redis_url: str = ""
    """State, journals and events; defaults to ``broker_url`` when that is a Redis URL."""
    queue: str = Field("shelly", min_length=1)
    step_time_limit: Duration = Field(600.0, gt=0)
    visibility_timeout: Duration | None = None
    """The Redis broker's redelivery delay: only a backstop (runs are recovered by lease expiry)."""
    lease: Duration = Field(10.0, gt=0)
    """Seconds a run stays with a worker that stopped renewing it; recovery after a crash takes
    about this plus two seconds."""
    retention: Duration = Field(7 * 24 * 3600.0, gt=0)
    key_prefix: str = "shelly:"
    max_deliveries: int | None = Field(None, ge=1)
    task_events: bool = False
    """Workers send Celery's task events (received, started, succeeded/failed), from which Flower
    builds its task list. Off by default, as in Celery (they cost about a fifth of a worker's CPU
    per child in ``python -m bench``); turn them on (``true``, or ``shelly worker -E``) where
    Flower runs: without them Flower lists the workers but no tasks."""

    def effective_redis_url(self) -> str:
        if self.redis_url:
            return self.redis_url
        return self.broker_url if self.broker_url.startswith(("redis://", "rediss://", "unix://")) else ""

    def effective_visibility_timeout(self) -> float:
        """``visibility_timeout``, or the step limit plus five minutes."""
        return self.visibility_timeout if self.visibility_timeout is not None else self.step_time_limit + 300


class CoordinatorConfig(OursSection):
    """Who acts next in a team: each member once in order, ``rounds`` passes, or an LLM."""

    kind: Literal["sequential", "round_robin", "llm"] = "sequential"
    rounds: int = Field(1, ge=1)
    """``round_robin``: passes over the members."""
    provider: str = ""
    """``llm``: the provider whose model decides (a scripted provider's script is keyed by the team name)."""
    max_rounds: int = Field(6, ge=1)
    """``llm``: the most rounds; reaching it ends the team with the conversation so far and a warning."""


class TeamConfig(OursSection):
    """A team (ours): members over a shared conversation, usable wherever an agent name is."""

    name: str = Field(min_length=1)
    description: str = ""
    members: list[str] = Field(min_length=1)
    """Agents or other teams, in roster order."""
    coordinator: CoordinatorConfig = Field(default_factory=CoordinatorConfig)


class Config(Section):
    """A whole validated config. Build it with :func:`shelly_dist.engine.config.load_config`."""

    providers: list[ProviderConfig] = Field(default_factory=list)
    mcp_servers: list[MCPServerConfig] = Field(default_factory=list)
    agents: list[AgentConfig] = Field(default_factory=list)
    entry_agent: str = ""
    filesystem: FilesystemConfig = Field(default_factory=FilesystemConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    git: GitConfig = Field(default_factory=GitConfig)
    default_context_windows: dict[str, int] = Field(default_factory=dict)
    permissions: PermissionsConfig = Field(default_factory=PermissionsConfig)
    loop_detection: LoopDetectionConfig = Field(default_factory=LoopDetectionConfig)
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)
    a2a_agents: list[A2AAgentConfig] = Field(default_factory=list)
    """Remote A2A agents, delegation targets like the local ones (ours)."""
    python: list[str] = Field(default_factory=list)
    """Modules (dotted names) every process imports before building agents; their top-level names
    are found in the project directory (the parent of ``.shelly/``), nothing else of it is
    importable (ours: :mod:`shelly_dist.engine.extensions`)."""
    teams: list[TeamConfig] = Field(default_factory=list)
    """Teams of agents (ours; docs/teams.md), usable wherever an agent name is."""
    _warnings: list[str] = PrivateAttr(default_factory=list)
    _knowledge_writes: bool = PrivateAttr(default=False)

    @property
    def warnings(self) -> list[str]:
        """What the loader forgave (unknown keys, shadowed names), one ``config: <path>: …``
        line each; skills that do not exist are found later, by the engine."""
        return self._warnings

    @property
    def knowledge_writes(self) -> bool:
        """Whether tools may write the project's knowledge (``.shelly/context.md`` and
        ``.shelly/knowledge/``) — set only by ``shelly index``, whose job that is; never read from
        a file, so no config an agent could reach grants it (DESIGN §3 rule 16)."""
        return self._knowledge_writes

    def allow_knowledge_writes(self) -> None:
        """Let this config's tools write ``.shelly/context.md`` and ``.shelly/knowledge/``."""
        self._knowledge_writes = True
    spend: dict[str, SpendLimit] = Field(default_factory=dict)
    """USD per UTC day and month of each label: the trees of ``shelly batch --label NAME`` (ours)."""
    pricing: list[PriceEntry] = Field(default_factory=list)
    """Price overrides (USD per million tokens) merged over the defaults by provider kind and
    model prefix (ours; Go reads only ``.shelly/local/pricing.yaml``, which is read too)."""

    def agent(self, name: str) -> AgentConfig | None:
        return next((a for a in self.agents if a.name == name), None)

    def team(self, name: str) -> TeamConfig | None:
        return next((t for t in self.teams if t.name == name), None)

    def provider(self, name: str) -> ProviderConfig | None:
        return next((p for p in self.providers if p.name == name), None)

    def entry(self) -> AgentConfig:
        """The ``entry_agent``, else the first agent (a validated config always has one)."""
        return (self.agent(self.entry_agent) if self.entry_agent else None) or self.agents[0]

    def provider_for(self, agent: AgentConfig) -> ProviderConfig:
        """The agent's provider, else the first provider."""
        return (self.provider(agent.provider) if agent.provider else None) or self.providers[0]

    def context_window(self, provider: ProviderConfig) -> int:
        """The provider's window: its own, else ``default_context_windows[kind]``, else the kind's."""
        if provider.context_window is not None:
            return provider.context_window
        if provider.kind in self.default_context_windows:
            return self.default_context_windows[provider.kind]
        return DEFAULT_CONTEXT_WINDOWS.get(provider.kind, 0)

    def learns_window(self, provider: ProviderConfig) -> bool:
        """Whether the provider's window is read from its server: an OpenAI-compatible server of
        its own (``kind: openai`` with a ``base_url`` that is not OpenAI's) for which neither the
        provider nor ``default_context_windows`` says a window — its kind's 128,000 would be a
        guess, and a local server's window is what it was started with."""
        return (provider.kind == "openai" and provider.context_window is None
                and provider.kind not in self.default_context_windows
                and bool(provider.base_url) and "api.openai.com" not in provider.base_url)

    def uses_toolbox(self, name: str) -> bool:
        """Whether any agent references toolbox ``name`` (builtins are built only then)."""
        return any(name in a.toolbox_names() for a in self.agents)
