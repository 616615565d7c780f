"""The ``batch:`` block: which batch API a provider's calls take, and what the loader says when none."""

from __future__ import annotations

from typing import Any

import pytest

from shelly_dist.engine.config import config_from_data
from shelly_dist.errors import ConfigError


def config(kind: str, base_url: str = "", **batch: Any) -> dict[str, Any]:
    return {"providers": [{"name": "p", "kind": kind, "api_key": "k", "model": "m", "base_url": base_url,
                           "batch": {"enabled": True, **batch}}],
            "agents": [{"name": "a"}]}


@pytest.mark.parametrize(("kind", "base_url", "batch", "api"), [
    ("anthropic", "", {}, "anthropic"),
    ("openai", "", {}, "openai"),
    ("openai", "https://api.openai.com/v1", {}, "openai"),
    ("openai", "http://127.0.0.1:9/v1", {"api": "openai"}, "openai"),
    ("grok", "http://proxy.local", {"api": "openai"}, "openai"),
])
def test_a_provider_with_batch_enabled_goes_through_its_batch_api(kind: str, base_url: str, batch: dict[str, Any],
                                                                  api: str) -> None:
    cfg = config_from_data(config(kind, base_url, **batch), {})
    assert cfg.providers[0].batch_api() == api and cfg.warnings == []


@pytest.mark.parametrize(("kind", "base_url", "said"), [
    ("openai", "http://127.0.0.1:11434", "set batch.api: openai if that server implements"),
    ("grok", "", "xAI's Batch API"),
    ("scripted", "", 'provider kind "scripted" has no batch API'),
])
def test_batch_enabled_without_a_known_batch_api_warns_that_calls_go_direct(kind: str, base_url: str,
                                                                            said: str) -> None:
    cfg = config_from_data(config(kind, base_url), {})
    assert cfg.providers[0].batch_api() is None
    [warning] = cfg.warnings
    assert warning.startswith("config: providers[0].batch.enabled: ") and said in warning
    assert "its model calls go direct" in warning


def test_batch_enabled_on_gemini_is_refused_as_in_shelly() -> None:
    with pytest.raises(ConfigError, match=r'providers\[0\]\.batch\.enabled: batch is not supported for provider kind '
                                          r'"gemini"'):
        config_from_data(config("gemini"), {})


def test_a_batch_api_of_another_vendor_than_the_providers_kind_is_refused() -> None:
    with pytest.raises(ConfigError, match=r'providers\[0\]\.batch\.api: "anthropic" needs a provider of kind '
                                          r'anthropic'):
        config_from_data(config("openai", api="anthropic"), {})


def test_batch_settings_default_as_shelly() -> None:
    from shelly_dist.engine.providers import batch_settings

    cfg = config_from_data(config("anthropic", collect_window="2s", max_batch_size=0), {})
    settings = batch_settings(cfg.providers[0])
    assert settings is not None
    assert (settings.collect_window, settings.poll_interval, settings.timeout, settings.max_batch_size) == \
        (2.0, 5.0, 3600.0, 100)
