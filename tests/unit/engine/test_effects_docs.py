"""Every effect example in docs/effects.md is a valid config, and every kind has one."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from shelly_dist.engine.config import config_from_data
from shelly_dist.engine.config_models import EFFECT_KINDS
from shelly_dist.engine.effects import build_effects

DOC = Path(__file__).resolve().parents[3] / "docs" / "effects.md"


def examples() -> list[list[dict]]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    out = []
    for block in blocks:
        data = yaml.safe_load(block)
        if isinstance(data, list):
            out.append(data)
    return out


def test_every_kind_has_an_example_that_loads_and_builds():
    seen = set()
    for effects in examples():
        config = config_from_data({
            "providers": [{"name": "p", "kind": "anthropic", "api_key": "k", "model": "m"}],
            "agents": [{"name": "a", "effects": effects}],
        })
        built = build_effects(config, 0, config.agents[0])
        assert [e.kind for e in built] == [e["kind"] for e in effects]
        seen |= {e["kind"] for e in effects}
    assert seen == set(EFFECT_KINDS)
