"""The heartbeat probe of ``shelly worker``: beats only while the worker's event loop answers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from shelly_dist.cli.worker import loop_answers


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_running_loop_answers(loop: asyncio.AbstractEventLoop):
    assert loop_answers(loop, timeout=10)


def test_blocked_loop_does_not_answer(loop: asyncio.AbstractEventLoop):
    release = threading.Event()
    loop.call_soon_threadsafe(release.wait)  # a step doing blocking work on the loop
    try:
        assert not loop_answers(loop, timeout=0.2)
    finally:
        release.set()


def test_loop_that_is_not_running_does_not_answer():
    loop = asyncio.new_event_loop()
    try:
        assert not loop_answers(loop, timeout=10)
    finally:
        loop.close()
    assert not loop_answers(loop, timeout=10)
