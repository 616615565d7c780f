"""Everything Go Shelly's ``Config.Validate`` rejects is still rejected, naming the field, when
the config is otherwise in Go's written form (every field, zero values)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from shelly_dist.engine.config import config_from_data
from shelly_dist.engine.shellydir import template_config
from shelly_dist.errors import ConfigError
from tests.compat.go_form import go_config

Edit = Callable[[dict[str, Any]], None]


def go_written() -> dict[str, Any]:
    cfg = yaml.safe_load(go_config(yaml.safe_load(template_config("dev-team"))))
    assert isinstance(cfg, dict)
    return cfg


def agent(key: str, value: Any, options: bool = False) -> Edit:
    def edit(cfg: dict[str, Any]) -> None:
        (cfg["agents"][0]["options"] if options else cfg["agents"][0])[key] = value

    return edit


def provider(key: str, value: Any, section: str = "") -> Edit:
    def edit(cfg: dict[str, Any]) -> None:
        target = cfg["providers"][0][section] if section else cfg["providers"][0]
        target[key] = value
        if section == "batch":
            target["enabled"] = True

    return edit


GO_REJECTS: list[tuple[str, Edit, str]] = [
    ("providers", lambda c: c.update(providers=[]), "at least one provider"),
    ("agents", lambda c: c.update(agents=[]), "at least one agent"),
    ("providers[1].name", lambda c: c["providers"][1].update(name="default"), "duplicate provider"),
    ("providers[0].context_window", provider("context_window", -1), "negative"),
    ("providers[0].max_tokens", provider("max_tokens", 0), "greater than 0"),
    ("providers[0].batch.collect_window", provider("collect_window", "soon", "batch"), "invalid duration"),
    ("providers[0].batch.max_batch_size", provider("max_batch_size", -1, "batch"), "greater than or equal"),
    ("mcp_servers[0]", lambda c: c["mcp_servers"][0].update(url="http://x/mcp"), "exactly one of command or url"),
    ("mcp_servers[0]", lambda c: c["mcp_servers"][0].update(command=""), "exactly one of command or url"),
    ("mcp_servers[1].name", lambda c: c["mcp_servers"].append(dict(c["mcp_servers"][0])), "duplicate MCP server"),
    ("agents[1].name", lambda c: c["agents"][1].update(name="lead"), "duplicate agent"),
    ("agents[0].options.context_threshold", agent("context_threshold", 1.0, True), "strictly between 0 and 1"),
    ("agents[0].estimated_cost", agent("estimated_cost", "free"), "must be one of"),
    ("agents[0].max_concurrency", agent("max_concurrency", -1), "negative"),
    ("agents[0].options.max_handoffs", agent("max_handoffs", -1, True), "greater than or equal"),
    ("agents[0].options.interaction_mode", agent("interaction_mode", "sometimes", True), "invalid interaction_mode"),
    ("agents[0].options.question_timeout", agent("question_timeout", "soon", True), "invalid duration"),
    ("agents[0].effects[0].kind", lambda c: c["agents"][0]["effects"][0].update(kind="sparkle"), "unknown effect"),
    ("agents[0].provider", agent("provider", "ghost"), 'unknown provider "ghost"'),
    ("agents[0].toolboxes[6]", lambda c: c["agents"][0]["toolboxes"].append("ghost"), 'unknown toolbox "ghost"'),
    ("entry_agent", lambda c: c.update(entry_agent="ghost"), 'unknown agent "ghost"'),
]


@pytest.mark.parametrize(("field", "edit", "text"), GO_REJECTS, ids=[f for f, _, _ in GO_REJECTS])
def test_what_go_rejects_fails_naming_the_field(field: str, edit: Edit, text: str) -> None:
    cfg = go_written()
    edit(cfg)
    with pytest.raises(ConfigError) as info:
        config_from_data(cfg, {})
    assert f"config: {field}: " in str(info.value) and text in str(info.value)


def test_the_go_written_form_itself_is_valid() -> None:
    cfg = config_from_data(go_written(), {"ANTHROPIC_API_KEY": "sk-test"})  # unset, its absence is named
    assert cfg.warnings == [] and cfg.entry().name == "lead"
