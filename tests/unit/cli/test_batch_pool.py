"""A pool batch item by the state of the run already recorded under its id (the idempotency key)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import redis.exceptions

from shelly_dist.chats import Message, Role
from shelly_dist.cli.batch_pool import PoolItems, item_run_id
from shelly_dist.errors import RunError
from shelly_dist.runtime.celery.journal import RunRecord

BATCH = "b1"
FIRST = item_run_id(BATCH, "item")


class FakePool:
    """Records by run id; ``submit`` records a queued run that ``wait`` then ends as done."""

    def __init__(self, records: dict[str, dict[str, str]] | None = None) -> None:
        self.records = records or {}
        self.submitted: list[str] = []
        self.canceled: list[str] = []

    async def submit(self, agent: str, task: list[Message], *, session: str, run_id: str | None = None,
                     batch: str = "") -> str:
        assert run_id is not None
        self.submitted.append(run_id)
        self.records.setdefault(run_id, {"status": "queued"})
        return run_id

    async def record(self, run_id: str) -> RunRecord | None:
        raw = self.records.get(run_id)
        return None if raw is None else RunRecord.parse({"id": run_id, **raw})

    async def wait(self, run_id: str) -> RunRecord:
        record = self.records[run_id]
        if record["status"] in ("queued", "running"):
            record.update(status="done", reply=f"reply of {run_id}")
        return RunRecord.parse({"id": run_id, **record})

    async def cancel(self, run_id: str) -> list[str]:
        self.canceled.append(run_id)
        return [run_id]


async def run(pool: FakePool) -> dict[str, str]:
    return await PoolItems(pool, BATCH).run("a", "item", [Message.text("user", Role.USER, "task")])


def test_the_run_id_depends_on_the_batch_the_item_and_the_attempt() -> None:
    assert item_run_id(BATCH, "item") == FIRST
    assert len({FIRST, item_run_id("b2", "item"), item_run_id(BATCH, "other"), item_run_id(BATCH, "item", 2)}) == 4


async def test_an_item_without_a_run_is_submitted_under_its_id() -> None:
    pool = FakePool()
    assert (await run(pool))["run"] == FIRST and pool.submitted == [FIRST]


async def test_a_still_queued_run_is_sent_again_and_awaited() -> None:
    pool = FakePool({FIRST: {"status": "queued"}})
    assert (await run(pool))["status"] == "completed" and pool.submitted == [FIRST]


async def test_a_running_run_is_awaited_not_submitted() -> None:
    pool = FakePool({FIRST: {"status": "running"}})
    assert (await run(pool))["reply"] == f"reply of {FIRST}" and pool.submitted == []


async def test_a_finished_run_is_the_result_without_running_again() -> None:
    pool = FakePool({FIRST: {"status": "done", "reply": "old answer"}})
    assert (await run(pool))["reply"] == "old answer" and pool.submitted == []


async def test_a_failed_run_is_the_items_error_without_running_again() -> None:
    pool = FakePool({FIRST: {"status": "failed", "error": "model refused"}})
    with pytest.raises(RunError, match="model refused"):
        await run(pool)
    assert pool.submitted == []


async def test_a_canceled_run_is_followed_by_the_next_attempt() -> None:
    second = item_run_id(BATCH, "item", 2)
    pool = FakePool({FIRST: {"status": "canceled"}})
    assert (await run(pool))["run"] == second and pool.submitted == [second]


async def test_cancel_all_cancels_only_the_runs_still_awaited() -> None:
    pool = FakePool({FIRST: {"status": "done", "reply": "x"}})
    items = PoolItems(pool, BATCH)
    await items.run("a", "item", [Message.text("user", Role.USER, "task")])
    items.waiting.add("still-running")
    await items.cancel_all()
    assert pool.canceled == ["still-running"]


async def test_cancel_all_cancels_the_runs_not_started_before_the_started_ones() -> None:
    # a started run's cancel frees a worker slot: a queued run not yet cancelled would start in it
    pool = FakePool({"a-running": {"status": "running"}, "b-queued": {"status": "queued"},
                     "c-waiting": {"status": "waiting"}, "d-queued": {"status": "queued"}})
    items = PoolItems(pool, BATCH)
    items.waiting.update(pool.records)
    await items.cancel_all()
    assert sorted(pool.canceled[:2]) == ["b-queued", "d-queued"]
    assert sorted(pool.canceled[2:]) == ["a-running", "c-waiting"]


class SwallowingPool(FakePool):
    """A record read that answers although its task was cancelled meanwhile (a Ctrl-C landing as
    redis-py's ``wait_for`` ends on Python 3.11)."""

    async def record(self, run_id: str) -> RunRecord | None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.get_running_loop().create_future()  # the cancel lands here, and is caught
        return await super().record(run_id)


async def test_a_ctrl_c_swallowed_by_the_record_read_submits_nothing() -> None:
    pool = SwallowingPool()
    with pytest.raises(asyncio.CancelledError):
        await run(pool)
    assert pool.submitted == []


class SlowSubmitPool(FakePool):
    """A submit that records its run only when ``release`` is set (a create then a send)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def submit(self, agent: str, task: list[Message], *, session: str, run_id: str | None = None,
                     batch: str = "") -> str:
        self.entered.set()
        await self.release.wait()
        return await super().submit(agent, task, session=session, run_id=run_id)

    async def cancel(self, run_id: str) -> list[str]:
        if run_id not in self.records:
            raise RunError(f"cancel: no run {run_id}")  # as the runtime: a run never recorded
        return await super().cancel(run_id)


async def test_a_submit_cut_by_ctrl_c_is_finished_then_cancelled() -> None:
    pool = SlowSubmitPool()
    items = PoolItems(pool, BATCH)
    task = asyncio.ensure_future(items.run("a", "item", [Message.text("user", Role.USER, "task")]))
    await pool.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    cancelling = asyncio.ensure_future(items.cancel_all())
    # while the submit is held, cancel_all neither ends nor cancels a run that is not recorded yet
    done, _ = await asyncio.wait({cancelling}, timeout=0.5)
    assert not done and pool.canceled == []
    pool.release.set()
    await cancelling
    assert pool.submitted == [FIRST]
    assert pool.canceled == [FIRST]


class LoadingPool(FakePool):
    """Redis just restarted and loading its data back: the first ``outages`` record reads fail
    as redis-py says it (``BusyLoadingError``, a ``ConnectionError``)."""

    def __init__(self, outages: int) -> None:
        super().__init__()
        self.outages = outages

    async def record(self, run_id: str) -> RunRecord | None:
        if self.outages:
            self.outages -= 1
            raise redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory")
        return await super().record(run_id)


async def test_an_item_met_by_redis_loading_its_data_is_submitted_once_redis_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shelly_dist.redisio.blocking.backoff", lambda attempt: 0.001)
    pool = LoadingPool(outages=3)
    assert (await run(pool))["status"] == "completed" and pool.submitted == [FIRST]
