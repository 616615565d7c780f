"""The engine's price table: defaults, then ``.shelly/local/pricing.yaml`` (Go's override file,
read only), then the config's ``pricing:``; and the cost reaching the run's events."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelly_dist.engine.config_models import Config
from shelly_dist.engine.pricing import load_prices
from shelly_dist.engine.shellydir import ShellyDir
from shelly_dist.errors import ConfigError


def config(**extra: object) -> Config:
    return Config.model_validate({"providers": [{"name": "p", "kind": "openai", "model": "gpt-4o"}],
                                  "agents": [{"name": "a"}], **extra})


def test_go_local_pricing_file_overrides_the_defaults_and_the_config_overrides_both(tmp_path: Path) -> None:
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "pricing.yaml").write_text(
        "- provider: openai\n  prefix: gpt-4o\n  input: 7.0\n  output: 8.0\n"
        "- provider: anthropic\n  prefix: claude-opus-4-6\n  input: 9.0\n")
    table = load_prices(config(pricing=[{"provider": "openai", "prefix": "gpt-4o", "input": 1.0}]), ShellyDir(tmp_path))
    gpt = table.lookup("openai", "gpt-4o")
    opus = table.lookup("anthropic", "claude-opus-4-6")
    assert gpt is not None and gpt.input == 1.0
    assert opus is not None and opus.input == 9.0


def test_without_a_local_file_the_defaults_apply(tmp_path: Path) -> None:
    entry = load_prices(config(), ShellyDir(tmp_path)).lookup("openai", "gpt-4o")
    assert entry is not None and entry.input == 2.5


def test_a_bad_local_pricing_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "pricing.yaml").write_text("- provider: openai\n  input: cheap\n")
    with pytest.raises(ConfigError, match=r"pricing\.yaml\[0\]\.input"):
        load_prices(config(), ShellyDir(tmp_path))


def test_a_bad_config_pricing_entry_names_the_field() -> None:
    with pytest.raises(ValueError, match="pricing"):
        config(pricing=[{"provider": "openai", "input": -1}])


def test_a_reservation_is_priced_at_the_dearest_model_of_the_agents_chain() -> None:
    from shelly_dist.engine.providers import Providers

    cfg = Config.model_validate({
        "providers": [{"name": "main", "kind": "openai", "model": "gpt-4o-mini", "fallback": ["big"]},
                      {"name": "big", "kind": "anthropic", "model": "claude-opus-4-1", "max_tokens": 9000}],
        "agents": [{"name": "a", "provider": "main"}]})
    providers = Providers(cfg)
    bound = providers.price_bound("a")
    assert bound is not None and (bound.input, bound.output, bound.cache_creation) == (15.0, 75.0, 18.75)
    assert providers.max_output_tokens("a") == 9000


def test_an_unknown_model_costs_nothing_and_is_said_at_debug_only(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from shelly_dist.engine.providers import Providers

    cfg = Config.model_validate({"providers": [{"name": "local", "kind": "openai", "model": "llama-3-local",
                                                "base_url": "http://127.0.0.1:9/v1"}],
                                 "agents": [{"name": "a"}]})
    with caplog.at_level(logging.DEBUG, logger="shelly_dist"):
        Providers(cfg).for_agent("a")
    said = [r for r in caplog.records if "no price" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.DEBUG]
    assert "llama-3-local" in said[0].getMessage()
