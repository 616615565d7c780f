"""Python extensions: tools, hooks, guardrails and provider kinds a user's module registers by name.

A config's ``python:`` list names modules every process imports before it builds agents (the
engine does the importing: :mod:`shelly_dist.engine.extensions`); this package holds only what
those modules and the step machine need: the decorators, the registry they fill, the
:class:`RunContext` a hook is given, and guardrails expressed as hooks.
"""

from typing import TYPE_CHECKING

from shelly_dist._lazy import lazy_exports

if TYPE_CHECKING:
    from shelly_dist.extensions.context import HOOK_POINTS, BaseHook, Hook, RunContext
    from shelly_dist.extensions.decorators import hook, input_guardrail, output_guardrail_named, provider, tool
    from shelly_dist.extensions.function_tool import tool_from_function
    from shelly_dist.extensions.guardrails import GuardrailHook
    from shelly_dist.extensions.registry import REGISTRY, Extensions


__all__ = [
    "HOOK_POINTS",
    "REGISTRY",
    "BaseHook",
    "Extensions",
    "GuardrailHook",
    "Hook",
    "RunContext",
    "hook",
    "input_guardrail",
    "output_guardrail_named",
    "provider",
    "tool",
    "tool_from_function",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
