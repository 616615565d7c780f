"""The ``git`` toolbox: status, diff, log and commit in the project repository.

git runs without a shell in the project root and is trusted like any command, under the key
``git``. Inputs that git could read as options or paths outside the repository are refused
before git runs: paths must be relative without ``..``, a commit message must not start with
``-``, and the log format must be one of git's built-in pretty names (``format:`` strings could
otherwise embed arbitrary text). git gets the same minimal environment as ``exec_run`` (PATH,
HOME, LANG and ``permissions.exec_env``).

git is also a program runner: hooks, ``core.fsmonitor``, filter, textconv and external diff
drivers, ``gpg.program`` and pagers all name commands that ``status``, ``diff``, ``log`` or
``commit`` would execute. None of them runs here (DESIGN §3 rule 16): every call carries
:data:`HARDENING`, neither the system nor the global config is read (the user's identity is
carried over explicitly for commits), and every driver the repository's config declares is
blanked. Tools cannot write ``.git/`` either (:meth:`Permissions.check_real`); ``exec_run``
refuses ``git`` altogether.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.tools.builtin._process import program_env, run_program
from shelly_dist.tools.permissions import Permissions
from shelly_dist.tools.tool import tool_from_model
from shelly_dist.tools.toolbox import ToolBox

HARDENING = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "core.pager=cat",
    "-c", "diff.external=",
    "-c", "commit.gpgSign=false",
    "-c", "log.showSignature=false",
    "-c", "safe.bareRepository=explicit",
    "--no-pager",
)  # fmt: skip
"""Options before every git subcommand: no hook, monitor, pager, external diff or signing program
runs, and a bare repository planted in the work tree is not picked up."""

DRIVER_KEYS = r"^(filter|diff|merge)\..+\.(clean|smudge|process|textconv|command|driver|required)$"
"""Config keys by which ``.gitattributes`` makes git run a program; each one found is blanked."""

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0"}
"""No system or global config (a global ``core.fsmonitor`` would run too), never a prompt."""

PRETTY_FORMATS = frozenset({"oneline", "short", "medium", "full", "fuller", "reference", "email", "raw"})
DEFAULT_TIMEOUT = 60.0


class StatusInput(BaseModel):
    short: bool = Field(default=False, description="Short format (git status --short)")


class DiffInput(BaseModel):
    staged: bool = Field(default=False, description="Show staged changes (git diff --staged)")
    path: str = Field(default="", description="Limit the diff to this relative path")


class LogInput(BaseModel):
    count: int = Field(default=10, ge=1, le=1000, description="Number of commits to show")
    format: str = Field(default="", description="Built-in pretty format: oneline, short, medium, full, …")


class CommitInput(BaseModel):
    message: str = Field(description="Commit message")
    files: list[str] = Field(default_factory=list, description="Files to add and commit (relative paths)")
    all: bool = Field(default=False, description="Commit all tracked changes (git commit -a)")


def check_relative(tool: str, path: str) -> str:
    """Refuse absolute paths and ``..`` segments (Shelly's git path guard)."""
    p = PurePosixPath(path.replace("\\", "/"))
    if p.is_absolute() or path.startswith("~") or ".." in p.parts:
        raise ToolError(f"{tool}: path must be relative and inside the repository: {path}", tool=tool)
    return path


def git_toolbox(perms: Permissions, *, root: Path, timeout: float = DEFAULT_TIMEOUT) -> ToolBox:
    """The ``git`` toolbox (group ``git``), running in ``root``."""

    env = {**program_env(perms.exec_env), **GIT_ENV}

    async def quiet(tool: str, *args: str, user_config: bool = False) -> list[str]:
        """Lines of a read-only ``git config`` query (nothing on a non-zero exit)."""
        done = await run_program(tool, ["git", *HARDENING, *args], cwd=root, time_limit=timeout,
                                 env=program_env(perms.exec_env) if user_config else env)
        return done.stdout.splitlines() if done.returncode == 0 else []

    async def git(tool: str, *args: str, extra: tuple[str, ...] = ()) -> str:
        await perms.check_command(tool, "git", shown="git " + " ".join(args))
        found = await quiet(tool, "config", "--name-only", "--get-regexp", DRIVER_KEYS)
        blank = [arg for key in found for arg in ("-c", f"{key}=")]
        argv = ["git", *HARDENING, *blank, *extra, *args]
        done = await run_program(tool, argv, cwd=root, time_limit=timeout, env=env)
        if done.returncode != 0:
            raise ToolError(f"{tool}: git {args[0]} failed (exit {done.returncode})\n{done.output()}", tool=tool)
        return done.output()

    async def identity(tool: str) -> tuple[str, ...]:
        """The committer identity git would use with the user's full config, as ``-c`` options
        (the global config is otherwise not read)."""
        out: list[str] = []
        for key in ("user.name", "user.email"):
            for value in (await quiet(tool, "config", "--get", key, user_config=True))[:1]:
                out += ["-c", f"{key}={value}"]
        return tuple(out)

    async def status(inp: StatusInput) -> str:
        return await git("git_status", "status", *(["--short"] if inp.short else []))

    async def diff(inp: DiffInput) -> str:
        args = ["diff", "--no-ext-diff", "--no-textconv", *(["--staged"] if inp.staged else [])]
        if inp.path:
            args += ["--", check_relative("git_diff", inp.path)]
        return await git("git_diff", *args)

    async def log(inp: LogInput) -> str:
        args = ["log", "--no-ext-diff", "--no-textconv", f"-n{inp.count}"]
        if inp.format:
            if inp.format not in PRETTY_FORMATS:
                raise ToolError(f"git_log: format must be one of {', '.join(sorted(PRETTY_FORMATS))}", tool="git_log")
            args.append(f"--format={inp.format}")
        return await git("git_log", *args)

    async def commit(inp: CommitInput) -> str:
        if not inp.message.strip():
            raise ToolError("git_commit: message is required", tool="git_commit")
        if inp.message.startswith("-"):
            raise ToolError("git_commit: message must not start with '-'", tool="git_commit")
        if inp.files and inp.all:
            raise ToolError("git_commit: files and all are mutually exclusive", tool="git_commit")
        files = [check_relative("git_commit", f) for f in inp.files]
        if files:
            await git("git_commit", "add", "--", *files)
        who = await identity("git_commit")
        return await git("git_commit", "commit", *(["-a"] if inp.all else []), "-m", inp.message, extra=who)

    return ToolBox(
        [
            tool_from_model("git_status", "Show the working tree status.", StatusInput, status, group="git"),
            tool_from_model("git_diff", "Show unstaged (or staged) changes.", DiffInput, diff, group="git"),
            tool_from_model("git_log", "Show recent commits.", LogInput, log, group="git"),
            tool_from_model(
                "git_commit",
                "Commit staged changes, the given files, or all tracked changes (all).",
                CommitInput,
                commit,
                group="git",
            ),
        ],
        name="git",
    )
