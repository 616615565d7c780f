"""File operations that cannot be raced or torn: the checked path is the one operated on, writes
replace a file whole, reads refuse what could block (DESIGN §3 rule 16)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools import ToolBox
from shelly_dist.tools.builtin import filesystem_toolbox
from shelly_dist.tools.permissions import Permissions
from tests.unit.tools.conftest import call


@pytest.fixture
def fs(perms: Permissions, project: Path) -> ToolBox:
    return filesystem_toolbox(perms, root=project)


async def test_a_symlink_swapped_in_during_writes_never_leads_outside(
    fs: ToolBox, project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / "sub.real").mkdir()
    (project / "sub").symlink_to(project / "sub.real")
    stop = threading.Event()
    swaps = 0

    def swap() -> None:
        # Point sub at a directory inside the root, then outside, then inside…, each swap atomic.
        nonlocal swaps
        while not stop.is_set():
            target = outside if swaps % 2 == 0 else project / "sub.real"
            (project / "sub.next").symlink_to(target)
            os.replace(project / "sub.next", project / "sub")
            swaps += 1

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        for batch in range(0, 400, 20):  # 20 writes in flight at a time, 400 in all
            await asyncio.gather(
                *(call(fs, "fs_write", path=f"sub/f{i}.txt", content="x") for i in range(batch, batch + 20)),
                return_exceptions=True,
            )
    finally:
        stop.set()
        swapper.join()
    assert swaps > 10  # the swapper really ran during the writes
    assert list(outside.iterdir()) == []


async def test_a_path_swapped_to_a_symlink_after_the_check_is_refused(
    fs: ToolBox, perms: Permissions, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / "sub").mkdir()
    checked = perms.check_real

    async def check_then_swap(tool: str, raw: str, **kw: bool) -> Path:
        path = await checked(tool, raw, **kw)
        (project / "sub").rmdir()
        (project / "sub").symlink_to(outside)  # the swap lands between check and write
        return path

    monkeypatch.setattr(perms, "check_real", check_then_swap)
    with pytest.raises(ToolError, match=r"^fs_write: path changed while in use"):
        await call(fs, "fs_write", path="sub/planted.txt", content="x")
    assert list(outside.iterdir()) == []


def test_a_write_failing_midway_leaves_the_old_file_whole(project: Path) -> None:
    old = "".join(f"line {i}\n" for i in range(2000))
    (project / "big.txt").write_text(old)
    # The file-size limit makes the write fail after some bytes, as a full disk or a quota does.
    script = f"""
import asyncio, json, resource, signal
from pathlib import Path
from shelly_dist.tools.builtin import filesystem_toolbox
from shelly_dist.tools.permissions import Permissions
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
root = Path({str(project)!r})
fs = filesystem_toolbox(Permissions(root=root), root=root)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    asyncio.run(fs.get("fs_write").handler(json.dumps({{"path": "big.txt", "content": "new\\n" * 5000}})))
except Exception as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "fs_write: File too large" in out.stdout, out
    assert (project / "big.txt").read_text() == old
    assert [p.name for p in project.iterdir()] == ["big.txt"]  # no temporary file left behind


async def test_write_replaces_the_file_atomically_keeping_its_mode(fs: ToolBox, project: Path) -> None:
    target = project / "run.sh"
    target.write_text("old\n")
    target.chmod(0o751)
    inode = target.stat().st_ino
    await call(fs, "fs_write", path="run.sh", content="new\n")
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o751
    assert target.stat().st_ino != inode  # a new file renamed over the old, not rewritten in place


async def test_writing_through_a_symlink_inside_the_root_replaces_its_target(fs: ToolBox, project: Path) -> None:
    (project / "real.txt").write_text("old")
    (project / "alias.txt").symlink_to(project / "real.txt")
    await call(fs, "fs_edit", path="alias.txt", old_text="old", new_text="new")
    assert (project / "real.txt").read_text() == "new"
    assert (project / "alias.txt").is_symlink()


async def test_reading_a_fifo_is_refused_without_blocking(fs: ToolBox, project: Path) -> None:
    os.mkfifo(project / "pipe")
    with pytest.raises(ToolError, match=r"^fs_read: not a regular file \(a FIFO, device or socket\)"):
        await asyncio.wait_for(call(fs, "fs_read", path="pipe"), 5)


async def test_reading_a_device_is_refused(project: Path) -> None:
    fs = filesystem_toolbox(Permissions(root=project, fs_directories=["/dev"]), root=project)
    with pytest.raises(ToolError, match=r"^fs_read: not a regular file"):
        await asyncio.wait_for(call(fs, "fs_read", path="/dev/zero"), 5)


async def test_deleting_a_symlink_removes_the_link_not_its_target(fs: ToolBox, project: Path) -> None:
    (project / "keep").mkdir()
    (project / "keep" / "f").write_text("x")
    (project / "link").symlink_to(project / "keep")
    await call(fs, "fs_delete", path="link", recursive=True)
    assert not (project / "link").is_symlink() and (project / "keep" / "f").read_text() == "x"


async def test_a_file_with_the_longest_allowed_name_is_written(fs: ToolBox, project: Path) -> None:
    name = "n" * 255
    await call(fs, "fs_write", path=name, content="x")
    assert (project / name).read_text() == "x"
