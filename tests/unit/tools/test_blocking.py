"""Tools' blocking file work: its own threads, a deadline, and the default executor left free."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools import blocking
from shelly_dist.tools.blocking import run_blocking
from shelly_dist.tools.builtin import filesystem_toolbox
from shelly_dist.tools.permissions import Permissions
from tests.integration.cluster import wait_until
from tests.unit.tools.conftest import call, longest_loop_stall

T = TypeVar("T")


def release_readers(fifo: Path) -> bool:
    """Open and close ``fifo`` for writing, which lets every reader blocked in ``open()`` go on
    (to read an end of file); True once no reader is waiting any more."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # nobody has it open for reading
            return True
        raise
    return False


class CountingPool(blocking._Pool):
    """The tool I/O pool, counting the jobs handed to it."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.submitted = 0

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        self.submitted += 1  # only the event loop's thread submits
        return super().submit(fn)


async def async_wait_until(condition: Callable[[], bool], within: float, what: str) -> None:
    """Yield to the event loop until ``condition`` holds, failing after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {within}s waiting for {what}"
        await asyncio.sleep(0.01)


@pytest.fixture
def fifo(project: Path) -> Iterator[Path]:
    path = project / "pipe"
    os.mkfifo(path)
    yield path
    wait_until(lambda: release_readers(path), 10, "the threads blocked on the FIFO to be released")


async def test_fs_reads_of_a_fifo_leave_the_default_executor_free(
    perms: Permissions, fifo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blocking, "IO_TIMEOUT", 1.0)
    pool = CountingPool(blocking.THREADS)
    monkeypatch.setattr(blocking, "_pool", pool)
    fs = filesystem_toolbox(perms)
    reads = asyncio.gather(*(call(fs, "fs_read", path="pipe") for _ in range(20)), return_exceptions=True)
    # Every read past its path checks and handed to the tool threads: only then does the default
    # executor's answer below say something (a fixed 0.2 s could end before the reads started).
    await async_wait_until(lambda: pool.submitted == 20, 30, "every read handed to the tool I/O threads")
    free, stall = await longest_loop_stall(asyncio.wait_for(asyncio.to_thread(lambda: "free"), 2))
    assert free == "free" and stall < 0.5
    outcomes = await reads
    assert all(isinstance(o, ToolError) and str(o).startswith("fs_read: ") for o in outcomes)


async def test_a_call_past_its_deadline_is_an_error_naming_the_tool() -> None:
    release = threading.Event()
    try:
        with pytest.raises(ToolError, match=r"^fs_read: the file operation did not finish within 0\.2s"):
            await run_blocking("fs_read", release.wait, time_limit=0.2)
    finally:
        release.set()


async def test_an_exception_in_the_thread_reaches_the_caller() -> None:
    with pytest.raises(FileNotFoundError):
        await run_blocking("fs_read", Path("/nonexistent/shelly/file").read_text)
