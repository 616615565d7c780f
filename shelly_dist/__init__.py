"""shelly-dist: teams of LLM agents, run in one process or across a Celery worker pool.

Everything a user script needs is importable from here; anything not listed in ``__all__`` may
change without notice.
"""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.agent import (
        Agent,
        AgentOptions,
        CompletionResult,
        DelegateEntry,
        Entry,
        Member,
        Reactor,
        Registry,
        Run,
        RunState,
        logger,
        output_guardrail,
        recovery,
        timeout,
    )
    from shelly_dist.chats import Chat, Document, Image, Message, Role, Text, ToolCall, ToolResult
    from shelly_dist.errors import (
        AgentError,
        BudgetExhausted,
        ConfigError,
        ContextTooLong,
        DelegationRejected,
        GuardrailError,
        GuardrailTripped,
        HookError,
        LimitExceeded,
        LoopDetected,
        MaxIterationsExceeded,
        MCPError,
        ModelError,
        ModelHTTPError,
        RunCancelled,
        RunError,
        SessionNotSaved,
        ShellyError,
        StallDetected,
        StepTimeout,
        StoreError,
        TimeBudgetExhausted,
        TokenBudgetExhausted,
        ToolError,
        UsageError,
    )
    from shelly_dist.events import Event
    from shelly_dist.extensions import BaseHook, RunContext, hook, input_guardrail, provider, tool
    from shelly_dist.models import Completer, Usage, UsageTracker
    from shelly_dist.providers import FunctionCompleter, ScriptedCompleter
    from shelly_dist.runtime import LocalRuntime, RunOutcome
    from shelly_dist.skills import Skill, SkillStore
    from shelly_dist.tools import Tool, ToolBox, schema_for, tool_from_model


__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentError",
    "AgentOptions",
    "BaseHook",
    "BudgetExhausted",
    "Chat",
    "Completer",
    "CompletionResult",
    "ConfigError",
    "ContextTooLong",
    "DelegateEntry",
    "DelegationRejected",
    "Document",
    "Entry",
    "Event",
    "FunctionCompleter",
    "GuardrailError",
    "GuardrailTripped",
    "HookError",
    "Image",
    "LimitExceeded",
    "LocalRuntime",
    "LoopDetected",
    "MCPError",
    "MaxIterationsExceeded",
    "Member",
    "Message",
    "ModelError",
    "ModelHTTPError",
    "Reactor",
    "Registry",
    "Role",
    "Run",
    "RunCancelled",
    "RunContext",
    "RunError",
    "RunOutcome",
    "RunState",
    "ScriptedCompleter",
    "SessionNotSaved",
    "ShellyError",
    "Skill",
    "SkillStore",
    "StallDetected",
    "StepTimeout",
    "StoreError",
    "Text",
    "TimeBudgetExhausted",
    "TokenBudgetExhausted",
    "Tool",
    "ToolBox",
    "ToolCall",
    "ToolError",
    "ToolResult",
    "Usage",
    "UsageError",
    "UsageTracker",
    "__version__",
    "hook",
    "input_guardrail",
    "logger",
    "output_guardrail",
    "provider",
    "recovery",
    "schema_for",
    "timeout",
    "tool",
    "tool_from_model",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
