"""The .shelly/ layout, bootstrap from templates, and ensure_structure."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelly_dist.engine.shellydir import (
    ShellyDir,
    bootstrap,
    ensure_structure,
    list_templates,
    migrate_permissions,
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


def test_ensure_structure_is_idempotent_and_creates_only_local_parts(tmp_path: Path) -> None:
    root = tmp_path / ".shelly"
    first = ensure_structure(root)
    second = ensure_structure(root)
    d = ShellyDir(root)
    assert first == [d.gitignore] and second == []
    assert d.sessions.is_dir()
    assert not d.skills.exists() and not d.config.exists()


def test_migrate_permissions_moves_legacy_file_once(tmp_path: Path) -> None:
    d = ShellyDir(tmp_path / ".shelly")
    d.root.mkdir()
    d.legacy_permissions.write_text('["/a"]')
    assert migrate_permissions(d.root) is True
    assert d.permissions.read_text() == '["/a"]' and not d.legacy_permissions.exists()
    d.legacy_permissions.write_text('["/b"]')
    assert migrate_permissions(d.root) is False
    assert d.permissions.read_text() == '["/a"]'
