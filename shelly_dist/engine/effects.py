"""Agent effects from config: ``effects: [{kind, params}]`` into effect objects, with Shelly's
parameter rules and defaults.

Parameters are read as Go's engine reads them (a float accepts an integer and the reverse; a
duration is a Go duration string or seconds; a zero or absent value means the effect's default),
and a wrong type is a ``ConfigError`` naming the field: ``agents[0].effects[1].params.threshold``.
When an agent declares no effects and its provider's context window is known, it gets Shelly's
defaults: ``trim_tool_results``, ``observation_mask`` at 0.5 and ``compact`` at the agent's
``context_threshold`` (0.8 when unset).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shelly_dist.agent.effects import Effect
from shelly_dist.agent.effects.budgets import TimeBudget, TokenBudget
from shelly_dist.agent.effects.compact import Compact
from shelly_dist.agent.effects.mask import ObservationMask
from shelly_dist.agent.effects.nudges import LoopDetect, Progress, Reflection, StallDetect
from shelly_dist.agent.effects.offload import MemoryOffloadStore, Offload, OffloadStore
from shelly_dist.agent.effects.scope import ToolScope
from shelly_dist.agent.effects.trim import TrimToolResults
from shelly_dist.agent.effects.window import SlidingWindow
from shelly_dist.engine.config_models import AgentConfig, Config, EffectConfig, parse_duration
from shelly_dist.errors import ConfigError


class Params:
    """One effect's ``params``, read with Go's coercions; errors name the field."""

    def __init__(self, where: str, raw: dict[str, Any]) -> None:
        self.where = where
        self.raw = raw

    def _bad(self, key: str, what: str) -> ConfigError:
        at = f"{self.where}.params.{key}"
        return ConfigError(f"config: {at}: {what}, got {self.raw[key]!r}", field=at)

    def number(self, key: str, default: float = 0.0) -> float:
        value = self.raw.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._bad(key, "must be a number")
        return float(value)

    def integer(self, key: str, default: int = 0) -> int:
        return int(self.number(key, default))

    def duration(self, key: str) -> float:
        value = self.raw.get(key)
        if value is None or value == "":
            return 0.0
        try:
            return parse_duration(value)
        except ValueError:
            raise self._bad(key, 'must be a duration such as "5m" or "1h30m"') from None

    def names(self, key: str) -> list[str]:
        value = self.raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(key, "must be a list of names")
        return list(value)


@dataclass
class Wiring:
    """What the engine gives effect builders besides the params."""

    context_window: int | None = 0
    """Tokens (0: no window-driven effect fires); ``None``: the provider's window as learned from
    its server at run time (:meth:`~shelly_dist.engine.config_models.Config.learns_window`)."""
    offload: Callable[[], OffloadStore] = MemoryOffloadStore
    """The session's offload store (Redis on a pool; memory for a validation pass)."""


Builder = Callable[[Params, Wiring], Effect]
"""Builds one effect from its params and the agent's wiring."""

BUILDERS: dict[str, Builder] = {
    "compact": lambda p, w: Compact(w.context_window, p.number("threshold", 0.8)),
    "trim_tool_results": lambda p, w: TrimToolResults(p.integer("max_result_length"), p.integer("preserve_recent")),
    "observation_mask": lambda p, w: ObservationMask(w.context_window, p.number("threshold"),
                                                     p.integer("recent_window")),
    "sliding_window": lambda p, w: SlidingWindow(w.context_window, p.number("threshold", 0.7), p.integer("recent_zone"),
                                                 p.integer("medium_zone"), p.integer("trim_length")),
    "offload": lambda p, w: Offload(w.offload(), w.context_window, p.number("threshold"), p.integer("min_result_len"),
                                    p.integer("recent_window")),
    "loop_detect": lambda p, w: LoopDetect(p.integer("threshold"), p.integer("window_size")),
    "reflection": lambda p, w: Reflection(p.integer("failure_threshold")),
    "progress": lambda p, w: Progress(p.integer("interval")),
    "tool_scope": lambda p, w: ToolScope(p.names("exclude")),
    "token_budget": lambda p, w: TokenBudget(p.integer("max_tokens"), p.number("warn_threshold", 0.8)),
    "time_budget": lambda p, w: TimeBudget(p.duration("max_duration"), p.number("warn_threshold", 0.8)),
    "stall_detect": lambda p, w: StallDetect(p.integer("window"), p.number("similarity_threshold")),
}


def context_window(config: Config, spec: AgentConfig) -> int | None:
    """The window of the agent's provider (0: unknown, so no threshold-driven effect fires;
    ``None``: read from the provider's server at run time)."""
    if not config.providers:
        return 0
    provider = config.provider_for(spec)
    return None if config.learns_window(provider) else config.context_window(provider)


def effect_problems(index: int, spec: AgentConfig) -> list[tuple[str, str]]:
    """Wrong parameter types of the agent's effects, as (field, problem) for the config loader."""
    problems = []
    for j, effect in enumerate(spec.effects):
        builder = BUILDERS.get(effect.kind)
        if builder is None:
            continue  # unknown kinds are reported by the kind rule
        try:
            builder(Params(f"agents[{index}].effects[{j}]", effect.params or {}), Wiring())
        except ConfigError as exc:
            problems.append((exc.field or "", str(exc).split(": ", 2)[-1]))
    return problems


def build_effects(
    config: Config, index: int, spec: AgentConfig, *, offload: Callable[[], OffloadStore] = MemoryOffloadStore
) -> list[Effect]:
    """The effects of ``config.agents[index]`` (``spec``), or Shelly's defaults."""
    window = context_window(config, spec)
    wiring = Wiring(window, offload)
    declared: list[EffectConfig] = list(spec.effects)
    if not declared:
        if window is not None and window <= 0:
            return []
        threshold = spec.options.context_threshold or 0.8
        return [TrimToolResults(), ObservationMask(window, 0.5), Compact(window, threshold)]
    out = []
    for j, effect in enumerate(declared):
        where = f"agents[{index}].effects[{j}]"
        builder = BUILDERS.get(effect.kind)
        if builder is None:
            raise ConfigError(f'config: {where}.kind: unknown effect kind "{effect.kind}"', field=f"{where}.kind")
        out.append(builder(Params(where, effect.params or {}), wiring))
    return out
