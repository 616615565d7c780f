"""The lease scripts and the reaper on fakeredis (Lua): fencing, idempotent finish, and which runs
a reaper re-enqueues after a crash — each by exactly one of several reapers."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import fakeredis
import pytest

from shelly_dist.agent import ChildRequest, DelegateEntry
from shelly_dist.runtime.celery.journal import Journal, Lease
from shelly_dist.runtime.celery.journal import runs as journal_module
from shelly_dist.runtime.celery.journal.due import SHARDS
from shelly_dist.runtime.celery.names import RESUME_AGENT, RUN_AGENT
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.runtime.celery.worker import reaper as reaper_module
from shelly_dist.runtime.celery.worker.reaper import SIT_OUT, Reaper

LEASE = 0.05
"""A lease short enough to lapse at once, for the claims whose lapse (or passed deadline) is the
subject: see :func:`brief`."""

HELD = 60.0
"""Every other claim's lease: held through the test's writes however loaded the machine (with 50 ms
ones, a parent's expect or release under load failed with LeaseLost)."""


@pytest.fixture
async def journal() -> AsyncIterator[Journal]:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    settings = RuntimeSettings(broker_url="redis://", redis_url="redis://", key_prefix=f"t:{uuid.uuid4().hex[:6]}:",
                               lease=HELD, requeue_after=0)
    yield Journal(client, settings)
    await client.aclose()


def brief(journal: Journal) -> Journal:
    """The same journal, handing out leases of :data:`LEASE` (they lapse at once)."""
    return Journal(journal.client, replace(journal.settings, lease=LEASE))


class Sent:
    """An enqueue that records what was sent."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, list[Any]]] = []

    async def __call__(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        self.tasks.append((name, args))


async def lapsed(journal: Journal, run_id: str) -> None:
    """Wait (bounded) until the run's lease key has expired: its holder stopped renewing it."""
    deadline = time.monotonic() + 5
    while await journal.client.exists(journal.keys.run_lease(run_id)):
        assert time.monotonic() < deadline, "the lease never lapsed"
        await asyncio.sleep(LEASE / 2)


async def deadline_passed(journal: Journal, run_id: str) -> None:
    """Wait (bounded) until the run's requeue deadline in its tree (under ``root``) has passed."""
    deadline = time.monotonic() + 5
    while (await journal.client.zscore(journal.keys.tree_deadlines("root"), run_id) or 0) > time.time() * 1000:
        assert time.monotonic() < deadline, "the run's deadline never passed"
        await asyncio.sleep(LEASE / 2)


def request(i: int) -> ChildRequest:
    return ChildRequest(key=f"call_1:{i}", tool_call_id="call_1", index=i, agent="w", task=f"t{i}", depth=1,
                        visited=["lead", "w"], parent_run_id="root", parent_agent="lead")


async def root(journal: Journal) -> Lease:
    await journal.create_root("root", agent="lead", session="s", mode="worker", task="go", fingerprint="fp")
    claim = await journal.claim("root", "root", "holder", "w0")
    assert claim.lease is not None
    return claim.lease


async def test_run_whose_lease_lapsed_is_re_enqueued_by_exactly_one_of_two_reapers(journal: Journal):
    await root(brief(journal))
    await lapsed(journal, "root")
    first, second = Sent(), Sent()
    sent = await asyncio.gather(Reaper(journal, first, "fp").scan(), Reaper(journal, second, "fp").scan())
    assert sorted(sent) == [0, 1]
    assert first.tasks + second.tasks == [(RUN_AGENT, ["root", "root"])]


async def test_run_whose_holder_still_renews_is_left_alone(journal: Journal):
    lease = await root(brief(journal))
    await lapsed(journal, "root")
    await journal.client.set(journal.keys.run_lease("root"), "holder", px=60_000)  # renewed in time
    sent = Sent()
    assert await Reaper(journal, sent, "fp").scan() == 0
    assert lease.record.id == "root" and sent.tasks == []


async def test_parent_whose_join_completed_without_a_resume_is_resumed_by_the_reaper(journal: Journal):
    parent = await root(journal)
    ids, _ = await parent.expect([request(0)], 1, "fp")
    assert await parent.release() == 1
    child = await journal.claim(ids[0], "root", "child", "w1")
    assert child.lease is not None
    left, mode = await child.lease.finish("done", DelegateEntry(agent="w", result="r").to_json())
    assert (left, mode) == (0, "worker")
    # ... and the worker died here, before it could send the parent's resume.
    sent = Sent()
    await Reaper(journal, sent, "fp").scan()
    assert sent.tasks == [(RESUME_AGENT, ["root", "root"])]


async def test_parent_still_waiting_on_a_child_is_not_re_enqueued(journal: Journal):
    parent = await root(journal)
    ids, _ = await parent.expect([request(0)], 1, "fp")
    await parent.release()
    child = await brief(journal).claim(ids[0], "root", "child", "w1")  # its deadline passes at once
    assert child.lease is not None  # the child runs, leased: nothing to re-send
    # Its worker keeps renewing it. SET, not PEXPIRE: under load the 50 ms lease can lapse before
    # a PEXPIRE arrives, which then renews nothing and the reaper rightly re-sends the child.
    await journal.client.set(journal.keys.run_lease(ids[0]), "child", px=60_000)
    await deadline_passed(journal, ids[0])  # so the reaper does look at the child, and finds its lease live
    sent = Sent()
    await Reaper(journal, sent, "fp").scan()
    assert sent.tasks == []


async def test_queued_run_whose_task_message_was_lost_is_sent_again(journal: Journal):
    parent = await root(journal)
    ids, to_start = await parent.expect([request(0)], 1, "fp")
    assert to_start == ids  # ... but the send to the broker failed
    await parent.release()
    sent = Sent()
    await Reaper(journal, sent, "fp").scan()
    assert (RUN_AGENT, [ids[0], "root"]) in sent.tasks


async def test_a_queued_run_whose_task_the_broker_took_is_not_re_sent_while_it_waits_in_the_queue(journal: Journal):
    """Past ``requeue_after`` (0 here) a queued run is late behind a backlog, not lost, once the
    broker took its task: the reapers leave it to the broker until the backstop."""
    parent = await root(journal)
    ids, _ = await parent.expect([request(0), request(1)], 1, "fp")
    await parent.release()
    await journal.sent("root", ids[0], True)  # the broker took the first child's task; the second was never sent
    sent = Sent()
    await Reaper(journal, sent, "fp").scan()
    assert sent.tasks == [(RUN_AGENT, [ids[1], "root"])]


async def test_a_resume_the_broker_took_is_not_re_sent_while_it_waits_in_the_queue(journal: Journal):
    parent = await root(journal)
    ids, _ = await parent.expect([request(0)], 1, "fp")
    await parent.release()
    child = await journal.claim(ids[0], "root", "child", "w1")
    assert child.lease is not None
    await child.lease.finish("done", DelegateEntry(agent="w", result="r").to_json())
    await journal.sent("root", "root", True)  # the finisher sent the parent's resume
    sent = Sent()
    await Reaper(journal, sent, "fp").scan()
    assert sent.tasks == []


async def test_a_run_claimed_before_its_send_was_recorded_keeps_its_lease_deadline(journal: Journal):
    await journal.create_root("root", agent="lead", session="s", mode="worker", task="go", fingerprint="fp")
    claim = await journal.claim("root", "root", "holder", "w0")
    assert claim.lease is not None
    deadline = await journal.client.zscore(journal.keys.tree_deadlines("root"), "root")
    await journal.sent("root", "root", True)
    assert await journal.client.zscore(journal.keys.tree_deadlines("root"), "root") == deadline


class Refused(Sent):
    """An enqueue whose broker refuses every task: the sender makes the run due again."""

    def __init__(self, journal: Journal) -> None:
        super().__init__()
        self.journal = journal

    async def __call__(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> bool:
        self.tasks.append((name, args))
        await self.journal.due_now(args[1], args[0])
        return False


async def test_a_scan_stops_sending_at_the_first_refusal_and_every_run_stays_due(journal: Journal):
    parent = await root(journal)
    ids, _ = await parent.expect([request(0), request(1), request(2)], 1, "fp")
    await parent.release()  # three children queued whose task messages were lost
    refused = Refused(journal)
    assert await Reaper(journal, refused, "fp").scan() == 0
    assert len(refused.tasks) == 1
    sent = Sent()
    await Reaper(journal, sent, "fp").scan()  # another worker's reaper, whose broker takes them
    assert sorted(args[0] for _, args in sent.tasks) == sorted(ids)


async def test_a_reaper_whose_broker_refuses_sits_out_then_sends_again(journal: Journal):
    parent = await root(journal)
    ids, _ = await parent.expect([request(0)], 1, "fp")
    await parent.release()
    refused = Refused(journal)
    reaper = Reaper(journal, refused, "fp")
    assert await reaper.scan() == 0
    sent = Sent()
    reaper.enqueue = sent  # its broker is back; no other worker took its shards meanwhile
    for _ in range(SIT_OUT):
        assert await reaper.scan() == 0
    assert await reaper.scan() == 1
    assert sent.tasks == [(RUN_AGENT, [ids[0], "root"])]


async def test_retried_finish_of_a_finished_run_changes_nothing(journal: Journal):
    parent = await root(journal)
    ids, _ = await parent.expect([request(0)], 1, "fp")
    child = await journal.claim(ids[0], "root", "child", "w1")
    assert child.lease is not None
    entry = DelegateEntry(agent="w", result="first").to_json()
    assert (await child.lease.finish("done", entry))[0] == 0
    again = DelegateEntry(agent="w", result="second").to_json()
    assert await child.lease.finish("done", again) == (-1, "")
    assert json.loads((await journal.fields(ids[0]))["result"]) == entry


async def test_finish_never_re_creates_an_expired_parent(journal: Journal):
    parent = await root(journal)
    ids, _ = await parent.expect([request(0)], 1, "fp")
    child = await journal.claim(ids[0], "root", "child", "w1")
    assert child.lease is not None
    await journal.client.delete(journal.keys.run("root"))  # the parent's record expired
    await child.lease.finish("done", DelegateEntry(agent="w", result="late").to_json())
    assert not await journal.client.exists(journal.keys.run("root"))
    assert not await journal.client.exists(journal.keys.run_children("root"))


async def test_run_of_another_config_generation_is_left_unclaimed(journal: Journal):
    await journal.create_root("root", agent="lead", session="s", mode="worker", task="go", fingerprint="old")
    claim = await journal.claim("root", "root", "tok", "w-new", fingerprint="new")
    assert (claim.outcome, claim.detail, claim.lease) == ("foreign", "old", None)
    assert (await journal.fields("root"))["attempts"] == "0"
    assert not await journal.client.exists(journal.keys.run_lease("root"))


async def test_redelivered_tasks_of_a_parent_waiting_on_its_children_never_exhaust_its_attempts(journal: Journal):
    parent = await root(journal)
    await parent.expect([request(0)], 1, "fp")
    await parent.release()
    for i in range(journal.settings.max_attempts + 2):  # duplicates (broker redeliveries, reaper re-sends)
        claim = await journal.claim("root", "root", f"dup-{i}", "w1")
        assert claim.outcome == "ok" and claim.lease is not None, claim.outcome
        assert await claim.lease.release() == 1  # still waiting: let go again, no step run
    assert (await journal.record("root")).status == "waiting"


async def test_on_default_settings_a_finish_writes_no_hint_yet_the_parents_resume_is_reaped_when_due(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
):
    defaults = RuntimeSettings(broker_url="redis://", redis_url="redis://", key_prefix=journal.settings.key_prefix)
    assert defaults.requeue_after >= defaults.lease  # what makes the finish's hint unneeded
    journal = Journal(journal.client, defaults)
    parent = await root(journal)
    ids, _ = await parent.expect([request(0)], 1, "fp")
    assert await parent.release() == 1
    child = await journal.claim(ids[0], "root", "child", "w1")  # hints the tree at its lease's deadline
    assert child.lease is not None
    versions = {s: await journal.client.hgetall(journal.keys.due_versions(s)) for s in range(SHARDS)}
    assert await child.lease.finish("done", DelegateEntry(agent="w", result="r").to_json()) == (0, "worker")
    assert {s: await journal.client.hgetall(journal.keys.due_versions(s)) for s in range(SHARDS)} == versions
    # ... and the worker died here, before it could send the parent's resume.
    sent = Sent()
    await Reaper(journal, sent, "fp").scan()
    assert sent.tasks == []  # not due yet
    later = time.time() + defaults.requeue_after + 1
    clock = SimpleNamespace(time=lambda: later)
    monkeypatch.setattr(reaper_module, "time", clock)  # the reapers' and the journal's clock only
    monkeypatch.setattr(journal_module, "time", clock)
    await Reaper(journal, sent, "fp").scan()  # the tree's hint (the claim's) is passed: then its truth
    await Reaper(journal, sent, "fp").scan()
    assert sent.tasks == [(RESUME_AGENT, ["root", "root"])]
