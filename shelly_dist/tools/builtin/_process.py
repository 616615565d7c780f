"""Running a program without a shell, with capped output, a deadline, and a minimal environment
(exec and git share it).

Each stream is read to its end but only the first ``cap`` bytes are kept, so a chatty program
neither fills memory nor blocks on a full pipe.

Two rules keep a program the model asked for from reaching what the worker holds:

- it sees only PATH, HOME, LANG and the names listed in ``permissions.exec_env``
  (:func:`program_env`), never the worker's provider keys or its Redis password;
- it runs under a launcher (:mod:`~shelly_dist.tools.builtin._reaper`) that is a child subreaper:
  when the program exits, or at a timeout or a cancelled call, the launcher kills every process
  the program started, even one that left the group with ``setsid``, so ``sh -c 'setsid sleep
  1000 &'`` leaves nothing behind and the call ends when the program does
  (``test_a_background_child_in_a_new_session_dies_with_the_call``,
  ``test_timeout_kills_the_grandchildren_too``), and so does a worker's death, even by SIGKILL
  (``test_the_tree_dies_with_the_process_that_started_the_launcher``). The launcher runs in a
  session of its own, and its group is killed as well should it not answer within
  :data:`REAP_GRACE`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from shelly_dist.errors import ToolError

OUTPUT_CAP = 1 << 20
"""1 MB per stream, as Shelly's ``limitedBuffer``."""

REAP_GRACE = 2.0
"""Seconds the launcher has to kill the program's tree before its group is SIGKILLed."""

LAUNCHER = Path(__file__).with_name("_reaper.py")

BASE_ENV = ("PATH", "HOME", "LANG")
"""What every program gets from this process's environment, whatever the config lists."""


def program_env(passthrough: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a program a tool starts: :data:`BASE_ENV` plus ``passthrough`` names,
    each only when set here; PATH falls back to ``os.defpath``."""
    environ = os.environ if environ is None else environ
    env = {name: environ[name] for name in (*BASE_ENV, *passthrough) if name in environ}
    env.setdefault("PATH", os.defpath)
    return env


class ProgramTimedOut(ToolError):
    """The program ran past its time limit and was killed (so a caller can say why it was slow)."""


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str

    def output(self) -> str:
        """stdout then stderr, as the model sees them."""
        if self.stdout and self.stderr:
            return self.stdout + ("" if self.stdout.endswith("\n") else "\n") + self.stderr
        return self.stdout or self.stderr


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> str:
    kept = bytearray()
    dropped = 0
    while chunk := await stream.read(65536):
        room = cap - len(kept)
        kept += chunk[:room]
        dropped += max(0, len(chunk) - room)
    text = kept.decode("utf-8", errors="replace")
    if dropped:
        text += f"\n[output truncated: {dropped} more bytes beyond {cap // 1024} KB]"
    return text


def _kill_group(pgid: int) -> None:
    """SIGKILL every process of the group (the program and whatever it started)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # the group is already empty
        pass


def _resolve(tool: str, program: str, *, cwd: Path, env: Mapping[str, str]) -> str:
    """The file the launcher will execute: ``program`` looked up on ``env``'s PATH, or taken
    relative to ``cwd`` when it names a path; a missing one is ``command not found``."""
    if os.sep in program:  # the launcher runs in cwd: the path stays as given (a script's $0)
        if not os.path.isfile(cwd / program):
            raise ToolError(f"{tool}: command not found: {program}", tool=tool)
        if not os.access(cwd / program, os.X_OK):
            raise ToolError(f"{tool}: cannot start {program}: permission denied", tool=tool)
        return program
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise ToolError(f"{tool}: command not found: {program}", tool=tool)
    return str(cwd / found)


async def _end_tree(proc: asyncio.subprocess.Process) -> None:
    """Ask the launcher to kill the program's tree (SIGTERM), then SIGKILL its group anyway."""
    try:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), REAP_GRACE)
    except (ProcessLookupError, TimeoutError):
        pass
    finally:
        _kill_group(proc.pid)
        if proc.returncode is None:
            await proc.wait()


async def _feed(stream: asyncio.StreamWriter | None, data: bytes | None) -> None:
    """Write ``data`` to the program's stdin and close it; a program that exits early is no error."""
    if stream is None or data is None:
        return
    try:
        stream.write(data)
        await stream.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        stream.close()


async def run_program(
    tool: str,
    argv: list[str],
    *,
    cwd: Path,
    time_limit: float,
    env: Mapping[str, str],
    cap: int = OUTPUT_CAP,
    stdin: bytes | None = None,
    reaped: bool = True,
) -> Completed:
    """Run ``argv`` (no shell) in ``cwd`` with exactly ``env`` (see :func:`program_env`), feeding
    it ``stdin`` if given (else /dev/null).

    ``reaped=False`` skips the launcher, for the package's own programs (the searches, diffs),
    which start no others: one interpreter start less per call (30-70 ms); the group kill at a
    timeout still applies.

    Raises ``ToolError`` if it cannot start or times out; when it exits, times out or the call is
    cancelled, every process it started is killed before this returns.
    """
    path = _resolve(tool, argv[0], cwd=cwd, env=env)
    if reaped:
        launch = [sys.executable, "-I", "-S", str(LAUNCHER), str(os.getpid()), path, *argv]
    else:
        launch = [path, *argv[1:]]
    try:
        proc = await asyncio.create_subprocess_exec(
            *launch,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise ToolError(f"{tool}: command not found: {argv[0]}", tool=tool) from exc
    except OSError as exc:
        raise ToolError(f"{tool}: cannot start {argv[0]}: {exc}", tool=tool) from exc
    assert proc.stdout is not None and proc.stderr is not None
    reading = asyncio.gather(
        _read_capped(proc.stdout, cap), _read_capped(proc.stderr, cap), proc.wait(), _feed(proc.stdin, stdin)
    )
    finished = False
    try:
        stdout, stderr, rc, _ = await asyncio.wait_for(reading, time_limit)
        finished = True
    except TimeoutError as exc:
        raise ProgramTimedOut(f"{tool}: {argv[0]} timed out after {time_limit:g}s", tool=tool) from exc
    finally:
        if not finished:
            await _end_tree(proc)
    return Completed(rc, stdout, stderr)
