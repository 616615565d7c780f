"""The git toolbox against a real repository in tmp_path."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools import ToolBox
from shelly_dist.tools.builtin import git_toolbox
from shelly_dist.tools.permissions import Permissions
from tests.unit.tools.conftest import call


@pytest.fixture
def repo(project: Path) -> Path:
    env = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=project, check=True)
    (project / "a.txt").write_text("one\n")
    subprocess.run(["git", "add", "a.txt"], cwd=project, check=True)
    subprocess.run(["git", *env, "commit", "-q", "-m", "first"], cwd=project, check=True)
    subprocess.run(["git", "config", "user.name", "t"], cwd=project, check=True)
    subprocess.run(["git", "config", "user.email", "t@example.com"], cwd=project, check=True)
    return project


@pytest.fixture
def tb(repo: Path) -> ToolBox:
    return git_toolbox(Permissions(root=repo, trusted_commands=["git"]), root=repo)


async def test_git_is_refused_unless_trusted(repo: Path) -> None:
    with pytest.raises(ToolError, match=r"^git_status: permission denied for git$"):
        await call(git_toolbox(Permissions(root=repo), root=repo), "git_status")


async def test_status_short_shows_changes(tb: ToolBox, repo: Path) -> None:
    (repo / "b.txt").write_text("new")
    assert "?? b.txt" in await call(tb, "git_status", short=True)


async def test_diff_shows_unstaged_change_for_a_path(tb: ToolBox, repo: Path) -> None:
    (repo / "a.txt").write_text("two\n")
    out = await call(tb, "git_diff", path="a.txt")
    assert "-one\n+two" in out


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside", "sub/../../x"])
async def test_diff_rejects_absolute_and_dotdot_paths(tb: ToolBox, path: str) -> None:
    with pytest.raises(ToolError, match=r"^git_diff: path must be relative"):
        await call(tb, "git_diff", path=path)


async def test_log_with_builtin_format(tb: ToolBox) -> None:
    assert "first" in await call(tb, "git_log", count=1, format="oneline")


async def test_log_rejects_custom_format(tb: ToolBox) -> None:
    with pytest.raises(ToolError, match=r"^git_log: format must be one of"):
        await call(tb, "git_log", format="format:%H")


async def test_commit_files_records_a_commit(tb: ToolBox, repo: Path) -> None:
    (repo / "b.txt").write_text("b")
    await call(tb, "git_commit", message="add b", files=["b.txt"])
    done = await asyncio.to_thread(
        subprocess.run, ["git", "log", "--format=%s"], cwd=repo, capture_output=True, text=True
    )
    log = done.stdout
    assert log.splitlines()[0] == "add b"


async def test_commit_message_starting_with_dash_is_refused(tb: ToolBox) -> None:
    with pytest.raises(ToolError, match="must not start with '-'"):
        await call(tb, "git_commit", message="--amend", all=True)


async def test_commit_files_and_all_are_exclusive(tb: ToolBox) -> None:
    with pytest.raises(ToolError, match="mutually exclusive"):
        await call(tb, "git_commit", message="m", files=["a.txt"], all=True)


async def test_git_failure_carries_its_output(tb: ToolBox) -> None:
    with pytest.raises(ToolError, match=r"(?s)^git_commit: git commit failed.*nothing"):
        await call(tb, "git_commit", message="nothing to commit")


async def test_git_does_not_inherit_this_process_environment(tb: ToolBox, repo: Path, monkeypatch) -> None:
    """GIT_DIR set here would point git elsewhere; git gets the minimal environment, so it is not seen."""
    monkeypatch.setenv("GIT_DIR", str(repo / "no-such-repository"))
    assert "On branch main" in await call(tb, "git_status")


async def test_exec_env_passes_a_listed_variable_to_git(repo: Path, monkeypatch) -> None:
    monkeypatch.setenv("GIT_DIR", str(repo / "no-such-repository"))
    perms = Permissions(root=repo, trusted_commands=["git"], exec_env=["GIT_DIR"])
    with pytest.raises(ToolError, match="not a git repository"):
        await call(git_toolbox(perms, root=repo), "git_status")


# --- git runs no program a repository or a config names (DESIGN §3 rule 16) ---


def _planter(repo: Path, name: str) -> tuple[str, Path]:
    """An executable script that leaves a marker file when git runs it."""
    marker = repo.parent / f"{name}.ran"
    script = repo.parent / f"{name}.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n")
    script.chmod(0o755)
    return str(script), marker


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True)


async def test_hooks_planted_in_the_repository_do_not_run(tb: ToolBox, repo: Path) -> None:
    script, marker = _planter(repo, "hook")
    for hook in ("pre-commit", "commit-msg", "post-commit", "post-index-change"):
        (repo / ".git" / "hooks" / hook).symlink_to(script)
    (repo / "b.txt").write_text("b")
    await call(tb, "git_status")
    await call(tb, "git_commit", message="add b", files=["b.txt"])
    assert not marker.exists()


async def test_a_hooks_path_planted_in_the_config_does_not_run(tb: ToolBox, repo: Path) -> None:
    script, marker = _planter(repo, "hookspath")
    hooks = repo.parent / "hooks"
    hooks.mkdir()
    (hooks / "pre-commit").symlink_to(script)
    _git(repo, "config", "core.hooksPath", str(hooks))
    (repo / "a.txt").write_text("changed\n")
    await call(tb, "git_commit", message="change a", all=True)
    assert not marker.exists()


async def test_fsmonitor_planted_in_the_config_does_not_run(tb: ToolBox, repo: Path) -> None:
    script, marker = _planter(repo, "fsmonitor")
    _git(repo, "config", "core.fsmonitor", script)
    await call(tb, "git_status")
    await call(tb, "git_diff")
    assert not marker.exists()


async def test_filter_and_diff_drivers_planted_do_not_run(tb: ToolBox, repo: Path) -> None:
    script, marker = _planter(repo, "driver")
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n")
    _git(repo, "config", "filter.evil.clean", script)
    _git(repo, "config", "filter.evil.required", "true")
    _git(repo, "config", "diff.evil.textconv", script)
    _git(repo, "config", "diff.evil.command", script)
    _git(repo, "config", "diff.external", script)
    (repo / "a.txt").write_text("changed\n")
    assert "-one\n+changed" in await call(tb, "git_diff")
    await call(tb, "git_status")
    await call(tb, "git_commit", message="change a", all=True)
    assert not marker.exists()


async def test_signing_program_planted_does_not_run(tb: ToolBox, repo: Path) -> None:
    script, marker = _planter(repo, "gpg")
    _git(repo, "config", "commit.gpgSign", "true")
    _git(repo, "config", "gpg.program", script)
    _git(repo, "config", "log.showSignature", "true")
    (repo / "a.txt").write_text("changed\n")
    await call(tb, "git_commit", message="change a", all=True)
    await call(tb, "git_log", count=1)
    assert not marker.exists()


async def test_global_config_is_not_read_but_the_identity_is(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, marker = _planter(project, "global")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        f"[user]\n\tname = Global Person\n\temail = g@example.com\n[core]\n\tfsmonitor = {script}\n"
    )
    monkeypatch.setenv("HOME", str(home))
    _git(project, "init", "-q", "-b", "main")
    (project / "a.txt").write_text("one\n")
    tb = git_toolbox(Permissions(root=project, trusted_commands=["git"]), root=project)
    await call(tb, "git_status")
    await call(tb, "git_commit", message="first", files=["a.txt"])
    assert "Global Person <g@example.com>" in await call(tb, "git_log", count=1, format="full")
    assert not marker.exists()
