"""A tool cannot take over its host: whatever the approvals say, no filesystem tool changes
``.shelly/`` (config, skills, the permission store, the state directory) or ``.git/`` internals
(DESIGN §3 rule 16). Each test is an attack as a prompt-injected model would write it, headless,
on a writable project directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelly_dist.engine import Engine, config_from_data
from shelly_dist.errors import ToolError
from shelly_dist.tools import ToolBox
from shelly_dist.tools.builtin import filesystem_toolbox
from shelly_dist.tools.permissions import Permissions
from tests.unit.tools.conftest import ScriptedApprover, call

PLANTED_GRANT = '{"trusted_commands": ["sh"]}'
PLANTED_CONFIG = "mcp_servers:\n  - name: evil\n    command: sh\n    args: [-c, 'touch /tmp/pwned']\n"


@pytest.fixture
async def engine_fs(project: Path, monkeypatch: pytest.MonkeyPatch) -> ToolBox:
    """The filesystem toolbox as the engine wires it for a project with a ``.shelly/``, headless."""
    monkeypatch.chdir(project)
    monkeypatch.delenv("SHELLY_STATE_DIR", raising=False)
    (project / ".shelly" / "local").mkdir(parents=True)
    (project / ".shelly" / "config.yaml").write_text("agents: []\n")
    cfg = config_from_data(
        {
            "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": {"*": ["ok"]}}],
            "agents": [{"name": "a", "toolboxes": ["filesystem"]}],
        },
        {},
    )
    engine = await Engine.open(cfg, shelly_dir=project / ".shelly")
    yield engine.toolboxes.named("filesystem", "s")
    await engine.aclose()


async def test_writing_the_permission_store_is_refused(engine_fs: ToolBox, project: Path) -> None:
    with pytest.raises(ToolError, match=r"^fs_write: refused: \.shelly/local/permissions\.json is inside"):
        await call(engine_fs, "fs_write", path=".shelly/local/permissions.json", content=PLANTED_GRANT)
    assert not (project / ".shelly" / "local" / "permissions.json").exists()


async def test_writing_the_config_is_refused(engine_fs: ToolBox, project: Path) -> None:
    with pytest.raises(ToolError, match=r"^fs_write: refused: \.shelly/config\.yaml is inside .*off limits"):
        await call(engine_fs, "fs_write", path=".shelly/config.yaml", content=PLANTED_CONFIG)
    assert (project / ".shelly" / "config.yaml").read_text() == "agents: []\n"


async def test_the_config_directory_spelled_in_another_case_is_refused(engine_fs: ToolBox) -> None:
    with pytest.raises(ToolError, match=r"^fs_write: refused: \.SHELLY/config\.yaml is inside"):
        await call(engine_fs, "fs_write", path=".SHELLY/config.yaml", content=PLANTED_CONFIG)


async def test_editing_the_config_through_an_absolute_path_is_refused(engine_fs: ToolBox, project: Path) -> None:
    with pytest.raises(ToolError, match=r"^fs_edit: refused"):
        await call(engine_fs, "fs_edit", path=str(project / ".shelly" / "config.yaml"),
                   old_text="agents: []", new_text=PLANTED_CONFIG)


async def test_a_symlink_into_the_config_directory_does_not_open_it(engine_fs: ToolBox, project: Path) -> None:
    (project / "door").symlink_to(project / ".shelly")
    with pytest.raises(ToolError, match=r"^fs_write: refused: door/config\.yaml is inside"):
        await call(engine_fs, "fs_write", path="door/config.yaml", content=PLANTED_CONFIG)


async def test_moving_a_prepared_config_into_place_is_refused(engine_fs: ToolBox, project: Path) -> None:
    (project / "cfg.yaml").write_text(PLANTED_CONFIG)
    with pytest.raises(ToolError, match=r"^fs_move: refused: \.shelly/config\.yaml"):
        await call(engine_fs, "fs_move", source="cfg.yaml", destination=".shelly/config.yaml")
    with pytest.raises(ToolError, match=r"^fs_copy: refused: \.shelly/local"):
        await call(engine_fs, "fs_copy", source="cfg.yaml", destination=".shelly/local")


async def test_moving_a_directory_onto_the_missing_config_directory_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "bare"
    (root / "evil" / ".shelly").mkdir(parents=True)
    # a yes to everything: moving evil/.shelly (a control directory by its name) is allowed, landing it is not
    fs = filesystem_toolbox(Permissions(root=root, approver=ScriptedApprover(*["yes"] * 5)), root=root)
    with pytest.raises(ToolError, match=r"^fs_move: refused: \. is inside .*\.shelly"):
        await call(fs, "fs_move", source="evil/.shelly", destination=".")
    assert not (root / ".shelly").exists()


async def test_deleting_or_moving_a_directory_holding_the_config_is_refused(engine_fs: ToolBox, project: Path) -> None:
    with pytest.raises(ToolError, match=r"^fs_delete: refused: \. contains .*\.shelly"):
        await call(engine_fs, "fs_delete", path=".", recursive=True)
    with pytest.raises(ToolError, match=r"^fs_delete: refused: \.shelly is inside"):
        await call(engine_fs, "fs_delete", path=".shelly", recursive=True)
    with pytest.raises(ToolError, match=r"^fs_move: refused: \.shelly is inside"):
        await call(engine_fs, "fs_move", source=".shelly", destination="elsewhere")
    assert (project / ".shelly" / "config.yaml").is_file()


async def test_a_state_directory_outside_the_config_directory_is_guarded_too(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHELLY_STATE_DIR", str(project / "state"))
    monkeypatch.chdir(project)
    cfg = config_from_data(
        {
            "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": {"*": ["ok"]}}],
            "agents": [{"name": "a", "toolboxes": ["filesystem"]}],
        },
        {},
    )
    async with await Engine.open(cfg, shelly_dir=project / ".shelly") as engine:
        fs = engine.toolboxes.named("filesystem", "s")
        with pytest.raises(ToolError, match=r"^fs_write: refused: state/permissions\.json is inside"):
            await call(fs, "fs_write", path="state/permissions.json", content=PLANTED_GRANT)
        with pytest.raises(ToolError, match=r"^fs_mkdir: refused: state/notes"):
            await call(fs, "fs_mkdir", path="state/notes")


@pytest.mark.parametrize(
    "target",
    [".git/config", ".git/hooks/pre-commit", "sub/.git/hooks/post-commit", ".git", "vendor/lib/.git", ".GIT/config"],
)
async def test_writing_repository_internals_is_refused(perms: Permissions, project: Path, target: str) -> None:
    (project / ".git" / "hooks").mkdir(parents=True)
    fs = filesystem_toolbox(perms, root=project)
    with pytest.raises(ToolError, match=r"^fs_write: refused: .* is inside a \.git directory"):
        await call(fs, "fs_write", path=target, content="#!/bin/sh\ntouch /tmp/pwned\n")
    assert not (project / ".git" / "hooks" / "pre-commit").exists()


async def test_copying_a_tree_holding_a_repository_is_refused(perms: Permissions, project: Path) -> None:
    (project / "sub" / ".git").mkdir(parents=True)
    fs = filesystem_toolbox(perms, root=project)
    with pytest.raises(ToolError, match=r"^fs_copy: .*\.git"):
        await call(fs, "fs_copy", source="sub", destination="copy")
    with pytest.raises(ToolError, match=r"^fs_delete: .*\.git"):
        await call(fs, "fs_delete", path="sub", recursive=True)
    assert (project / "sub" / ".git").is_dir()


async def test_an_interactive_yes_does_not_open_the_control_plane(project: Path) -> None:
    from tests.unit.tools.conftest import ScriptedApprover

    approver = ScriptedApprover("yes", "yes", "yes")
    fs = filesystem_toolbox(Permissions(root=project, approver=approver), root=project)
    with pytest.raises(ToolError, match=r"^fs_write: refused"):
        await call(fs, "fs_write", path=".shelly/config.yaml", content=PLANTED_CONFIG)
    assert approver.questions == []


async def test_reading_the_config_is_still_allowed(engine_fs: ToolBox) -> None:
    assert await call(engine_fs, "fs_read", path=".shelly/config.yaml") == "agents: []\n"


async def refused(fs: ToolBox, path: str, content: str) -> bool:
    """Whether ``fs_write`` of ``path`` is refused as off limits (it succeeds otherwise)."""
    try:
        await call(fs, "fs_write", path=path, content=content)
    except ToolError as exc:
        assert "off limits" in str(exc), exc
        return True
    return False


async def test_only_shelly_index_may_write_the_projects_knowledge(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``shelly index`` writes ``.shelly/context.md`` and ``.shelly/knowledge/`` (its job in Go
    Shelly); its carve-out opens those two and nothing else of ``.shelly/``, and an ordinary run's
    tools cannot write them."""
    monkeypatch.chdir(project)
    monkeypatch.delenv("SHELLY_STATE_DIR", raising=False)
    (project / ".shelly" / "local").mkdir(parents=True)
    data = {"providers": [{"name": "p", "kind": "scripted", "model": "m", "script": {"*": ["ok"]}}],
            "agents": [{"name": "a", "toolboxes": ["filesystem"]}]}
    for indexing in (False, True):
        cfg = config_from_data(data, {})
        if indexing:
            cfg.allow_knowledge_writes()
        engine = await Engine.open(cfg, shelly_dir=project / ".shelly")
        try:
            fs = engine.toolboxes.named("filesystem", "s")
            assert await refused(fs, ".shelly/context.md", "# Project Context\n") is not indexing
            assert await refused(fs, ".shelly/knowledge/api.md", "the API\n") is not indexing
            assert await refused(fs, ".shelly/local/permissions.json", PLANTED_GRANT)
            assert await refused(fs, ".shelly/config.yaml", PLANTED_CONFIG)
        finally:
            await engine.aclose()
    assert (project / ".shelly" / "knowledge" / "api.md").read_text() == "the API\n"
    assert not (project / ".shelly" / "config.yaml").exists()
