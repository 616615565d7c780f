"""LoopDetector: warnings after warn_after identical calls, a stop past stop_after."""

from __future__ import annotations

import pytest

from shelly_dist.chats import ToolCall, ToolResult
from shelly_dist.errors import LoopDetected, UsageError
from shelly_dist.identity import acting_as
from shelly_dist.tools.hooks import ToolHook
from shelly_dist.tools.loopdetect import LoopDetector


async def run_call(det: LoopDetector, n: int, arguments: str = '{"path":"a"}', name: str = "fs_read") -> ToolResult:
    call = ToolCall(id=f"c{n}", name=name, arguments=arguments)
    assert await det.before_tool(call) is None
    return await det.after_tool(call, ToolResult(tool_call_id=call.id, content="data"))


def test_detector_is_a_tool_hook() -> None:
    assert isinstance(LoopDetector(), ToolHook)


async def test_calls_below_warn_after_are_untouched() -> None:
    det = LoopDetector(warn_after=3, stop_after=5)
    assert [(await run_call(det, i)).content for i in range(2)] == ["data", "data"]


async def test_warning_is_appended_from_warn_after_on() -> None:
    det = LoopDetector(warn_after=2, stop_after=5)
    await run_call(det, 0)
    result = await run_call(det, 1)
    assert result.content.startswith("data\n\n[warning: you have called fs_read 2 times with the same arguments")


async def test_argument_order_and_spacing_do_not_matter() -> None:
    det = LoopDetector(warn_after=2, stop_after=5)
    await run_call(det, 0, '{"a":1,"b":2}')
    assert "warning" in (await run_call(det, 1, '{ "b": 2, "a": 1 }')).content


async def test_different_arguments_are_counted_apart() -> None:
    det = LoopDetector(warn_after=2, stop_after=5)
    await run_call(det, 0, '{"path":"a"}')
    assert (await run_call(det, 1, '{"path":"b"}')).content == "data"


async def test_call_past_stop_after_stops_the_run_naming_tool_and_count() -> None:
    det = LoopDetector(warn_after=1, stop_after=2)
    await run_call(det, 0)
    await run_call(det, 1)
    with acting_as("coder"), pytest.raises(LoopDetected, match="fs_read called 3 times") as info:
        await run_call(det, 2)
    assert info.value.agent == "coder"


def test_thresholds_are_validated() -> None:
    with pytest.raises(UsageError):
        LoopDetector(warn_after=5, stop_after=2)
