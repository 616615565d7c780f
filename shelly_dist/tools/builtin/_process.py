"""Running a program without a shell, with capped output and a deadline (exec and git share it).

Each stream is read to its end but only the first ``cap`` bytes are kept, so a chatty program
neither fills memory nor blocks on a full pipe; a timeout kills the process and reaps it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from shelly_dist.errors import ToolError

OUTPUT_CAP = 1 << 20
"""1 MB per stream, as Shelly's ``limitedBuffer``."""


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


async def run_program(tool: str, argv: list[str], *, cwd: Path, time_limit: float, cap: int = OUTPUT_CAP) -> Completed:
    """Run ``argv`` (no shell) in ``cwd``; raises ``ToolError`` if it cannot start or times out."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError as exc:
        raise ToolError(f"{tool}: command not found: {argv[0]}", tool=tool) from exc
    except OSError as exc:
        raise ToolError(f"{tool}: cannot start {argv[0]}: {exc}", tool=tool) from exc
    assert proc.stdout is not None and proc.stderr is not None
    reading = asyncio.gather(_read_capped(proc.stdout, cap), _read_capped(proc.stderr, cap), proc.wait())
    try:
        stdout, stderr, rc = await asyncio.wait_for(reading, time_limit)
    except TimeoutError as exc:
        raise ToolError(f"{tool}: {argv[0]} timed out after {time_limit:g}s", tool=tool) from exc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return Completed(rc, stdout, stderr)
