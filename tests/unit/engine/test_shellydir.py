"""The .shelly/ layout, bootstrap from templates, and where runtime state goes (state_dir)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shelly_dist.engine.shellydir import (
    ShellyDir,
    bootstrap,
    list_templates,
    migrate_permissions,
    state_dir,
)
from shelly_dist.errors import UsageError


def test_paths_follow_shelly_layout(tmp_path: Path) -> None:
    d = ShellyDir(tmp_path / ".shelly")
    rel = {name: getattr(d, name).relative_to(d.root).as_posix() for name in
           ("config", "context", "skills", "knowledge", "local", "permissions", "notes",
            "reflections", "sessions", "history", "pricing")}
    assert rel == {
        "config": "config.yaml",
        "context": "context.md",
        "skills": "skills",
        "knowledge": "knowledge",
        "local": "local",
        "permissions": "local/permissions.json",
        "notes": "local/notes",
        "reflections": "local/reflections",
        "sessions": "local/sessions",
        "history": "local/history",
        "pricing": "local/pricing.yaml",
    }
    assert d.offload("coder") == d.root / "offload" / "coder"
    assert d.project_root == tmp_path.resolve()


def test_bootstrap_creates_dirs_gitignore_config_and_context(tmp_path: Path) -> None:
    root = tmp_path / ".shelly"
    written = bootstrap(root)
    d = ShellyDir(root)
    for folder in (d.skills, d.knowledge, d.local, d.sessions):
        assert folder.is_dir()
    assert d.gitignore.read_text() == "local/\n"
    assert "${ANTHROPIC_API_KEY}" in d.config.read_text()
    assert d.context.read_text().strip()
    assert set(written) == {d.gitignore, d.config, d.context, d.skills / "project-indexer" / "SKILL.md"}


def test_bootstrap_never_overwrites_without_force(tmp_path: Path) -> None:
    root = tmp_path / ".shelly"
    root.mkdir()
    (root / "config.yaml").write_text("mine")
    written = bootstrap(root)
    assert (root / "config.yaml").read_text() == "mine"
    assert root / "config.yaml" not in written
    assert bootstrap(root) == []


def test_bootstrap_with_force_overwrites(tmp_path: Path) -> None:
    root = tmp_path / ".shelly"
    root.mkdir()
    (root / "config.yaml").write_text("mine")
    written = bootstrap(root, force=True)
    assert (root / "config.yaml").read_text() != "mine"
    assert root / "config.yaml" in written


def test_bootstrap_writes_the_skills_the_templates_agents_list_as_go_shelly_does(tmp_path: Path) -> None:
    root = tmp_path / ".shelly"
    bootstrap(root, template="dev-team")
    assert sorted(p.name for p in (root / "skills").iterdir()) == [
        "coder-workflow", "explorer-workflow", "lead-workflow", "planner-workflow", "project-indexer",
        "reviewer-workflow"]
    assert (root / "skills" / "lead-workflow" / "SKILL.md").read_text().startswith("---\ndescription: ")


def test_bootstrap_unknown_template_fails_listing_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r'unknown template "nope".*simple-assistant'):
        bootstrap(tmp_path / ".shelly", template="nope")


def test_list_templates_names_and_describes_each() -> None:
    templates = dict(list_templates())
    assert {"simple-assistant", "dev-team", "project-indexer", "demo"} <= set(templates)
    assert "skills" not in templates
    assert all(templates.values())


def test_state_dir_is_local_when_the_shelly_dir_is_writable(tmp_path: Path) -> None:
    root = tmp_path / ".shelly"
    root.mkdir()
    assert state_dir(root, {"HOME": str(tmp_path / "home")}) == root / "local"


def test_state_dir_moves_to_the_user_state_home_when_the_shelly_dir_is_read_only(tmp_path: Path) -> None:
    root = tmp_path / "proj" / ".shelly"
    root.mkdir(parents=True)
    root.chmod(0o555)
    try:
        found = state_dir(root, {"XDG_STATE_HOME": str(tmp_path / "xdg")})
        home = state_dir(root, {"HOME": str(tmp_path / "home")})
    finally:
        root.chmod(0o755)
    if os.geteuid() == 0:  # root writes through mode bits: only a read-only mount moves it (see the e2e test)
        assert found == root / "local"
        return
    assert found.parent == tmp_path / "xdg" / "shelly" and found.name.startswith("proj-")
    assert home.parent == tmp_path / "home" / ".local" / "state" / "shelly"


def test_state_dir_env_variable_wins(tmp_path: Path) -> None:
    root = tmp_path / ".shelly"
    root.mkdir()
    assert state_dir(root, {"SHELLY_STATE_DIR": str(tmp_path / "st")}) == tmp_path / "st"


def test_state_dir_is_not_created_by_asking(tmp_path: Path) -> None:
    root = tmp_path / ".shelly"
    root.mkdir()
    state_dir(root, {})
    assert list(root.iterdir()) == []


def test_shelly_dir_puts_sessions_and_permissions_in_its_state_dir(tmp_path: Path) -> None:
    d = ShellyDir(tmp_path / ".shelly", state=tmp_path / "st")
    assert d.sessions == tmp_path / "st" / "sessions"
    assert d.permissions == tmp_path / "st" / "permissions.json"


def test_migrate_permissions_moves_legacy_file_once(tmp_path: Path) -> None:
    d = ShellyDir(tmp_path / ".shelly")
    d.root.mkdir()
    d.legacy_permissions.write_text('["/a"]')
    assert migrate_permissions(d.root) is True
    assert d.permissions.read_text() == '["/a"]' and not d.legacy_permissions.exists()
    d.legacy_permissions.write_text('["/b"]')
    assert migrate_permissions(d.root) is False
    assert d.permissions.read_text() == '["/a"]'
