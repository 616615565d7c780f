"""Effects from config: Shelly's kinds and params, type errors naming the field, and the defaults
an agent gets when it declares none and its context window is known."""

from __future__ import annotations

from typing import Any

import pytest

from shelly_dist.agent.effects import EffectChain
from shelly_dist.agent.effects.budgets import TimeBudget, TokenBudget
from shelly_dist.agent.effects.compact import Compact
from shelly_dist.agent.effects.mask import ObservationMask
from shelly_dist.agent.effects.offload import Offload
from shelly_dist.agent.effects.trim import TrimToolResults
from shelly_dist.agent.effects.window import SlidingWindow
from shelly_dist.engine.config import config_from_data
from shelly_dist.engine.config_models import EFFECT_KINDS
from shelly_dist.engine.effects import BUILDERS, build_effects
from shelly_dist.errors import ConfigError


def config(effects: list[dict[str, Any]] | None = None, *, kind: str = "scripted", window: int | None = None,
           threshold: float = 0.0) -> Any:
    provider: dict[str, Any] = {"name": "p", "kind": kind, "model": "m"}
    if kind == "scripted":
        provider["script"] = {}
    else:
        provider["api_key"] = "k"
    if window is not None:
        provider["context_window"] = window
    agent: dict[str, Any] = {"name": "a", "options": {"context_threshold": threshold}}
    if effects is not None:
        agent["effects"] = effects
    return config_from_data({"providers": [provider], "agents": [agent]})


def test_every_effect_kind_of_shelly_is_built():
    assert set(BUILDERS) == set(EFFECT_KINDS)


def test_params_are_read_with_gos_coercions_and_defaults():
    cfg = config([
        {"kind": "token_budget", "params": {"max_tokens": 5000.0}},
        {"kind": "time_budget", "params": {"max_duration": "1m30s", "warn_threshold": 0.9}},
        {"kind": "sliding_window", "params": {"threshold": 1, "recent_zone": 4}},
    ], window=8000)
    effects = {e.kind: e for e in build_effects(cfg, 0, cfg.agents[0])}
    assert effects["token_budget"] == TokenBudget(max_tokens=5000, warn_threshold=0.8)
    assert effects["time_budget"] == TimeBudget(max_duration=90.0, warn_threshold=0.9)
    assert effects["sliding_window"] == SlidingWindow(context_window=8000, threshold=1.0, recent_zone=4)
    assert [e.kind for e in EffectChain(list(effects.values())).effects] == [
        "sliding_window", "token_budget", "time_budget"], "compaction class first, the rest in config order"


@pytest.mark.parametrize(("params", "field"), [
    ({"threshold": "high"}, "agents[0].effects[0].params.threshold"),
    ({"recent_window": True}, "agents[0].effects[0].params.recent_window"),
])
def test_a_param_of_the_wrong_type_fails_naming_the_field(params: dict[str, Any], field: str):
    with pytest.raises(ConfigError) as err:
        config([{"kind": "observation_mask", "params": params}])
    assert field in str(err.value)


def test_a_bad_duration_fails_naming_the_field():
    with pytest.raises(ConfigError, match=r"agents\[0\]\.effects\[0\]\.params\.max_duration"):
        config([{"kind": "time_budget", "params": {"max_duration": "soon"}}])


def test_an_agent_without_effects_gets_shellys_defaults_when_its_window_is_known():
    cfg = config(kind="anthropic", window=200_000, threshold=0.7)
    assert build_effects(cfg, 0, cfg.agents[0]) == [
        TrimToolResults(), ObservationMask(context_window=200_000, threshold=0.5),
        Compact(context_window=200_000, threshold=0.7)]


def test_no_defaults_without_a_context_window():
    cfg = config(kind="scripted")
    assert build_effects(cfg, 0, cfg.agents[0]) == []


def test_offload_gets_the_sessions_store():
    cfg = config([{"kind": "offload", "params": {"min_result_len": 10}}], window=1000)
    store = object()
    (effect,) = build_effects(cfg, 0, cfg.agents[0], offload=lambda: store)  # type: ignore[arg-type,return-value]
    assert isinstance(effect, Offload) and effect.store is store and effect.min_result_len == 10
