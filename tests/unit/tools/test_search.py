"""search_content and search_files: results, globs, binaries and the directory guard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools import ToolBox
from shelly_dist.tools.builtin import search_toolbox
from shelly_dist.tools.builtin.search import glob_regex
from shelly_dist.tools.permissions import Permissions
from tests.unit.tools.conftest import call


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
