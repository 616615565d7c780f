"""``exec_run``: run one program directly, never through a shell, if its name is trusted.

No shell means no globbing, pipes or ``;`` chaining to smuggle a second command past the trust
check: the trusted name is exactly the program that runs. Output is capped at 1 MB per stream;
a non-zero exit is an error result that still carries the output, so the model can read why.
The program sees PATH, HOME, LANG and ``permissions.exec_env`` only, in a process group that a
timeout kills whole (see :mod:`shelly_dist.tools.builtin._process`).

``git`` (and any ``git-*`` helper) is refused whatever the trust: ``git -c alias.x='!cmd' x``,
``-c core.fsmonitor=…`` or ``-c core.hooksPath=…`` run any command, so git runs only through the
git tools, which disable all of that (:mod:`shelly_dist.tools.builtin.git`).
"""

from __future__ import annotations

from pathlib import Path, PurePath

from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.tools.builtin._process import program_env, run_program
from shelly_dist.tools.permissions import Permissions
from shelly_dist.tools.tool import tool_from_model
from shelly_dist.tools.toolbox import ToolBox

DEFAULT_TIMEOUT = 120.0
GIT_REFUSED = "exec_run: git runs through the git tools (git_status, git_diff, git_log, git_commit), not exec_run"


class ExecInput(BaseModel):
    command: str = Field(description="Program to run (a name on PATH or a path); no shell is involved")
    args: list[str] = Field(default_factory=list, description="Arguments passed to the program as-is")


def exec_toolbox(perms: Permissions, *, root: Path, timeout: float = DEFAULT_TIMEOUT) -> ToolBox:
    """The ``exec`` toolbox; programs run in ``root`` and are killed after ``timeout`` seconds."""

    async def run(inp: ExecInput) -> str:
        if not inp.command.strip():
            raise ToolError("exec_run: command is required", tool="exec_run")
        program = PurePath(inp.command.strip()).name
        if program == "git" or program.startswith("git-"):
            raise ToolError(GIT_REFUSED, tool="exec_run")
        await perms.check_command("exec_run", inp.command, shown=" ".join([inp.command, *inp.args]))
        done = await run_program("exec_run", [inp.command, *inp.args], cwd=root, time_limit=timeout,
                                 env=program_env(perms.exec_env))
        if done.returncode != 0:
            raise ToolError(f"exec_run: exit status {done.returncode}\n{done.output()}", tool="exec_run")
        return done.output()

    return ToolBox(
        [
            tool_from_model(
                "exec_run",
                "Run a program directly (no shell) in the project directory and return its stdout and "
                "stderr. Pipes, redirects and globs are not interpreted.",
                ExecInput,
                run,
                group="exec",
            )
        ],
        name="exec",
    )
