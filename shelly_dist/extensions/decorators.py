"""The decorators a user's module applies; each registers in :data:`REGISTRY` and returns the
decorated object unchanged, so the function or class stays usable from the user's own code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from shelly_dist.errors import UsageError
from shelly_dist.extensions.context import HOOK_POINTS
from shelly_dist.extensions.function_tool import tool_from_function
from shelly_dist.extensions.registry import REGISTRY

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)


def _named(decorator: str, name: object) -> str:
    if not isinstance(name, str) or not name:
        raise UsageError(f"@{decorator}: give it the name agents use, as in @{decorator}(\"name\")")
    return name


def tool(
    toolbox: str, *, name: str | None = None, group: str = "", retry_on_crash: bool = False,
    approval: bool = False,
) -> Callable[[F], F]:
    """Register a function as a tool of ``toolbox`` (``toolboxes: [<toolbox>]`` in an agent's
    config). Its schema comes from its type hints, its description from its docstring, its name
    from the function (or ``name``). ``group`` is its policy group (``group:<name>`` rules);
    ``retry_on_crash`` says it is safe to run again when a worker died while it ran; ``approval``
    makes a person approve every call before it runs, in every agent that has it (``shelly
    approve``, ``Session.approve``, a terminal prompt)."""
    _named("tool", toolbox)

    def register(fn: F) -> F:
        REGISTRY.add_tool(toolbox, fn, tool_from_function(fn, name=name, group=group, retry_on_crash=retry_on_crash,
                                                           approval=approval))
        return fn

    return register


def hook(name: str) -> Callable[[C], C]:
    """Register a hook class under ``name`` (``hooks: [<name>]``); each agent instance gets a fresh
    instance, so it keeps what it must remember in ``ctx.state`` (see ``RunContext``)."""
    _named("hook", name)

    def register(cls: C) -> C:
        if not isinstance(cls, type) or not any(callable(getattr(cls, p, None)) for p in HOOK_POINTS):
            raise UsageError(f"@hook({name!r}): decorate a class with at least one of the hook points "
                             f"({', '.join(HOOK_POINTS)})")
        REGISTRY.add("hook", REGISTRY.hooks, name, cls)
        return cls

    return register


def input_guardrail(name: str) -> Callable[[F], F]:
    """Register ``check(text, ctx)`` (sync or async) run on the task before the first model call;
    it trips by raising ``GuardrailTripped(reason)``."""
    _named("input_guardrail", name)

    def register(fn: F) -> F:
        REGISTRY.add("input guardrail", REGISTRY.input_guardrails, name, fn)
        return fn

    return register


def output_guardrail_named(name: str) -> Callable[[F], F]:
    """Register ``check(text, ctx)`` (sync or async) run on the final reply's text; it trips by
    raising ``GuardrailTripped(reason)``."""
    _named("output_guardrail", name)

    def register(fn: F) -> F:
        REGISTRY.add("output guardrail", REGISTRY.output_guardrails, name, fn)
        return fn

    return register


def provider(kind: str) -> Callable[[F], F]:
    """Register a custom provider kind (``kind: <kind>`` in ``providers:``). The decorated callable
    builds the completer: it is called with keyword arguments ``name``, ``model``, ``base_url``,
    ``api_key``, ``max_tokens``, ``timeout``, ``headers``, ``temperature``, ``usage`` and
    ``options`` (the provider's ``options:`` mapping); take ``**_`` for those you ignore."""
    from shelly_dist.providers.factory import register_provider

    _named("provider", kind)

    def register(factory: F) -> F:
        REGISTRY.add("provider", REGISTRY.providers, kind, factory)
        register_provider(kind, factory, options=True)  # type: ignore[arg-type]
        return factory

    return register
