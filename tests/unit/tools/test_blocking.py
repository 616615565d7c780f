"""Tools' blocking file work: its own threads, a deadline, and the default executor left free."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools import blocking
from shelly_dist.tools.blocking import run_blocking
from shelly_dist.tools.builtin import filesystem_toolbox
from shelly_dist.tools.permissions import Permissions
from tests.integration.cluster import wait_until
from tests.unit.tools.conftest import call, longest_loop_stall


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
    fs = filesystem_toolbox(perms)
    reads = asyncio.gather(*(call(fs, "fs_read", path="pipe") for _ in range(20)), return_exceptions=True)
    await asyncio.sleep(0.2)  # let every read reach its open()
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
