"""Configs written by Go Shelly's tooling load and run unchanged.

Every fixture is in the form Go's ``shelly init`` writes (:mod:`tests.compat.go_form`: every
field, zero values, yaml.v3 layout), for every template, run through the real ``shelly`` command
against the loopback model server. The Playwright MCP server the templates list is replaced by
``mcp-server-time`` (a real stdio MCP server from the test extra) so no network is needed; the
name, ``playwright``, and the agents' references to it stay as Go writes them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from shelly_dist.engine.shellydir import template_config, template_skill_files
from shelly_dist.testing.model_server import ModelServer, Reply
from tests.compat.go_form import go_config

TEMPLATES = ("simple-assistant", "dev-team", "project-indexer")
KEYS = {"ANTHROPIC_API_KEY": "test-key", "OPENAI_API_KEY": "", "GROK_API_KEY": "", "GEMINI_API_KEY": ""}


def console_script(name: str) -> str:
    path = Path(sys.executable).with_name(name)
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


def go_project(tmp_path: Path, template: str, base_url: str = "", **edits: Any) -> Path:
    """A project whose ``.shelly/`` is what Go's ``shelly init --template`` writes: the config in
    Go's form, the template's skills, the starter context and ``local/``."""
    root = tmp_path / template
    sd = root / ".shelly"
    (sd / "local" / "sessions").mkdir(parents=True)
    (sd / "knowledge").mkdir()
    (sd / ".gitignore").write_text("local/\n")
    (sd / "context.md").write_text("# Project Context\n\n<!-- This file is auto-loaded into agent context. -->\n")
    for rel, text in template_skill_files(template):
        (sd / rel).parent.mkdir(parents=True, exist_ok=True)
        (sd / rel).write_text(text)
    cfg = yaml.safe_load(template_config(template))
    for server in cfg.get("mcp_servers") or []:
        server.update(command=console_script("mcp-server-time"), args=[])
    if base_url:
        cfg["providers"][0]["base_url"] = base_url
    cfg.update(edits)
    (sd / "config.yaml").write_text(go_config(cfg))
    return root


def shelly(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shelly_dist.cli.main", *args], cwd=root, capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL, env={**os.environ, **KEYS, **(env or {})},
    )


def test_the_fixture_is_in_go_form_every_field_with_zero_values(tmp_path: Path) -> None:
    text = (go_project(tmp_path, "dev-team") / ".shelly" / "config.yaml").read_text()
    for written in ('      base_url: ""\n', "        max_retries: 0\n", '        base_delay: ""\n',
                    '        collect_window: ""\n', "        max_batch_size: 0\n", '        question_timeout: ""\n',
                    "      context_window: null\n", "    max_external_file_size: 0\n", "default_context_windows: {}\n",
                    "          params: {}\n"):
        assert written in text


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_go_written_template_passes_agents_check_with_no_warnings(tmp_path: Path, template: str) -> None:
    out = shelly(go_project(tmp_path, template), "agents", "--check", "--strict")
    assert out.returncode == 0, out.stderr
    agents = yaml.safe_load(template_config(template))["agents"]
    assert out.stdout.strip() == f"ok: {len(agents)} agents, 0 warnings"


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_go_written_template_lists_its_agents(tmp_path: Path, template: str) -> None:
    out = shelly(go_project(tmp_path, template), "agents", "--json")
    assert out.returncode == 0, out.stderr
    expected = yaml.safe_load(template_config(template))
    assert [(a["name"], a["entry"]) for a in json.loads(out.stdout)] == [
        (a["name"], a["name"] == expected["entry_agent"]) for a in expected["agents"]]
    assert out.stderr == ""


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_go_written_template_runs_against_the_loopback_model(tmp_path: Path, template: str) -> None:
    with ModelServer(format="anthropic", default=Reply(text="all done")) as server:
        root = go_project(tmp_path, template, base_url=server.url)
        out = shelly(root, "run", "--json", "--quiet", "say hello")
        first = server.requests[0].body
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["reply"] == "all done"
    tools = {t["name"] for t in first["tools"]}
    assert "ask_user" in tools
    if template != "project-indexer":
        assert "get_current_time" in tools  # the "playwright" MCP server's tools (its stand-in here)


def test_dev_team_lead_delegates_and_asks_the_user_without_a_terminal(tmp_path: Path) -> None:
    with ModelServer(format="anthropic") as server:
        server.push(
            Reply(tool_calls=[{"name": "delegate", "arguments": {"tasks": [
                {"agent": "explorer", "task": "map the code", "context": "a Go-written team"}]}}]),
            Reply(text="the code is small"),
            Reply(tool_calls=[{"name": "ask_user", "arguments": {"question": "Approve the plan?",
                                                                 "options": ["approve", "change"]}}]),
            Reply(text="nobody could approve, so no coding was done"),
        )
        root = go_project(tmp_path, "dev-team", base_url=server.url)
        out = shelly(root, "run", "--json", "--quiet", "refactor the parser")
        bodies = [r.body for r in server.requests]
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["reply"] == "nobody could approve, so no coding was done"
    delegated = bodies[2]["messages"][-1]["content"][0]["content"]
    assert json.loads(delegated)[0]["result"] == "the code is small"
    asked = bodies[3]["messages"][-1]["content"][0]
    assert asked["is_error"] is True and asked["content"].startswith("ask_user: nobody can answer")


README_EXTRAS = {  # what Shelly's engine README example and Go's own test fixture carry
    "browser": {"headless": True},
}


def users_project(tmp_path: Path, base_url: str = "") -> Path:
    root = go_project(tmp_path, "simple-assistant", base_url=base_url, **README_EXTRAS)
    path = root / ".shelly" / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["agents"][0]["skills"] = ["project-indexer", "deploy-checklist"]
    cfg["agents"][0]["toolboxes"] = [*cfg["agents"][0]["toolboxes"], "state"]
    cfg["agents"][0]["effects"] = None
    cfg["mcp_servers"].append({"name": "search", "command": "mcp-search", "args": ["--port", "8080"], "url": ""})
    text = go_config(cfg) + "browser:\n    headless: true\n"
    path.write_text(text.replace("    effects: []\n", "    effects:\n"))  # an empty (null) list
    return root


def test_unknown_keys_missing_skills_and_a_shadowed_mcp_name_warn_once_each(tmp_path: Path) -> None:
    out = shelly(users_project(tmp_path), "agents", "--check")
    assert out.returncode == 0, out.stderr
    warnings = out.stdout.splitlines()[:-1]
    assert len(warnings) == 3, out.stdout
    assert any("config: browser: unknown key" in w for w in warnings)
    assert any('agents[0].skills[1]: skill "deploy-checklist" has no folder' in w for w in warnings)
    assert any('mcp_servers[1].name: "search" is a built-in toolbox' in w for w in warnings)
    assert out.stdout.splitlines()[-1] == "ok: 1 agents, 3 warnings"


def test_strict_config_turns_each_warning_into_an_error_naming_it(tmp_path: Path) -> None:
    root = users_project(tmp_path)
    for args, env in ((("agents", "--strict"), {}), (("agents",), {"SHELLY_STRICT_CONFIG": "1"})):
        out = shelly(root, *args, env=env)
        assert out.returncode == 2, out.stderr
        assert "browser: unknown key" in out.stderr and "strict config" in out.stderr


def test_a_users_config_with_extras_runs_warning_once_each_on_stderr(tmp_path: Path) -> None:
    with ModelServer(format="anthropic", default=Reply(text="fine")) as server:
        out = shelly(users_project(tmp_path, server.url), "run", "--json", "--quiet", "hi")
        tools = {t["name"] for t in server.requests[0].body["tools"]}
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["reply"] == "fine"
    assert out.stderr.count("shelly: warning: config: browser: unknown key") == 1
    assert out.stderr.count('skill "deploy-checklist"') == 1
    assert {"search_content", "search_files"} <= tools  # "search" is the built-in; mcp-search never started


def test_a_legacy_permissions_file_is_migrated_into_local_on_run(tmp_path: Path) -> None:
    with ModelServer(format="anthropic", default=Reply(text="ok")) as server:
        root = go_project(tmp_path, "simple-assistant", base_url=server.url)
        (root / ".shelly" / "permissions.json").write_text(json.dumps(["/srv/shared"]))
        out = shelly(root, "run", "--quiet", "hi")
    assert out.returncode == 0, out.stderr
    assert not (root / ".shelly" / "permissions.json").exists()
    assert json.loads((root / ".shelly" / "local" / "permissions.json").read_text()) == ["/srv/shared"]


def test_shelly_index_runs_the_go_written_indexer_team_and_check_reports_freshness(tmp_path: Path) -> None:
    with ModelServer(format="anthropic") as server:
        root = go_project(tmp_path, "project-indexer", base_url=server.url)
        (root / ".shelly" / "context.md").unlink()
        assert shelly(root, "index", "--check").returncode == 1
        server.push(
            Reply(tool_calls=[{"name": "fs_write", "arguments": {
                "path": ".shelly/context.md", "content": "# Project Context\n\nA tiny project.\n"}}]),
            Reply(text="indexed"),
        )
        out = shelly(root, "index", "--config", ".shelly/config.yaml", "--quiet")
        task = server.requests[0].body["messages"][0]["content"][0]["text"]
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "indexed"
    assert task == "Index this project. Build or update the knowledge graph in .shelly/."
    assert (root / ".shelly" / "context.md").read_text() == "# Project Context\n\nA tiny project.\n"
    check = shelly(root, "index", "--check")
    assert (check.returncode, check.stdout.strip()) == (0, "Knowledge graph is up to date.")


def test_shelly_index_writes_the_indexer_skill_only_when_missing(tmp_path: Path) -> None:
    with ModelServer(format="anthropic", default=Reply(text="indexed")) as server:
        root = go_project(tmp_path, "project-indexer", base_url=server.url)
        skill = root / ".shelly" / "skills" / "project-indexer" / "SKILL.md"
        skill.write_text("---\ndescription: mine\n---\nmy own indexing rules\n")
        other = go_project(tmp_path / "other", "project-indexer", base_url=server.url)
        shutil.rmtree(other / ".shelly" / "skills")
        assert shelly(root, "index", "--config", ".shelly/config.yaml", "--quiet").returncode == 0
        assert shelly(other, "index", "--config", ".shelly/config.yaml", "--quiet").returncode == 0
    assert skill.read_text().endswith("my own indexing rules\n")
    written = other / ".shelly" / "skills" / "project-indexer" / "SKILL.md"
    assert written.read_text() == dict(template_skill_files("project-indexer"))[
        Path("skills/project-indexer/SKILL.md")]


def test_shelly_index_without_a_shelly_dir_says_to_run_init(tmp_path: Path) -> None:
    out = shelly(tmp_path, "index")
    assert out.returncode == 2
    assert "index: .shelly/ directory not found at .shelly (run 'shelly init' first)" in out.stderr


def test_go_zero_max_external_file_size_still_loads_claude_md_into_the_prompt(tmp_path: Path) -> None:
    with ModelServer(format="anthropic", default=Reply(text="ok")) as server:
        root = go_project(tmp_path, "simple-assistant", base_url=server.url)
        (root / "CLAUDE.md").write_text("House rule: tabs, never spaces.\n")
        out = shelly(root, "run", "--quiet", "hi")
        system = server.requests[0].body["system"][0]["text"]
    assert out.returncode == 0, out.stderr
    assert "max_external_file_size: 0" in (root / ".shelly" / "config.yaml").read_text()
    assert "House rule: tabs, never spaces." in system


def test_go_zero_max_retries_is_three_retries_on_rate_limits(tmp_path: Path) -> None:
    with ModelServer(format="anthropic", default=Reply(text="through")) as server:
        server.push(*[Reply.error(429) for _ in range(3)])
        root = go_project(tmp_path, "simple-assistant", base_url=server.url)
        out = shelly(root, "run", "--json", "--quiet", "hi")
        attempts = len(server.requests)
    assert "        max_retries: 0\n" in (root / ".shelly" / "config.yaml").read_text()
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["reply"] == "through" and attempts == 4
