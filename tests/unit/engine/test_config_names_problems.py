"""The config names what is wrong where the user looks: a provider key whose variable is not set,
a misspelt top-level key next to the error it causes (issue 25)."""

from __future__ import annotations

from typing import Any

import pytest

from shelly_dist.engine.config import config_from_data
from shelly_dist.errors import ConfigError


def claude(api_key: Any = "${ANTHROPIC_API_KEY}") -> dict[str, Any]:
    return {"providers": [{"name": "claude", "kind": "anthropic", "model": "claude-x", "api_key": api_key}],
            "agents": [{"name": "solo"}]}


def test_a_provider_key_whose_variable_is_not_set_is_named_at_load():
    cfg = config_from_data(claude(), {})
    assert any(w.startswith('config: providers[0].api_key: provider "claude": ANTHROPIC_API_KEY is not set')
               for w in cfg.warnings), cfg.warnings


def test_a_provider_key_whose_variable_is_empty_is_named_at_load():
    cfg = config_from_data(claude(), {"ANTHROPIC_API_KEY": ""})
    assert any('provider "claude": ANTHROPIC_API_KEY is empty' in w for w in cfg.warnings), cfg.warnings


def test_a_provider_key_whose_variable_is_set_says_nothing():
    assert config_from_data(claude(), {"ANTHROPIC_API_KEY": "sk-1"}).warnings == []


def test_a_rotated_key_whose_variable_is_not_set_is_named_by_its_index():
    data = claude("sk-literal")
    data["providers"][0]["api_keys"] = ["${SECOND_KEY}"]
    assert any(w.startswith('config: providers[0].api_keys[0]: provider "claude": SECOND_KEY is not set')
               for w in config_from_data(data, {}).warnings)


def test_a_missing_key_is_an_error_under_strict_config():
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
        config_from_data(claude(), {"SHELLY_STRICT_CONFIG": "1"})


def test_a_misspelt_agents_key_is_named_with_the_error_it_causes():
    data = claude("k")
    data["agnets"] = data.pop("agents")
    with pytest.raises(ConfigError) as err:
        config_from_data(data, {})
    assert 'config: agnets: unknown key; did you mean "agents"?' in str(err.value)


def test_a_provider_no_agent_uses_is_not_named_for_its_missing_key():
    data = claude("sk-1")
    data["providers"].append({"name": "openai", "kind": "openai", "model": "gpt-x", "api_key": "${OPENAI_API_KEY}"})
    assert config_from_data(data, {}).warnings == []


@pytest.mark.parametrize("name", ["my agent", "agent{x}", "tab\tname"])
def test_an_agent_name_with_spaces_or_braces_is_rejected(name: str):
    data = claude("k")
    data["agents"] = [{"name": name}]
    with pytest.raises(ConfigError, match=r"agents\[0\]\.name: agent name .* may not contain spaces, braces"):
        config_from_data(data, {})


def test_a_recursive_yaml_alias_is_rejected_naming_its_line():
    from shelly_dist.engine.config import parse_config

    with pytest.raises(ConfigError, match="line 2: a YAML alias refers to a node that contains it"):
        parse_config("providers: []\nloop: &a [1, *a]\n")


def test_an_alias_bomb_is_rejected_before_it_is_built():
    import time

    from shelly_dist.engine.config import parse_config

    levels = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    started = time.monotonic()
    with pytest.raises(ConfigError, match="YAML aliases expand to more than"):
        parse_config("\n".join(levels) + "\n")
    assert time.monotonic() - started < 1


def test_anchors_and_merge_keys_within_bounds_still_load():
    from shelly_dist.engine.config import parse_config

    cfg = parse_config("base: &b {kind: scripted, model: m}\nproviders: [{<<: *b, name: p}]\nagents: [{name: a}]\n")
    assert cfg.providers[0].kind == "scripted"


async def test_a_call_of_a_provider_whose_key_variable_is_not_set_fails_at_once_naming_it():
    from shelly_dist.chats import Chat
    from shelly_dist.engine.providers import Providers
    from shelly_dist.errors import ModelError

    completer = Providers(config_from_data(claude(), {})).for_agent("solo")
    with pytest.raises(ModelError, match=r'^provider "claude": ANTHROPIC_API_KEY is not set$'):
        await completer.complete(Chat(), [])
