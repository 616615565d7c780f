"""Every exception shelly-dist raises, under one root.

The tree, so one ``except ShellyError`` catches everything the library means to raise::

    ShellyError
    ├── UsageError              a caller's mistake in using the library
    ├── ConfigError             engine: invalid config; the message names the field (exit 2)
    ├── ModelError              models/providers: .provider, .model
    │   ├── ModelHTTPError      .status_code, .body, .retry_after, .kind
    │   │   └── SpendLimitExceeded  a key's or a label's ``spend:`` refused the call: .limit, .scope
    │   └── ContextTooLong
    ├── ToolError               tools: .tool (the loop turns it into an is_error result)
    │   └── MCPError            .server
    ├── AgentError              agent: .agent
    │   ├── MaxIterationsExceeded
    │   ├── DelegationRejected
    │   ├── LoopDetected        a tool hook stopped the run
    │   ├── BudgetExhausted     an effect's hard limit: TokenBudgetExhausted, TimeBudgetExhausted
    │   │   └── LimitExceeded   a tree's ``limits:`` refused a model call: .limit, .scope
    │   ├── StallDetected       the stall_detect effect ended the run
    │   └── HookError           a lifecycle hook failed the run: .hook
    │       └── GuardrailError  a guardrail tripped (or failed): .guardrail
    ├── GuardrailTripped        raised by a user's guardrail to trip it (the run gets a GuardrailError)
    ├── StoreError              state/tasks: .key or .task_id
    │   └── SessionNotSaved     the run finished, its session was not saved: .outcome
    └── RunError                runtime: .run_id
        ├── RunCancelled        (exit 130)
        └── StepTimeout

Each error names its origin twice: in attributes and in the first words of its message
(``delegate: self-delegation is not allowed``). Texts that Shelly fixes are contracts and are kept
word for word. Errors that cross a process boundary travel as JSON via :func:`error_to_json`,
never pickled.
"""

from __future__ import annotations

from typing import Any


class ShellyError(Exception):
    """Root of every error shelly-dist raises on purpose."""


class UsageError(ShellyError):
    """The library was used wrongly by the calling code."""


class ConfigError(ShellyError):
    """The configuration is invalid. ``field`` is the dotted path of the offending field."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ModelError(ShellyError):
    """A model call failed. ``provider`` names the configured provider."""

    def __init__(self, message: str, *, provider: str = "", model: str = "") -> None:
        super().__init__(message)
        self.provider = provider
        self.model = model


class ModelHTTPError(ModelError):
    """The provider answered with an error status, or could not be reached.

    ``kind`` is the classification used by retry and fallback: one of ``rate_limit``,
    ``overloaded``, ``server``, ``timeout``, ``network``, ``auth``, ``billing``, ``bad_request``,
    ``context_overflow``.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        model: str = "",
        kind: str = "server",
        status_code: int | None = None,
        body: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, provider=provider, model=model)
        self.kind = kind
        self.status_code = status_code
        self.body = body
        self.retry_after = retry_after
        self.paused = False
        """The provider governor paused the key for this answer (a 429 with its wait): every
        process holds its calls to the key until then, so neither a retry's sleep nor a key
        cooldown needs to wait it out again."""


class SpendLimitExceeded(ModelHTTPError):
    """A ``spend:`` limit refused a model call before it was sent: ``limit`` is ``day_usd`` or
    ``month_usd``, ``scope`` what it limits (``provider "openai" key …``, ``label "nightly"``).
    Classified ``billing``: never retried; a fallback chain moves on to its next provider."""

    def __init__(self, message: str, *, provider: str = "", model: str = "", limit: str = "", scope: str = "") -> None:
        super().__init__(message, provider=provider, model=model, kind="billing")
        self.limit = limit
        self.scope = scope


class ContextTooLong(ModelError):
    """The request does not fit the model's context window (never retried, never falls back).

    Like :class:`ModelHTTPError` it carries ``kind`` (always ``context_overflow``),
    ``status_code`` and a ``body`` excerpt when it came from an HTTP answer.
    """

    kind = "context_overflow"

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        model: str = "",
        status_code: int | None = None,
        body: str = "",
    ) -> None:
        super().__init__(message, provider=provider, model=model)
        self.status_code = status_code
        self.body = body
        self.retry_after: float | None = None


class ToolError(ShellyError):
    """A tool failed; the agent loop turns it into an ``is_error`` tool result."""

    def __init__(self, message: str, *, tool: str = "") -> None:
        super().__init__(message)
        self.tool = tool


class MCPError(ToolError):
    """An MCP server failed to start, or a call to it failed."""

    def __init__(self, message: str, *, server: str = "", tool: str = "") -> None:
        super().__init__(message, tool=tool)
        self.server = server


class AgentError(ShellyError):
    """An agent's run failed. ``agent`` is the instance name."""

    def __init__(self, message: str, *, agent: str = "") -> None:
        super().__init__(message)
        self.agent = agent


class MaxIterationsExceeded(AgentError):
    """The ReAct loop ran ``max_iterations`` model calls without finishing."""

    def __init__(self, message: str = "agent: max iterations reached", *, agent: str = "") -> None:
        super().__init__(message, agent=agent)


class DelegationRejected(AgentError):
    """A whole ``delegate`` call was refused (self-delegation, depth)."""


class LoopDetected(AgentError):
    """A tool hook saw the same call repeat past its threshold and stopped the run."""


class BudgetExhausted(AgentError):
    """An effect's hard limit ended the run; a delegated child reports it as a failed completion
    (``Agent "x" exhausted its … budget without completing the task.``)."""

    budget = ""
    """The word in that sentence: ``token`` or ``time``."""
    default_message = "agent: budget exhausted"

    def __init__(self, message: str = "", *, agent: str = "") -> None:
        super().__init__(message or self.default_message, agent=agent)


class TokenBudgetExhausted(BudgetExhausted):
    """Shelly's ``ErrTokenBudgetExhausted``: the run's input and output tokens reached ``max_tokens``."""

    budget = "token"
    default_message = "agent: token budget exhausted"


class TimeBudgetExhausted(BudgetExhausted):
    """Shelly's ``ErrTimeBudgetExhausted``: the run's model time reached ``max_duration``."""

    budget = "time"
    default_message = "agent: time budget exhausted"


class LimitExceeded(BudgetExhausted):
    """A model call was refused by a tree's ``limits:`` before it was sent. ``limit`` names the
    dimension (``model_requests``, ``total_tokens``, ``cost_usd``), ``scope`` the run whose tree
    it bounds; the message says both: ``limits: tree of run 3f2a… reached model_requests 5``."""

    default_message = "limits: limit reached"

    def __init__(self, message: str = "", *, agent: str = "", limit: str = "", scope: str = "") -> None:
        super().__init__(message, agent=agent)
        self.limit = limit
        self.scope = scope
        self.budget = limit


class StallDetected(AgentError):
    """Shelly's ``ErrStallDetected``: the run kept producing the same results after a nudge."""

    def __init__(self, message: str = "agent: stall detected", *, agent: str = "") -> None:
        super().__init__(message, agent=agent)


class HookError(AgentError):
    """A lifecycle hook failed the run: ``hook <name> failed: <Type>: <message>``."""

    def __init__(self, message: str, *, agent: str = "", hook: str = "") -> None:
        super().__init__(message, agent=agent)
        self.hook = hook


class GuardrailError(HookError):
    """A guardrail stopped the run: ``guardrail <name> tripped: <reason>``, or failed itself
    (``guardrail <name> failed: <Type>: <message>``)."""

    def __init__(self, message: str, *, agent: str = "", guardrail: str = "") -> None:
        super().__init__(message, agent=agent, hook=guardrail)
        self.guardrail = guardrail


class GuardrailTripped(ShellyError):
    """Raised by a guardrail (``@input_guardrail``/``@output_guardrail``) to stop the run; the
    message is the reason, shown as ``guardrail <name> tripped: <reason>``."""


class StoreError(ShellyError):
    """A blackboard or task-board operation failed."""

    def __init__(self, message: str, *, key: str | None = None, task_id: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.task_id = task_id


class SessionNotSaved(StoreError):
    """A session's run finished but saving the conversation failed. ``outcome`` is the finished
    run's ``RunOutcome``, so the answer is not lost with the save (``shelly run`` prints it and
    names the failure); ``key`` is the session id."""

    def __init__(self, message: str, *, key: str, outcome: object) -> None:
        super().__init__(message, key=key)
        self.outcome = outcome


class RunError(ShellyError):
    """A run failed in the runtime. ``run_id`` names the run."""

    def __init__(self, message: str, *, run_id: str = "") -> None:
        super().__init__(message)
        self.run_id = run_id


class RunCancelled(RunError):
    """The run (or its whole tree) was cancelled."""


class RunNotFound(RunError):
    """The run's record is gone: never created, expired, or lost with Redis's data (a Redis
    restarted without persistence while the run was waited for)."""


class StepTimeout(RunError):
    """A step exceeded its time limit."""


_BY_NAME: dict[str, type[ShellyError]] = {
    cls.__name__: cls
    for cls in (
        ShellyError,
        UsageError,
        ConfigError,
        ModelError,
        ModelHTTPError,
        ContextTooLong,
        ToolError,
        MCPError,
        AgentError,
        MaxIterationsExceeded,
        DelegationRejected,
        LoopDetected,
        BudgetExhausted,
        TokenBudgetExhausted,
        TimeBudgetExhausted,
        LimitExceeded,
        StallDetected,
        HookError,
        GuardrailError,
        GuardrailTripped,
        StoreError,
        RunError,
        RunCancelled,
        StepTimeout,
    )
}


def error_to_json(exc: BaseException) -> dict[str, Any]:
    """Describe ``exc`` as plain JSON: type name, message and its origin attributes."""
    data: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    for attr in ("provider", "model", "kind", "status_code", "tool", "server", "agent", "run_id", "field",
                 "limit", "scope", "hook", "guardrail"):
        value = getattr(exc, attr, None)
        if value not in (None, ""):
            data[attr] = value
    return data


def error_from_json(data: dict[str, Any]) -> ShellyError:
    """Rebuild an error described by :func:`error_to_json` (unknown types become ``ShellyError``)."""
    cls = _BY_NAME.get(str(data.get("type")), ShellyError)
    exc = cls.__new__(cls)
    Exception.__init__(exc, data.get("message", ""))
    for key, value in data.items():
        if key not in ("type", "message"):
            setattr(exc, key, value)
    return exc
