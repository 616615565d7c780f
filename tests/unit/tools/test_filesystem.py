"""The filesystem toolbox: Shelly's fs_* behaviours, texts and guards."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools import ToolBox
from shelly_dist.tools.builtin import filesystem_toolbox
from shelly_dist.tools.permissions import Permissions
from tests.unit.tools.conftest import ScriptedApprover, call


@pytest.fixture
def fs(perms: Permissions, project: Path) -> ToolBox:
    return filesystem_toolbox(perms, root=project)


def test_toolbox_is_named_filesystem_with_group_fs(fs: ToolBox) -> None:
    assert fs.name == "filesystem"
    assert {t.group for t in fs} == {"fs"}
    assert "fs_mkdir" in fs and "fs_read_lines" in fs


async def test_read_returns_full_text(fs: ToolBox, project: Path) -> None:
    (project / "a.txt").write_text("hello\nworld\n")
    assert await call(fs, "fs_read", path="a.txt") == "hello\nworld\n"


async def test_read_outside_project_is_refused(fs: ToolBox, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("s")
    with pytest.raises(ToolError, match=r"^fs_read: path outside allowed directories"):
        await call(fs, "fs_read", path=str(tmp_path / "secret.txt"))


async def test_read_through_dotdot_is_refused(fs: ToolBox, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("s")
    with pytest.raises(ToolError, match="path outside allowed directories"):
        await call(fs, "fs_read", path="sub/../../secret.txt")


async def test_read_through_symlinked_file_escape_is_refused(fs: ToolBox, project: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("s")
    (project / "innocent.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ToolError, match="path outside allowed directories"):
        await call(fs, "fs_read", path="innocent.txt")


async def test_write_through_symlinked_directory_escape_is_refused(fs: ToolBox, project: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (project / "door").symlink_to(tmp_path / "out")
    with pytest.raises(ToolError, match="path outside allowed directories"):
        await call(fs, "fs_write", path="door/planted.txt", content="x")
    assert not (tmp_path / "out" / "planted.txt").exists()


async def test_read_lines_numbers_the_requested_range(fs: ToolBox, project: Path) -> None:
    (project / "f.txt").write_text("".join(f"line{i}\n" for i in range(1, 11)))
    out = await call(fs, "fs_read_lines", path="f.txt", offset=3, limit=2)
    assert out == "[Lines 3-4 of 10]\n     3→line3\n     4→line4"


async def test_write_creates_parents_and_new_file_is_0600(fs: ToolBox, project: Path) -> None:
    assert await call(fs, "fs_write", path="new/dir/f.txt", content="x") == "ok"
    target = project / "new" / "dir" / "f.txt"
    assert target.read_text() == "x"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


async def test_write_keeps_existing_file_mode(fs: ToolBox, project: Path) -> None:
    target = project / "run.sh"
    target.write_text("old")
    target.chmod(0o755)
    await call(fs, "fs_write", path="run.sh", content="new")
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


async def test_edit_replaces_unique_text(fs: ToolBox, project: Path) -> None:
    (project / "f.txt").write_text("a = 1\nb = 2\n")
    await call(fs, "fs_edit", path="f.txt", old_text="b = 2", new_text="b = 3")
    assert (project / "f.txt").read_text() == "a = 1\nb = 3\n"


async def test_edit_with_empty_new_text_deletes(fs: ToolBox, project: Path) -> None:
    (project / "f.txt").write_text("keep drop")
    await call(fs, "fs_edit", path="f.txt", old_text=" drop")
    assert (project / "f.txt").read_text() == "keep"


async def test_edit_rejects_ambiguous_old_text(fs: ToolBox, project: Path) -> None:
    (project / "f.txt").write_text("x x x")
    with pytest.raises(ToolError, match=r"^fs_edit: old_text appears 3 times, must be unique$"):
        await call(fs, "fs_edit", path="f.txt", old_text="x", new_text="y")


async def test_edit_reports_missing_old_text(fs: ToolBox, project: Path) -> None:
    (project / "f.txt").write_text("abc")
    with pytest.raises(ToolError, match="old_text not found"):
        await call(fs, "fs_edit", path="f.txt", old_text="zzz", new_text="y")


async def test_patch_applies_hunks_in_order(fs: ToolBox, project: Path) -> None:
    (project / "f.txt").write_text("one two")
    hunks = [{"old_text": "one", "new_text": "1"}, {"old_text": "1 two", "new_text": "1 2"}]
    await call(fs, "fs_patch", path="f.txt", hunks=hunks)
    assert (project / "f.txt").read_text() == "1 2"


async def test_patch_with_a_failing_hunk_writes_nothing(fs: ToolBox, project: Path) -> None:
    (project / "f.txt").write_text("one two")
    hunks = [{"old_text": "one", "new_text": "1"}, {"old_text": "missing", "new_text": "x"}]
    with pytest.raises(ToolError, match="hunk 2: old_text not found"):
        await call(fs, "fs_patch", path="f.txt", hunks=hunks)
    assert (project / "f.txt").read_text() == "one two"


async def test_list_returns_entries_as_json(fs: ToolBox, project: Path) -> None:
    (project / "d").mkdir()
    (project / "f.txt").write_text("abc")
    entries = json.loads(await call(fs, "fs_list", path="."))
    assert {"name": "f.txt", "type": "file", "size": 3} in entries
    assert any(e["name"] == "d" and e["type"] == "dir" for e in entries)


async def test_delete_non_empty_directory_needs_recursive(fs: ToolBox, project: Path) -> None:
    (project / "d").mkdir()
    (project / "d" / "f").write_text("x")
    with pytest.raises(ToolError, match="not empty"):
        await call(fs, "fs_delete", path="d")
    assert await call(fs, "fs_delete", path="d", recursive=True) == "ok"
    assert not (project / "d").exists()


async def test_move_and_copy(fs: ToolBox, project: Path) -> None:
    (project / "a").write_text("A")
    await call(fs, "fs_copy", source="a", destination="b")
    await call(fs, "fs_move", source="a", destination="sub/c")
    assert (project / "b").read_text() == "A" and (project / "sub" / "c").read_text() == "A"
    assert not (project / "a").exists()


async def test_move_to_outside_is_refused(fs: ToolBox, project: Path, tmp_path: Path) -> None:
    (project / "a").write_text("A")
    with pytest.raises(ToolError, match=r"^fs_move: path outside allowed directories"):
        await call(fs, "fs_move", source="a", destination=str(tmp_path / "stolen"))
    assert (project / "a").exists()


async def test_stat_reports_metadata(fs: ToolBox, project: Path) -> None:
    (project / "f").write_text("12345")
    info = json.loads(await call(fs, "fs_stat", path="f"))
    assert info["name"] == "f" and info["size"] == 5 and info["is_dir"] is False
    assert set(info) == {"name", "size", "mode", "mod_time", "is_dir"}


async def test_diff_is_unified(fs: ToolBox, project: Path) -> None:
    (project / "a").write_text("x\ny\n")
    (project / "b").write_text("x\nz\n")
    out = await call(fs, "fs_diff", file_a="a", file_b="b")
    assert "--- a\n+++ b\n" in out and "-y\n+z\n" in out


async def test_mkdir_creates_parents(fs: ToolBox, project: Path) -> None:
    assert await call(fs, "fs_mkdir", path="x/y/z") == "ok"
    assert (project / "x" / "y" / "z").is_dir()


async def test_interactive_user_sees_diff_and_can_refuse(project: Path) -> None:
    approver = ScriptedApprover("no")
    fs = filesystem_toolbox(Permissions(root=project, approver=approver), root=project)
    (project / "f").write_text("old\n")
    with pytest.raises(ToolError, match=r"^fs_write: changes to .* rejected"):
        await call(fs, "fs_write", path="f", content="new\n")
    assert approver.questions[0].startswith(f"Apply changes to {project / 'f'}?\n\n")
    assert "-old\n+new\n" in approver.questions[0]
    assert (project / "f").read_text() == "old\n"


async def test_invalid_input_names_the_tool(fs: ToolBox) -> None:
    with pytest.raises(ToolError, match=r"^fs_read: invalid input: path"):
        await call(fs, "fs_read")
