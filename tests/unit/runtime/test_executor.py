"""The worker's executor on fakeredis: a retried finish joins the journaled result, a journaled
reply is never requested again, and a step whose lease is lost writes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest

from shelly_dist import Agent, AgentOptions, Registry, ScriptedCompleter
from shelly_dist.agent import ChildRequest
from shelly_dist.errors import StoreError
from shelly_dist.runtime.celery.children.cancel import CancelWatch
from shelly_dist.runtime.celery.journal import Journal, Lease, child_key
from shelly_dist.runtime.celery.journal.renewer import Renewer
from shelly_dist.runtime.celery.names import RESUME_AGENT
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.runtime.celery.worker.executor import Executor


class Context:
    """A worker context of one scripted agent ``w`` whose completer counts its calls."""

    fingerprint = "fp"

    def __init__(self, replies: list[Any]) -> None:
        self.completer = ScriptedCompleter(replies, name="w")
        self._registry = Registry()
        self._registry.register("w", "a worker", lambda: Agent("w", "a worker", completer=self.completer,
                                                                options=AgentOptions()))

    async def registry(self, session: str) -> Registry:
        return self._registry

    async def aclose(self) -> None:
        return None


class Sent:
    def __init__(self) -> None:
        self.tasks: list[tuple[str, list[Any]]] = []

    async def __call__(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        self.tasks.append((name, args))


@pytest.fixture
async def journal() -> AsyncIterator[Journal]:
    server = fakeredis.FakeServer()
    client = fakeredis.FakeAsyncRedis(server=server, decode_responses=True)
    settings = RuntimeSettings(broker_url="redis://", redis_url="redis://", key_prefix=f"t:{uuid.uuid4().hex[:6]}:")
    journal = Journal(client, settings)
    # The renewer's thread talks to the same fake server through a client of its own.
    journal.renewer = Renewer(settings, journal.keys,
                              connect=lambda: fakeredis.FakeRedis(server=server, decode_responses=True))
    yield journal
    journal.renewer.close()
    await client.aclose()


REQUEST = ChildRequest(key="call_1:0", tool_call_id="call_1", index=0, agent="w", task="answer", depth=1,
                       visited=["lead", "w"], parent_run_id="root", parent_agent="lead")


async def waiting_parent(journal: Journal) -> str:
    """A parent that registered one child and suspended; returns the child's run id."""
    await journal.create_root("root", agent="lead", session="s", mode="worker", task="go", fingerprint="fp")
    claim = await journal.claim("root", "root", "parent", "w0")
    assert claim.lease is not None
    ids, _ = await claim.lease.expect([REQUEST], 1, "fp")
    assert await claim.lease.release() == 1
    return ids[0]


async def test_a_child_whose_last_step_only_called_the_model_ends_in_one_write(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
):
    child = await waiting_parent(journal)
    executor = Executor(Context(["the answer"]), journal, Sent(), CancelWatch(journal.client, journal.keys),
                        hostname="w1")
    checkpoints: list[int] = []
    write = Lease._write

    async def counted(self: Lease, *args: Any, **kwargs: Any) -> tuple[int, bool]:
        checkpoints.append(1)
        return await write(self, *args, **kwargs)

    monkeypatch.setattr(Lease, "_write", counted)
    assert (await executor.advance(child, "root")).outcome == "done"
    assert checkpoints == [], "the final reply rides with the finish"
    record = await journal.record(child)
    assert record is not None and record.status == "done"
    assert [m.text_content() for m in await journal.messages(child, record.msg_count)][-2:] == ["answer", "the answer"]


async def test_retried_finish_after_the_final_checkpoint_joins_the_journaled_reply(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
):
    child = await waiting_parent(journal)
    ctx, sent = Context(["the answer"]), Sent()
    executor = Executor(ctx, journal, sent, CancelWatch(journal.client, journal.keys), hostname="w1")
    finish = Lease.finish
    failures = [StoreError("journal: redis error: ConnectionError: blip")]

    async def flaky(self: Lease, *args: Any, **kwargs: Any) -> tuple[int, str]:
        if failures:
            raise failures.pop()
        return await finish(self, *args, **kwargs)

    monkeypatch.setattr(Lease, "finish", flaky)
    with pytest.raises(StoreError):
        await executor.advance(child, "root")  # the final state is journaled, the finish is not
    progress = await executor.advance(child, "root")  # the task's retry
    assert progress.outcome == "done"
    joined = await journal.children("root", [child_key(REQUEST, 1)])
    assert joined[child_key(REQUEST, 1)].result == "the answer"
    assert ctx.completer.calls == 1, "a journaled reply is never requested again"
    assert sent.tasks == [(RESUME_AGENT, ["root", "root"])]


async def test_step_whose_lease_is_taken_over_is_abandoned_without_writing(journal: Journal):
    child = await waiting_parent(journal)
    ctx, sent = Context([{"text": "slow", "delay": 30}]), Sent()
    executor = Executor(ctx, journal, sent, CancelWatch(journal.client, journal.keys), hostname="w1")
    step = asyncio.create_task(executor.advance(child, "root"))

    async def taken_over() -> None:
        # Once the step is under way, another worker takes the run over (this one was presumed dead).
        while not await journal.client.exists(journal.keys.run_lease(child)):  # noqa: ASYNC110 (a Redis key)
            await asyncio.sleep(0.01)
        await journal.client.set(journal.keys.run_lease(child), "someone-else")

    await asyncio.wait_for(taken_over(), 5)
    progress = await asyncio.wait_for(step, journal.settings.lease * 2)
    assert progress.outcome == "abandoned"
    record = await journal.fields(child)
    assert record["status"] == "running" and "result" not in record
    assert sent.tasks == []


async def _stream_kinds(journal: Journal) -> list[list[str]]:
    """The kinds of the events of each entry of session ``s``'s stream."""
    entries = await journal.client.xrange(journal.keys.events("s"))
    return [[e["kind"] for e in json.loads(fields["events"])] for _, fields in entries]


async def test_a_quick_child_writes_its_started_event_with_its_finish(journal: Journal):
    child = await waiting_parent(journal)
    executor = Executor(Context(["the answer"]), journal, Sent(), CancelWatch(journal.client, journal.keys),
                        hostname="w1")
    assert (await executor.advance(child, "root")).outcome == "done"
    kinds = await _stream_kinds(journal)
    assert len(kinds) == 1, kinds
    assert kinds[0][0] == "run_started" and kinds[0][-1] == "run_finished"


async def test_a_slow_childs_started_event_shows_while_its_step_is_in_flight(journal: Journal):
    child = await waiting_parent(journal)
    executor = Executor(Context([{"text": "slow", "delay": 30}]), journal, Sent(),
                        CancelWatch(journal.client, journal.keys), hostname="w1")
    step = asyncio.create_task(executor.advance(child, "root"))
    try:
        async with asyncio.timeout(10):
            while not any("run_started" in kinds for kinds in await _stream_kinds(journal)):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert not step.done()
    finally:
        step.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await step


class SyncContext(Context):
    """A context written before ``registry`` became async (a custom worker bootstrap)."""

    def registry(self, session: str) -> Registry:  # type: ignore[override]
        return self._registry


async def test_a_context_with_a_synchronous_registry_still_runs_its_child(journal: Journal):
    child = await waiting_parent(journal)
    executor = Executor(SyncContext(["the answer"]), journal, Sent(), CancelWatch(journal.client, journal.keys),
                        hostname="w1")
    assert (await executor.advance(child, "root")).outcome == "done"
