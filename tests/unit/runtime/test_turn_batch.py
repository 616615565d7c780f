"""``TurnBatch``: the calls of one event-loop turn reach one handler call, each gets its own
result, and a handler's failure reaches every call of its batch."""

from __future__ import annotations

import asyncio

import pytest

from shelly_dist.runtime.celery.journal.turn_batch import TurnBatch


async def test_calls_of_one_turn_reach_one_handler_call_and_each_gets_its_result():
    batches: list[list[int]] = []

    async def double(items: list[int]) -> list[int]:
        batches.append(items)
        return [i * 2 for i in items]

    batch = TurnBatch(double)
    assert await asyncio.gather(*(batch(i) for i in range(4))) == [0, 2, 4, 6]
    assert await batch(9) == 18
    assert batches == [[0, 1, 2, 3], [9]]


async def test_a_failing_handler_fails_every_call_of_its_batch():
    async def refuse(items: list[int]) -> list[int]:
        raise OSError("refused")

    batch = TurnBatch(refuse)
    results = await asyncio.gather(batch(1), batch(2), return_exceptions=True)
    assert [str(r) for r in results] == ["refused", "refused"]
    with pytest.raises(OSError, match="refused"):
        await batch(3)
