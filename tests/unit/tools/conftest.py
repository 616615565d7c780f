"""Helpers for the built-in tool tests: call a tool by name, build permissions on tmp_path, watch
the event loop while a call runs."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from shelly_dist.tools import ToolBox
from shelly_dist.tools.permissions import Permissions


async def call(tb: ToolBox, tool_name: str, /, **args: Any) -> str:
    tool = tb.get(tool_name)
    assert tool is not None, f"{tool_name} not in {tb.names()}"
    return await tool.handler(json.dumps(args))


async def longest_loop_stall(work: Awaitable[Any]) -> tuple[Any, float]:
    """Await ``work`` while a coroutine and a thread (as the worker's lease renewer is) each tick
    every 10 ms; return (its result or the exception it raised, the longest gap in seconds
    between two ticks of either). A gap of seconds means something ran on the event loop, or
    held the GIL, that long."""
    gaps = [0.0]
    done = asyncio.Event()
    stop = threading.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    def tick_thread() -> None:
        last = time.monotonic()
        while not stop.wait(0.01):
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    thread = threading.Thread(target=tick_thread, daemon=True)
    thread.start()
    try:
        outcome: Any = await work
    except Exception as exc:
        outcome = exc
    finally:
        done.set()
        stop.set()
        await ticker
        thread.join()
    return outcome, max(gaps)


class ScriptedApprover:
    """Answers prompts from a list (then "no"), recording every question."""

    interactive = True

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.questions: list[str] = []

    async def ask(self, question: str, options: Any) -> str:
        self.questions.append(question)
        return self.answers.pop(0) if self.answers else "no"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


@pytest.fixture
def perms(project: Path) -> Permissions:
    return Permissions(root=project)
