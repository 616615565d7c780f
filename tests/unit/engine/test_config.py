"""Config loading: every validation rule, variable expansion, env overrides, file discovery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from shelly_dist.engine.config import config_from_data, find_config, fingerprint, load_config, parse_config
from shelly_dist.errors import ConfigError


def base() -> dict[str, Any]:
    return {
        "providers": [{"name": "main", "kind": "anthropic", "api_key": "k", "model": "m"}],
        "agents": [{"name": "assistant", "toolboxes": ["filesystem"]}],
    }


def fails(data: dict[str, Any], field: str, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config_from_data(data, {})
    err = info.value
    assert str(err).startswith("config: ")
    assert err.field == field
    assert f"config: {field}: " in str(err)
    assert text in str(err)
    return err


def test_minimal_config_is_valid() -> None:
    cfg = config_from_data(base(), {})
    assert cfg.entry().name == "assistant"
    assert cfg.provider_for(cfg.agents[0]).name == "main"


def test_no_providers_fails() -> None:
    fails({**base(), "providers": []}, "providers", "at least one provider")


def test_no_agents_fails() -> None:
    fails({**base(), "agents": []}, "agents", "at least one agent")


def test_duplicate_provider_name_fails() -> None:
    data = base()
    data["providers"].append({"name": "main", "kind": "openai"})
    fails(data, "providers[1].name", 'duplicate provider name "main"')


def test_duplicate_agent_name_fails() -> None:
    data = base()
    data["agents"].append({"name": "assistant"})
    fails(data, "agents[1].name", 'duplicate agent name "assistant"')


def test_duplicate_mcp_server_name_fails() -> None:
    data = {**base(), "mcp_servers": [{"name": "pw", "command": "x"}, {"name": "pw", "url": "http://h"}]}
    fails(data, "mcp_servers[1].name", 'duplicate MCP server name "pw"')


def test_unknown_provider_fails() -> None:
    data = base()
    data["agents"].append({"name": "b", "provider": "x"})
    fails(data, "agents[1].provider", 'unknown provider "x"')


def test_unknown_provider_kind_fails() -> None:
    data = base()
    data["providers"][0]["kind"] = "anthropik"
    fails(data, "providers[0].kind", 'unknown provider kind "anthropik"')


def test_unknown_toolbox_fails() -> None:
    data = base()
    data["agents"][0]["toolboxes"] = ["filesystem", "teleport"]
    fails(data, "agents[0].toolboxes[1]", 'unknown toolbox "teleport"')


def test_mcp_server_name_is_a_known_toolbox() -> None:
    data = {**base(), "mcp_servers": [{"name": "playwright", "command": "npx", "args": ["pw"]}]}
    data["agents"][0]["toolboxes"] = ["playwright", {"name": "git", "tools": ["git_status"]}]
    assert config_from_data(data, {}).agents[0].toolbox_names() == ["playwright", "git"]


def test_unknown_effect_kind_fails() -> None:
    data = base()
    data["agents"][0]["effects"] = [{"kind": "compact"}, {"kind": "teleport", "params": {}}]
    fails(data, "agents[0].effects[1].kind", 'unknown effect kind "teleport"')


def test_negative_context_window_fails() -> None:
    data = base()
    data["providers"][0]["context_window"] = -1
    fails(data, "providers[0].context_window", "must not be negative")


@pytest.mark.parametrize("threshold", [1.0, 1.5, -0.1])
def test_context_threshold_outside_open_unit_interval_fails(threshold: float) -> None:
    data = base()
    data["agents"][0]["options"] = {"context_threshold": threshold}
    fails(data, "agents[0].options.context_threshold", "strictly between 0 and 1")


def test_context_threshold_zero_means_default_and_is_valid() -> None:
    data = base()
    data["agents"][0]["options"] = {"context_threshold": 0}
    assert config_from_data(data, {}).agents[0].options.context_threshold == 0


@pytest.mark.parametrize("max_tokens", [0, -5])
def test_max_tokens_not_positive_fails(max_tokens: int) -> None:
    data = base()
    data["providers"][0]["max_tokens"] = max_tokens
    fails(data, "providers[0].max_tokens", "greater than 0")


def test_invalid_interaction_mode_fails() -> None:
    data = base()
    data["agents"][0]["options"] = {"interaction_mode": "telepathic"}
    fails(data, "agents[0].options.interaction_mode", 'invalid interaction_mode "telepathic"')


def test_invalid_question_timeout_fails() -> None:
    data = base()
    data["agents"][0]["options"] = {"question_timeout": "five minutes"}
    fails(data, "agents[0].options.question_timeout", "invalid duration")


def test_negative_question_timeout_fails() -> None:
    data = base()
    data["agents"][0]["options"] = {"question_timeout": "-1s"}
    fails(data, "agents[0].options.question_timeout", "invalid question_timeout")


def test_question_timeout_parses_go_duration() -> None:
    data = base()
    data["agents"][0]["options"] = {"question_timeout": "1m30s"}
    assert config_from_data(data, {}).agents[0].options.question_timeout == 90.0


def test_mcp_server_with_both_command_and_url_fails() -> None:
    data = {**base(), "mcp_servers": [{"name": "x", "command": "c", "url": "http://h"}]}
    fails(data, "mcp_servers[0]", "exactly one of command or url")


def test_mcp_server_with_neither_command_nor_url_fails() -> None:
    fails({**base(), "mcp_servers": [{"name": "x"}]}, "mcp_servers[0]", "exactly one of command or url")


def test_bad_entry_agent_fails() -> None:
    fails({**base(), "entry_agent": "ghost"}, "entry_agent", 'unknown agent "ghost"')


def test_entry_agent_picks_the_entry() -> None:
    data = base()
    data["agents"].append({"name": "lead"})
    assert config_from_data({**data, "entry_agent": "lead"}, {}).entry().name == "lead"


def test_unknown_fallback_provider_fails() -> None:
    data = base()
    data["providers"][0]["fallback"] = ["backup"]
    fails(data, "providers[0].fallback[0]", 'unknown provider "backup"')


def test_negative_max_concurrency_fails() -> None:
    data = base()
    data["agents"][0]["max_concurrency"] = -2
    fails(data, "agents[0].max_concurrency", "must not be negative")


def test_invalid_estimated_cost_fails() -> None:
    data = base()
    data["agents"][0]["estimated_cost"] = "free"
    fails(data, "agents[0].estimated_cost", "must be one of")


def test_negative_max_handoffs_fails() -> None:
    data = base()
    data["agents"][0]["options"] = {"max_handoffs": -1}
    fails(data, "agents[0].options.max_handoffs", "greater than or equal to 0")


def test_visibility_timeout_below_the_step_time_limit_is_accepted() -> None:
    """Leases decide who advances a run; the broker's redelivery is only a backstop whose
    duplicates are dropped, so a short visibility timeout is no longer a config error."""
    data = {**base(), "distributed": {"step_time_limit": 600, "visibility_timeout": "5m"}}
    assert config_from_data(data, {}).distributed.visibility_timeout == 300


def test_non_positive_visibility_timeout_fails() -> None:
    data = {**base(), "distributed": {"visibility_timeout": 0}}
    fails(data, "distributed.visibility_timeout", "must be positive")


def test_script_for_unknown_agent_fails() -> None:
    data = base()
    data["providers"][0] = {"name": "main", "kind": "scripted", "script": {"asistant": ["hi"]}}
    fails(data, "providers[0].script.asistant", 'unknown agent "asistant"')


def test_unknown_top_level_key_is_ignored_with_a_warning_and_suggestion() -> None:
    cfg = config_from_data({**base(), "agent": [], "browser": {"headless": True}}, {})
    assert cfg.warnings == [
        'config: agent: unknown key; did you mean "agents"? (ignored, as Shelly does)',
        "config: browser: unknown key (ignored, as Shelly does)",
    ]


def test_an_unknown_key_is_only_matched_against_its_own_sections_keys() -> None:
    data = base()
    data["providers"][0] = {**data["providers"][0], "max_token": 3, "agentz": 1}
    cfg = config_from_data(data, {})
    assert cfg.warnings == [
        'config: providers[0].max_token: unknown key; did you mean "max_tokens"? (ignored, as Shelly does)',
        "config: providers[0].agentz: unknown key (ignored, as Shelly does)",  # not "agents", a top key
    ]


def test_unknown_agent_key_is_ignored_with_one_warning_naming_it() -> None:
    data = base()
    data["agents"][0]["toolbox"] = ["filesystem"]
    cfg = config_from_data(data, {})
    assert cfg.agents[0].toolbox_names() == ["filesystem"]
    assert len(cfg.warnings) == 1 and cfg.warnings[0].startswith("config: agents[0].toolbox: unknown key")


def test_unknown_key_fails_under_strict_config() -> None:
    data = base()
    data["agents"][0]["toolbox"] = ["filesystem"]
    with pytest.raises(ConfigError) as info:
        config_from_data(data, {"SHELLY_STRICT_CONFIG": "1"})
    assert info.value.field == "agents[0].toolbox"
    assert 'unknown key; did you mean "toolboxes"? (strict config: SHELLY_STRICT_CONFIG=1)' in str(info.value)


def test_null_lists_and_sections_load_as_empty() -> None:
    data = base()
    data["mcp_servers"] = None
    data["agents"][0].update(skills=None, toolboxes=None, effects=[{"kind": "compact", "params": None}], options=None)
    cfg = config_from_data(data, {})
    a = cfg.agents[0]
    assert (cfg.mcp_servers, a.skills, a.toolboxes, a.effects[0].params) == ([], [], [], {})
    assert a.options.max_iterations is None and cfg.warnings == []


def test_go_zero_values_load_with_go_meaning() -> None:
    data = base()
    data["providers"][0].update(
        context_window=None, max_tokens=None,
        rate_limit={"input_tpm": 0, "output_tpm": 0, "rpm": 0, "max_retries": 0, "base_delay": ""},
        batch={"enabled": False, "collect_window": "", "poll_interval": "", "timeout": "", "max_batch_size": 0},
    )
    data["agents"][0]["options"] = {"question_timeout": "", "context_threshold": 0, "max_handoffs": 0}
    data["context"] = {"max_external_file_size": 0}
    cfg = config_from_data(data, {})
    p = cfg.providers[0]
    assert p.rate_limit is not None and p.rate_limit.max_retries is None and p.rate_limit.base_delay is None
    assert p.batch is not None and p.batch.max_batch_size is None and p.batch.collect_window is None
    assert cfg.agents[0].options.question_timeout is None
    assert cfg.context.max_external_file_size == 512 * 1024


def test_a_go_duration_still_fails_when_it_is_not_empty_and_invalid() -> None:
    data = base()
    data["agents"][0]["options"] = {"question_timeout": "soon"}
    fails(data, "agents[0].options.question_timeout", 'invalid duration "soon"')


def test_mcp_server_named_like_a_builtin_is_accepted_with_a_warning() -> None:
    data = base()
    data["mcp_servers"] = [{"name": "search", "command": "mcp-search", "url": ""}]
    data["agents"][0]["toolboxes"] = ["search", "state"]
    cfg = config_from_data(data, {})
    assert len(cfg.warnings) == 1 and "mcp_servers[0].name" in cfg.warnings[0]
    assert 'get the built-in one' in cfg.warnings[0]


def test_wrong_type_names_the_field() -> None:
    data = base()
    data["agents"][0]["max_concurrency"] = "many"
    fails(data, "agents[0].max_concurrency", "valid integer")


def test_every_problem_gets_its_own_line() -> None:
    data = {**base(), "entry_agent": "ghost"}
    data["providers"][0]["max_tokens"] = 0
    err = fails(data, "providers[0].max_tokens", "greater than 0")
    lines = str(err).splitlines()
    assert len(lines) == 2
    assert all(line.startswith("config: ") for line in lines)


def test_unparseable_yaml_names_the_line() -> None:
    with pytest.raises(ConfigError, match=r"^config: c.yaml: line 3: invalid YAML"):
        parse_config("providers: []\nagents:\n\t- name: a\n", {}, source="c.yaml")


def test_non_mapping_file_fails() -> None:
    with pytest.raises(ConfigError, match="must hold a mapping"):
        parse_config("- a\n- b\n", {})


def test_toolbox_refs_round_trip_in_mixed_form() -> None:
    data = base()
    refs = ["filesystem", {"name": "git", "tools": ["git_status", "git_diff"]}, "state"]
    data["agents"][0]["toolboxes"] = refs
    cfg = config_from_data(data, {})
    assert cfg.model_dump(mode="json")["agents"][0]["toolboxes"] == refs
    assert cfg.agents[0].toolbox_refs() == [
        ("filesystem", None),
        ("git", ["git_status", "git_diff"]),
        ("state", None),
    ]


def test_env_variables_are_expanded_after_parsing_and_unset_is_empty() -> None:
    text = "providers:\n  - {name: p, kind: openai, api_key: '${KEY}',"
    text += " base_url: '$HOST/x', model: '${NOPE}'}\n"
    text += "agents: [{name: a}]\n"
    cfg = parse_config(text, {"KEY": "sekret: [not yaml", "HOST": "http://h"})
    p = cfg.providers[0]
    assert (p.api_key, p.base_url, p.model) == ("sekret: [not yaml", "http://h/x", "")


def test_env_overrides_distributed_urls() -> None:
    data = {**base(), "distributed": {"broker_url": "redis://file:6379/0", "queue": "q"}}
    env = {"SHELLY_BROKER_URL": "amqp://rabbit//", "SHELLY_REDIS_URL": "redis://r:6379/1"}
    d = config_from_data(data, env).distributed
    assert (d.broker_url, d.redis_url, d.queue) == ("amqp://rabbit//", "redis://r:6379/1", "q")


def test_distributed_defaults() -> None:
    d = config_from_data(base(), {}).distributed
    assert (d.queue, d.step_time_limit, d.retention, d.key_prefix) == ("shelly", 600.0, 604800.0, "shelly:")
    assert d.effective_visibility_timeout() > d.step_time_limit


def test_scripted_provider_accepts_strings_and_steps() -> None:
    data = base()
    data["providers"] = [
        {
            "name": "fake",
            "kind": "scripted",
            "script": {
                "assistant": [
                    {"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "k", "value": "v"}}]},
                    "done: {task}",
                ]
            },
        }
    ]
    cfg = config_from_data(data, {})
    replies = cfg.providers[0].script_for("assistant")
    assert replies is not None and replies[1] == "done: {task}"
    assert cfg.providers[0].script_for("other") is None


def test_context_window_defaults_by_kind_and_override() -> None:
    data = {**base(), "default_context_windows": {"openai": 64000}}
    data["providers"].append({"name": "o", "kind": "openai"})
    cfg = config_from_data(data, {})
    assert cfg.context_window(cfg.providers[0]) == 200_000
    assert cfg.context_window(cfg.providers[1]) == 64000


def test_fingerprint_ignores_secrets_and_urls_but_not_agents() -> None:
    a = config_from_data(base(), {})
    other_key = base()
    other_key["providers"][0]["api_key"] = "different"
    b = config_from_data(other_key, {"SHELLY_BROKER_URL": "redis://elsewhere"})
    changed = base()
    changed["agents"][0]["instructions"] = "be brief"
    c = config_from_data(changed, {})
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(c)
    assert len(fingerprint(a)) == 16


def test_fingerprint_ignores_host_paths_model_urls_and_mcp_secrets() -> None:
    def team(root: str, url: str, token: str) -> dict:
        data = base()
        data["providers"][0]["base_url"] = url
        data["mcp_servers"] = [{"name": "m", "command": "mcp-x", "env": {"TOKEN": token}}]
        data["permissions"] = {"fs_directories": [root], "trusted_commands": [f"{root}/bin/tool"]}
        data["git"] = {"work_dir": root}
        data["distributed"] = {"broker_url": "redis://a", "step_time_limit": 60}
        return data

    here = config_from_data(team("/home/a/proj", "http://gpu-a:8000", "t1"), {})
    there = config_from_data(team("/srv/proj", "http://gpu-b.internal:8000", "t2"), {})
    assert fingerprint(here) == fingerprint(there)


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(base()))
    assert load_config(path, {}).agents[0].name == "assistant"


def test_load_config_missing_file_fails(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml", {})


def test_find_config_prefers_explicit_then_env_then_shelly_dir_then_legacy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "shelly.yaml").write_text("x")
    assert find_config(None, ".shelly", {}) == Path("shelly.yaml")
    (tmp_path / ".shelly").mkdir()
    (tmp_path / ".shelly" / "config.yaml").write_text("x")
    assert find_config(None, ".shelly", {}) == Path(".shelly/config.yaml")
    (tmp_path / "env.yaml").write_text("x")
    assert find_config(None, ".shelly", {"SHELLY_CONFIG": "env.yaml"}) == Path("env.yaml")
    (tmp_path / "cli.yaml").write_text("x")
    assert find_config("cli.yaml", ".shelly", {"SHELLY_CONFIG": "env.yaml"}) == Path("cli.yaml")


def test_find_config_with_nothing_found_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="shelly init"):
        find_config(None, ".shelly", {})


def test_find_config_explicit_missing_file_fails(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--config: file not found"):
        find_config(str(tmp_path / "missing.yaml"), ".shelly", {})


def test_distributed_lease_reaches_the_runtime_settings_and_defaults_to_ten_seconds() -> None:
    from shelly_dist.engine.config_runtime import runtime_settings

    data = base()
    data["distributed"] = {"broker_url": "redis://127.0.0.1:6379/0"}
    assert runtime_settings(config_from_data(data, {})).lease == 10.0
    data["distributed"]["lease"] = "30s"
    assert runtime_settings(config_from_data(data, {})).lease == 30.0


def test_an_unknown_key_in_a_shelly_dist_section_stays_an_error_with_a_suggestion() -> None:
    fails({**base(), "distributed": {"broker_ur": "redis://x"}}, "distributed.broker_ur",
          'unknown key; did you mean "broker_url"?')


def test_a_redis_cluster_as_broker_is_a_config_error_naming_the_field() -> None:
    from shelly_dist.engine.config_runtime import runtime_settings

    data = base()
    data["distributed"] = {"broker_url": "redis+cluster://127.0.0.1:7101", "redis_url": "redis+cluster://127.0.0.1:7101"}
    with pytest.raises(ConfigError, match=r"distributed\.broker_url: a Redis Cluster cannot be the Celery broker"):
        runtime_settings(config_from_data(data, {}))


def test_a_redis_cluster_for_state_reaches_the_runtime_settings() -> None:
    from shelly_dist.engine.config_runtime import runtime_settings

    data = base()
    data["distributed"] = {"broker_url": "redis://127.0.0.1:6379/5", "redis_url": "redis+cluster://127.0.0.1:7101"}
    assert runtime_settings(config_from_data(data, {})).redis_url == "redis+cluster://127.0.0.1:7101"
