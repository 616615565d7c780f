"""The limits and pricing examples in docs/effects.md load, and mean what the page says."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from shelly_dist.agent.limits import Limits
from shelly_dist.engine.config import config_from_data
from shelly_dist.engine.providers import Providers

DOC = Path(__file__).resolve().parents[3] / "docs" / "effects.md"
PROVIDER = {"name": "p", "kind": "openai", "api_key": "k", "model": "gpt-4o-2024-08-06"}


def section() -> list[dict]:
    text = DOC.read_text().split("## Limits and pricing", 1)[1]
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)]


def test_the_limits_example_loads_with_its_limits() -> None:
    (limits, _) = section()
    config = config_from_data({"providers": [PROVIDER], **limits})
    lead, coder = config.agents
    assert lead.limits == Limits(model_requests=40, total_tokens=400_000, cost_usd=2.5)
    assert coder.limits == Limits(model_requests=10)


def test_the_pricing_example_overrides_the_default_price() -> None:
    (_, pricing) = section()
    config = config_from_data({"providers": [PROVIDER], "agents": [{"name": "a"}], **pricing})
    price = Providers(config).prices.lookup("openai", "gpt-4o-2024-08-06")
    assert price is not None and (price.input, price.output) == (2.0, 8.0)
