"""exec_run: trust gate, no shell, capped output, exit status, timeout, minimal environment."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools.builtin import exec_toolbox
from shelly_dist.tools.permissions import Permissions
from tests.integration.cluster import wait_until
from tests.unit.tools.conftest import ScriptedApprover, call

PY = sys.executable
PRINT_ENV = ["-c", "import json, os; print(json.dumps(dict(os.environ)))"]


def trusting(project: Path, *commands: str) -> Permissions:
    return Permissions(root=project, trusted_commands=commands)


async def test_untrusted_command_is_refused(perms: Permissions, project: Path) -> None:
    tb = exec_toolbox(perms, root=project)
    with pytest.raises(ToolError, match=r"^exec_run: permission denied for echo$"):
        await call(tb, "exec_run", command="echo", args=["hi"])


async def test_trusted_command_runs_in_project_root(project: Path) -> None:
    tb = exec_toolbox(trusting(project, PY), root=project)
    out = await call(tb, "exec_run", command=PY, args=["-c", "import os; print(os.getcwd())"])
    assert out.strip() == str(project)


async def test_arguments_are_not_interpreted_by_a_shell(project: Path) -> None:
    tb = exec_toolbox(trusting(project, PY), root=project)
    out = await call(tb, "exec_run", command=PY, args=["-c", "import sys; print(sys.argv[1:])", "$HOME; rm *"])
    assert out.strip() == "['$HOME; rm *']"


async def test_nonzero_exit_is_an_error_carrying_the_output(project: Path) -> None:
    tb = exec_toolbox(trusting(project, PY), root=project)
    script = "import sys; print('out'); print('bad', file=sys.stderr); sys.exit(3)"
    with pytest.raises(ToolError, match=r"(?s)^exec_run: exit status 3\nout\nbad"):
        await call(tb, "exec_run", command=PY, args=["-c", script])


async def test_each_stream_is_capped_at_one_megabyte(project: Path) -> None:
    tb = exec_toolbox(trusting(project, PY), root=project)
    out = await call(tb, "exec_run", command=PY, args=["-c", "print('x' * 3_000_000)"])
    assert out.startswith("x" * 1000)
    assert out.count("x") == 1 << 20
    assert "[output truncated" in out


async def test_timeout_kills_the_program(project: Path) -> None:
    tb = exec_toolbox(trusting(project, PY), root=project, timeout=0.5)
    with pytest.raises(ToolError, match="timed out"):
        await call(tb, "exec_run", command=PY, args=["-c", "import time; time.sleep(30)"])


async def test_missing_program_is_reported(project: Path) -> None:
    tb = exec_toolbox(trusting(project, "no-such-program-xyz"), root=project)
    with pytest.raises(ToolError, match="command not found: no-such-program-xyz"):
        await call(tb, "exec_run", command="no-such-program-xyz")


async def test_interactive_yes_allows_one_call_only(project: Path) -> None:
    approver = ScriptedApprover("yes", "no")
    tb = exec_toolbox(Permissions(root=project, approver=approver), root=project)
    await call(tb, "exec_run", command=PY, args=["-c", "pass"])
    with pytest.raises(ToolError, match="permission denied"):
        await call(tb, "exec_run", command=PY, args=["-c", "pass"])
    assert len(approver.questions) == 2


def gone(pid: int) -> bool:
    """No such process, or only its zombie (killed, waiting for init to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def run_leaving_a_sleep(project: Path, time_limit: float, script: str) -> int:
    """Run ``sh -c script`` (which writes a background sleep's pid to $PIDFILE); the sleep's pid."""
    pidfile = project / "background.pid"
    tb = exec_toolbox(trusting(project, "sh"), root=project, timeout=time_limit)
    await call(tb, "exec_run", command="sh", args=["-c", script.replace("$PIDFILE", str(pidfile))])
    return int(pidfile.read_text())


@pytest.mark.parametrize("script", ["sleep 1000 & echo $! > $PIDFILE; wait",
                                    "setsid sleep 1000 & echo $! > $PIDFILE; sleep 1000"])
async def test_timeout_kills_the_grandchildren_too(project: Path, script: str) -> None:
    with pytest.raises(ToolError, match="timed out"):
        await run_leaving_a_sleep(project, 2, script)
    background = int((project / "background.pid").read_text())
    wait_until(lambda: gone(background), 30, f"grandchild sleep {background} to be killed")


async def test_a_background_child_in_a_new_session_dies_with_the_call(project: Path) -> None:
    started = time.monotonic()
    escaped = await run_leaving_a_sleep(project, 60, "setsid sleep 1000 > /dev/null 2>&1 & echo $! > $PIDFILE")
    assert time.monotonic() - started < 10
    wait_until(lambda: gone(escaped), 10, f"setsid sleep {escaped} to be killed")


async def test_a_relative_program_path_runs_from_the_project(project: Path) -> None:
    script = project / "hello.sh"
    script.write_text("#!/bin/sh\necho hello from $0\n")
    script.chmod(0o755)
    out = await call(exec_toolbox(trusting(project, "./hello.sh"), root=project), "exec_run", command="./hello.sh")
    assert out == "hello from ./hello.sh\n"


async def test_program_sees_neither_secrets_nor_unlisted_variables(project: Path, monkeypatch) -> None:
    monkeypatch.setenv("SHELLY_TEST_SECRET", "hunter2")
    tb = exec_toolbox(trusting(project, PY), root=project)
    env = json.loads(await call(tb, "exec_run", command=PY, args=PRINT_ENV))
    assert "SHELLY_TEST_SECRET" not in env and "hunter2" not in env.values()
    assert env["PATH"] == os.environ["PATH"]


async def test_exec_env_lists_what_the_program_may_see(project: Path, monkeypatch) -> None:
    monkeypatch.setenv("SHELLY_TEST_SECRET", "hunter2")
    monkeypatch.setenv("SHELLY_TEST_LISTED", "visible")
    perms = Permissions(root=project, trusted_commands=[PY], exec_env=["SHELLY_TEST_LISTED"])
    env = json.loads(await call(exec_toolbox(perms, root=project), "exec_run", command=PY, args=PRINT_ENV))
    assert env["SHELLY_TEST_LISTED"] == "visible"
    assert "SHELLY_TEST_SECRET" not in env


@pytest.mark.parametrize("command", ["git", "/usr/bin/git", "git-upload-pack"])
async def test_git_is_refused_even_when_trusted(project: Path, command: str) -> None:
    tb = exec_toolbox(trusting(project, command), root=project)
    marker = project / "pwned"
    with pytest.raises(ToolError, match=r"^exec_run: git runs through the git tools \(git_status, git_diff"):
        await call(tb, "exec_run", command=command, args=["-c", f"alias.x=!touch {marker}", "x"])
    assert not marker.exists()
