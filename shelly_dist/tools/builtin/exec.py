"""``exec_run``: run one program directly, never through a shell, if its name is trusted.

No shell means no globbing, pipes or ``;`` chaining to smuggle a second command past the trust
check: the trusted name is exactly the program that runs. Output is capped at 1 MB per stream;
a non-zero exit is an error result that still carries the output, so the model can read why.
The program sees PATH, HOME, LANG and ``permissions.exec_env`` only, in a process group that a
timeout kills whole (see :mod:`shelly_dist.tools.builtin._process`).

``git`` (and any ``git-*`` helper) is refused whatever the trust: ``git -c alias.x='!cmd' x``,
``-c core.fsmonitor=…`` or ``-c core.hooksPath=…`` run any command, so git runs only through the
git tools, which disable all of that (:mod:`shelly_dist.tools.builtin.git`).

What a trusted program writes cannot be checked before it runs, but the control files can be
checked after (:mod:`~shelly_dist.tools.builtin._controlwatch`): a change to one (``.env``, a
prompt file, a module of ``python:``, the config or workflow file in use) is undone and the call
refused, headless; on a terminal it stays only on the person's "yes" to a question naming the
control file (:meth:`Permissions.check_control`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path, PurePath

from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.tools.builtin import _controlwatch
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
        watched, skipped = perms.control_watch()
        before = await asyncio.to_thread(_controlwatch.snapshot, watched, skipped)
        try:
            done = await run_program("exec_run", [inp.command, *inp.args], cwd=root, time_limit=timeout,
                                     env=program_env(perms.exec_env))
        finally:
            await undo_control_changes(perms, root, inp.command, before)
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


async def undo_control_changes(perms: Permissions, root: Path, command: str, before: _controlwatch.Snapshot) -> None:
    """Undo what the program changed among the control files, unless the person allows it (on a
    terminal, file by file; never for ``.shelly/``, off limits whatever anyone answers, as to the
    filesystem tools); raise naming what was refused, and what could not be put back."""
    await asyncio.to_thread(_controlwatch.drop_new_bytecode, before)
    changed = await asyncio.to_thread(_controlwatch.changed, before)
    refused: list[str] = []
    for path in changed:
        shown = _shown(path, root)
        if perms.protection(path):
            refused.append(path)
            continue
        try:
            await perms.check_control("exec_run", shown, path)
        except ToolError:
            refused.append(path)
    if not refused:
        return
    failed = [f for path in refused for f in await asyncio.to_thread(_controlwatch.restore, before, path)]
    names = ", ".join(f"{_shown(p, root)} ({(perms.protection(p) or perms.control_file(p)).removeprefix('is ')})"
                      for p in refused)
    undone = f"could not put back {', '.join(_shown(f, root) for f in failed)}" if failed else "the change was undone"
    raise ToolError(f"exec_run: refused: {command} changed {names}: shelly reads it to decide what to run or "
                    f"whom to trust, so tools may not change it; {undone}", tool="exec_run")


def _shown(path: str, root: Path) -> str:
    """``path`` relative to the project when inside it, as the model named it."""
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return path
