"""search_content and search_files: results, globs, binaries and the directory guard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools import ToolBox
from shelly_dist.tools.builtin import search_toolbox
from shelly_dist.tools.builtin._grep import glob_regex
from shelly_dist.tools.builtin.search import CONTENT_CAP, MAX_CONTEXT
from shelly_dist.tools.permissions import Permissions
from tests.unit.tools.conftest import call, longest_loop_stall


@pytest.fixture
def tb(perms: Permissions, project: Path) -> ToolBox:
    (project / "src" / "pkg").mkdir(parents=True)
    (project / "src" / "main.py").write_text("import os\ndef main():\n    return 42\n")
    (project / "src" / "pkg" / "util.py").write_text("def helper():\n    return 'main'\n")
    (project / "blob.bin").write_bytes(b"main\0\x01\x02")
    return search_toolbox(perms, root=project)


def test_search_tools_are_in_group_fs(tb: ToolBox) -> None:
    assert tb.name == "search" and {t.group for t in tb} == {"fs"}


async def test_content_matches_with_relative_path_and_line(tb: ToolBox) -> None:
    found = json.loads(await call(tb, "search_content", pattern=r"def \w+\(", directory="."))
    assert [(r["path"], r["line"]) for r in found] == [("src/main.py", 2), ("src/pkg/util.py", 1)]


async def test_content_skips_binary_files(tb: ToolBox) -> None:
    found = json.loads(await call(tb, "search_content", pattern="main", directory="."))
    assert "blob.bin" not in {r["path"] for r in found}


async def test_content_includes_context_lines(tb: ToolBox) -> None:
    found = json.loads(await call(tb, "search_content", pattern="42", directory="src", context_lines=1))
    assert found == [
        {"path": "main.py", "line": 3, "content": "    return 42", "context": ["def main():", "    return 42"]}
    ]


async def test_content_respects_max_results(tb: ToolBox) -> None:
    found = json.loads(await call(tb, "search_content", pattern=".", directory=".", max_results=2))
    assert len(found) == 2


async def test_files_glob_with_double_star(tb: ToolBox) -> None:
    assert json.loads(await call(tb, "search_files", pattern="src/**/*.py", directory=".")) == [
        "src/main.py",
        "src/pkg/util.py",
    ]


async def test_files_pattern_without_slash_matches_names(tb: ToolBox) -> None:
    assert json.loads(await call(tb, "search_files", pattern="util.*", directory=".")) == ["src/pkg/util.py"]


def test_single_star_stays_within_a_segment() -> None:
    assert not glob_regex("src/*.py").match("src/pkg/util.py")


async def test_search_outside_allowed_directories_is_refused(tb: ToolBox, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"^search_content: path outside allowed directories"):
        await call(tb, "search_content", pattern="x", directory=str(tmp_path))


async def test_symlinked_file_leaving_the_directory_is_not_searched(tb: ToolBox, project: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("TOPSECRET")
    (project / "src" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    assert json.loads(await call(tb, "search_content", pattern="TOPSECRET", directory=".")) == []


async def test_catastrophic_pattern_times_out_without_stalling_the_loop(perms: Permissions, project: Path) -> None:
    (project / "evil.txt").write_text("a" * 28 + "b\n")  # (a+)+$ backtracks 2**28 ways: ~13 s in re
    tb = search_toolbox(perms, root=project, timeout=1)
    started = time.monotonic()
    outcome, stall = await longest_loop_stall(call(tb, "search_content", pattern="(a+)+$", directory="."))
    assert isinstance(outcome, ToolError) and str(outcome).startswith("search_content: timed out after 1s")
    assert time.monotonic() - started < 3 and stall < 0.5


async def test_context_lines_over_the_cap_are_invalid_input(tb: ToolBox) -> None:
    with pytest.raises(ToolError, match=r"^search_content: invalid input: context_lines"):
        await call(tb, "search_content", pattern="x", directory=".", context_lines=MAX_CONTEXT + 1)


async def test_result_stops_growing_at_one_megabyte(perms: Permissions, project: Path) -> None:
    (project / "big.txt").write_text(("m" * 99 + "\n") * 20_000)  # 2 MB, every line a match
    tb = search_toolbox(perms, root=project)
    out = await call(tb, "search_content", pattern="m", directory=".", max_results=100_000,
                     context_lines=MAX_CONTEXT)
    found = json.loads(out)
    assert len(out) <= CONTENT_CAP + 50_000 and found[0]["context"][1] == "m" * 99


async def test_a_long_line_is_cut_in_the_result(perms: Permissions, project: Path) -> None:
    (project / "wide.txt").write_text("x" * 10_000 + "\n")
    found = json.loads(await call(search_toolbox(perms, root=project), "search_content", pattern="x", directory="."))
    assert found[0]["content"] == "x" * 2000 + "…"


async def test_context_spans_the_lines_after_the_match(tb: ToolBox) -> None:
    found = json.loads(await call(tb, "search_content", pattern="import", directory="src", context_lines=1))
    assert found == [{"path": "main.py", "line": 1, "content": "import os", "context": ["import os", "def main():"]}]


async def test_a_fifo_in_the_directory_is_skipped(perms: Permissions, project: Path) -> None:
    os.mkfifo(project / "pipe")
    (project / "a.txt").write_text("needle\n")
    tb = search_toolbox(perms, root=project, timeout=5)
    found = json.loads(await call(tb, "search_content", pattern="needle", directory="."))
    assert [r["path"] for r in found] == ["a.txt"]


async def test_catastrophic_glob_times_out_without_stalling_the_loop(perms: Permissions, project: Path) -> None:
    (project / ("a" * 60)).write_text("")  # *a*a*a*a*a*a*b against it: ~5 s in re
    tb = search_toolbox(perms, root=project, timeout=1)
    outcome, stall = await longest_loop_stall(call(tb, "search_files", pattern="*a*a*a*a*a*a*a*b", directory="."))
    assert isinstance(outcome, ToolError) and str(outcome).startswith("search_files: timed out after 1s")
    assert stall < 0.5


FLIPPER = """
import os, sys
from pathlib import Path
project, outside = Path(sys.argv[1]), Path(sys.argv[2])
flips = 0
while not (project.parent / "stop").exists():
    (project / "flip.next").symlink_to(outside / "secret.txt")
    os.replace(project / "flip.next", project / "flip.txt")  # each swap atomic
    os.rename(project / "d", project / "d.away")
    (project / "d").symlink_to(outside)
    (project / "flip.next").write_text("INSIDE\\n")
    os.replace(project / "flip.next", project / "flip.txt")
    (project / "d").unlink()
    os.rename(project / "d.away", project / "d")
    flips += 1
print(flips)
"""


@pytest.fixture
def racing(project: Path, tmp_path: Path) -> Iterator[Callable[[], int]]:
    """A process flipping ``flip.txt`` between a file and a symlink to a secret outside, and ``d``
    between a directory and a symlink to a directory outside (a process, so it flips as fast as it
    can, in parallel with the searches); yields a function that stops it and tells how many
    flips it made."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOPSECRET\n")
    (outside / "only-outside.txt").write_text("TOPSECRET\n")
    (project / "d").mkdir()
    (project / "d" / "inside.txt").write_text("INSIDE\n")
    (project / "flip.txt").write_text("INSIDE\n")
    flipper = subprocess.Popen([sys.executable, "-c", FLIPPER, str(project), str(outside)],
                               stdout=subprocess.PIPE, text=True)

    def stop() -> int:
        (project.parent / "stop").touch()
        out, _ = flipper.communicate(timeout=60)
        return int(out)

    try:
        yield stop
    finally:
        (project.parent / "stop").touch()
        flipper.wait(60)


async def test_a_symlink_swapped_in_during_content_searches_is_never_read(
    perms: Permissions, project: Path, racing: Callable[[], int]
) -> None:
    tb = search_toolbox(perms, root=project)
    outside_reads = 0
    for _ in range(100):
        found = json.loads(await call(tb, "search_content", pattern="SECRET|INSIDE", directory="."))
        outside_reads += sum("TOPSECRET" in r["content"] for r in found)
    assert racing() > 10  # the flipper really ran during the searches
    assert outside_reads == 0


async def test_a_burst_of_searches_runs_at_most_max_searches_processes_at_once(
    tb: ToolBox, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from shelly_dist.tools.builtin import search as search_module

    running, most = 0, 0
    real = search_module.run_program

    async def counting(*args: object, **kwargs: object) -> object:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            return await real(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            running -= 1

    monkeypatch.setattr(search_module, "run_program", counting)
    found = await asyncio.gather(*(call(tb, "search_content", pattern="main", directory=".") for _ in range(12)))
    assert all("main.py" in f for f in found)
    assert most == 4  # MAX_SEARCHES: twelve at once before the cap
