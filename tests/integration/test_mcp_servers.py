"""The MCP client against third-party servers from PyPI (``mcp-server-time``, ``mcp-server-git``).

Both are in the ``test`` extra (they require ``mcp>=2.3,<3``, the same SDK as ours, so they share
the virtualenv) and run over stdio as their console scripts, the way a user's config names them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools.mcp import MCPClient, MCPServerSpec

pytestmark = pytest.mark.filterwarnings("error")


def console_script(name: str) -> str:
    """The installed server command; fails (never skips) with the line that installs it: the test
    extra requires these servers."""
    path = Path(sys.executable).with_name(name)
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]' (or pip install {name})")
    return found


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A repository with one commit and one untracked file."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (repo / "README.md").write_text("hello\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first commit"], check=True)
    (repo / "new.txt").write_text("untracked\n")
    return repo


@pytest.fixture
def time_spec() -> MCPServerSpec:
    return MCPServerSpec(name="time", command=console_script("mcp-server-time"))


@pytest.fixture
def git_spec(git_repo: Path) -> MCPServerSpec:
    """``mcp-server-git`` confined to ``git_repo``."""
    return MCPServerSpec(name="git", command=console_script("mcp-server-git"), args=["-r", str(git_repo)])


async def test_time_server_tools_become_a_toolbox_named_after_it(time_spec: MCPServerSpec) -> None:
    async with MCPClient(time_spec) as client:
        box = await client.toolbox()
    assert box.name == "time"
    assert {"get_current_time", "convert_time"} <= set(box.names())


async def test_time_server_answers_a_call(time_spec: MCPServerSpec) -> None:
    async with MCPClient(time_spec) as client:
        out = await (await client.toolbox()).get("get_current_time").handler('{"timezone": "UTC"}')
    assert json.loads(out)["timezone"] == "UTC"


async def test_time_server_error_is_shelly_tool_error(time_spec: MCPServerSpec) -> None:
    async with MCPClient(time_spec) as client:
        with pytest.raises(ToolError, match=r"^mcpclient: tool error: .*Nowhere/Special"):
            await client.call_tool("get_current_time", {"timezone": "Nowhere/Special"})


async def test_git_server_reports_status_of_a_repository(git_spec: MCPServerSpec, git_repo: Path) -> None:
    async with MCPClient(git_spec) as client:
        out = await client.call_tool("git_status", {"repo_path": str(git_repo)})
    assert out.startswith("Repository status:")
    assert "new.txt" in out


async def test_git_server_log_shows_the_commit(git_spec: MCPServerSpec, git_repo: Path) -> None:
    async with MCPClient(git_spec) as client:
        out = await (await client.toolbox()).get("git_log").handler(json.dumps({"repo_path": str(git_repo)}))
    assert "first commit" in out


async def test_git_server_refuses_a_path_outside_its_repository(git_spec: MCPServerSpec, tmp_path: Path) -> None:
    async with MCPClient(git_spec) as client:
        with pytest.raises(ToolError, match=r"^mcpclient: tool error: .*outside the allowed repository"):
            await client.call_tool("git_status", {"repo_path": str(tmp_path)})
