"""The run journal's atomic scripts against the real Redis: join, claim, checkpoint, release."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from shelly_dist.agent import ChildRequest, DelegateEntry, RunState
from shelly_dist.chats import Message, Role
from shelly_dist.errors import StoreError
from shelly_dist.redisio.connection import connect
from shelly_dist.runtime.celery.journal import Journal, Lease, LeaseLost, RunEnd, child_key
from shelly_dist.runtime.celery.journal.renewer import Renewer
from shelly_dist.runtime.celery.settings import RuntimeSettings

pytestmark = pytest.mark.integration


@pytest.fixture
async def journal(redis_url: str, key_prefix: str) -> AsyncIterator[Journal]:
    client = connect(redis_url)
    settings = RuntimeSettings(broker_url=redis_url, redis_url=redis_url, key_prefix=key_prefix, max_attempts=3)
    yield Journal(client, settings)
    await client.aclose()


def request(i: int) -> ChildRequest:
    return ChildRequest(key=f"call_1:{i}", tool_call_id="call_1", index=i, agent="w", task=f"t{i}", depth=1,
                        visited=["lead", "w"], parent_run_id="parent", parent_agent="lead")


async def parent(journal: Journal) -> Lease:
    """A root run created for the pool, claimed by a worker."""
    await journal.create_root("parent", agent="lead", session="0123456789abcdef", mode="worker", task="go",
                              fingerprint="fp")
    claim = await journal.claim("parent", "parent", "parent-token", "w0")
    assert claim.lease is not None
    return claim.lease


async def claimed(journal: Journal, run_id: str, token: str = "tok") -> Lease:
    claim = await journal.claim(run_id, "parent", token, "w1")
    assert claim.lease is not None, claim.outcome
    return claim.lease


async def test_join_counts_each_child_once_however_often_it_finishes(journal: Journal):
    lease = await parent(journal)
    ids, to_start = await lease.expect([request(0), request(1)], 1, "fp")
    assert to_start == ids
    child = await claimed(journal, ids[0])
    entry = DelegateEntry(agent="w", result="r0").to_json()
    assert (await child.finish("done", entry))[0] == 1
    assert (await child.finish("done", entry))[0] == -1  # a redelivered finish
    other = await claimed(journal, ids[1])
    left, mode = await other.finish("done", DelegateEntry(agent="w", result="r1").to_json())
    assert (left, mode) == (0, "worker")  # exactly one caller sees zero and enqueues the resume
    got = await journal.children("parent", [child_key(request(0), 1), child_key(request(1), 1)])
    assert [e.result for e in got.values()] == ["r0", "r1"]


async def test_children_are_expected_before_they_can_join(journal: Journal):
    lease = await parent(journal)
    ids, _ = await lease.expect([request(0), request(1)], 1, "fp")
    fast = await claimed(journal, ids[0])
    left, _ = await fast.finish("done", DelegateEntry(agent="w", result="quick").to_json())
    assert left == 1, "a child that finishes at once must not complete the join early"


async def test_expecting_again_after_a_redelivery_restarts_only_unstarted_children(journal: Journal):
    lease = await parent(journal)
    ids, _ = await lease.expect([request(0), request(1)], 1, "fp")
    await claimed(journal, ids[0])
    again, to_start = await lease.expect([request(0), request(1)], 1, "fp")
    assert again == ids and to_start == [ids[1]]
    assert (await journal.fields("parent"))["pending"] == "2"


async def test_claim_gives_the_run_to_one_task_at_a_time(journal: Journal):
    await parent(journal)
    assert (await journal.claim("parent", "parent", "b", "w2")).outcome == "busy"


async def test_a_run_that_never_makes_progress_is_exhausted_after_max_attempts(journal: Journal):
    await parent(journal)
    lease = journal.keys.run_lease("parent")
    outcomes = ["ok"]
    for attempt in range(3):
        await journal.client.delete(lease)  # the worker died holding it; the lease expired
        outcomes.append((await journal.claim("parent", "parent", f"t{attempt}", "w")).outcome)
    assert outcomes == ["ok", "ok", "ok", "exhausted"]


async def test_checkpoint_resets_the_attempts_and_appends_only_new_messages(journal: Journal):
    lease = await parent(journal)
    state = RunState(run_id="parent", config_name="lead", instance_name="lead")
    first = [Message.text("user", Role.USER, "one")]
    assert await lease.checkpoint(0, state, first, "running") == (1, False)
    assert (await journal.fields("parent"))["attempts"] == "0"
    assert await lease.checkpoint(1, state, [Message.text("user", Role.USER, "two")], "running") == (2, False)
    assert [m.text_content() for m in await journal.messages("parent", 2)] == ["one", "two"]


async def test_a_rewrite_checkpoint_replaces_the_journaled_messages_with_the_whole_chat(journal: Journal):
    lease = await parent(journal)
    state = RunState(run_id="parent", config_name="lead", instance_name="lead")
    old = [Message.text("user", Role.USER, text) for text in ("one", "two", "three")]
    assert await lease.checkpoint(0, state, old, "running") == (3, False)
    compacted = [Message.text("lead", Role.SYSTEM, "prompt"), Message.text("", Role.USER, "summary")]
    assert await lease.checkpoint(3, state, compacted, "running", rewrite=True) == (2, False)
    assert [m.text_content() for m in await journal.messages("parent", 5)] == ["prompt", "summary"]
    assert await lease.checkpoint(2, state, [Message.text("user", Role.USER, "four")], "running") == (3, False)


async def test_a_rewrite_from_a_writer_at_the_wrong_offset_is_refused_and_changes_nothing(journal: Journal):
    lease = await parent(journal)
    state = RunState(run_id="parent", config_name="lead", instance_name="lead")
    await lease.checkpoint(0, state, [Message.text("user", Role.USER, "one")], "running")
    with pytest.raises(StoreError, match="journal: expected 0 messages, found 1"):
        await lease.checkpoint(0, state, [Message.text("", Role.USER, "summary")], "running", rewrite=True)
    assert [m.text_content() for m in await journal.messages("parent", 5)] == ["one"]


async def test_checkpoint_writes_the_events_batch_and_reports_a_cancelled_tree(journal: Journal):
    lease = await parent(journal)
    state = RunState(run_id="parent", config_name="lead", instance_name="lead")
    await journal.client.hset(journal.keys.run("parent"), "canceled", "1")
    assert await lease.checkpoint(0, state, [], "running", '[{"kind": "usage"}]') == (0, True)
    entries = await journal.client.xrange(journal.keys.events(lease.record.session))
    assert [e[1]["events"] for e in entries] == ['[{"kind": "usage"}]']


async def test_checkpoint_from_a_stale_writer_is_refused(journal: Journal):
    lease = await parent(journal)
    state = RunState(run_id="parent", config_name="lead", instance_name="lead")
    await lease.checkpoint(0, state, [Message.text("user", Role.USER, "one")], "running")
    with pytest.raises(StoreError, match="journal: expected 0 messages, found 1"):
        await lease.checkpoint(0, state, [Message.text("user", Role.USER, "dup")], "running")


async def test_release_keeps_the_lease_when_every_child_already_joined(journal: Journal):
    lease = await parent(journal)
    ids, _ = await lease.expect([request(0)], 1, "fp")
    assert await lease.release() == 1  # still waiting: lease released
    again = await claimed(journal, "parent", "tok2")
    await (await claimed(journal, ids[0])).finish("done", DelegateEntry(agent="w").to_json())
    assert await again.release() == 0  # nothing to wait for: keep going
    assert (await journal.claim("parent", "parent", "other", "w2")).outcome == "busy"


async def test_checkpoint_and_finish_with_a_stale_token_are_refused(journal: Journal):
    stale = await parent(journal)
    await journal.client.delete(journal.keys.run_lease("parent"))  # it lapsed: another worker claims
    current = await claimed(journal, "parent", "new")
    state = RunState(run_id="parent", config_name="lead", instance_name="lead")
    with pytest.raises(LeaseLost, match="lease lost"):
        await stale.checkpoint(0, state, [Message.text("user", Role.USER, "late")], "running")
    with pytest.raises(LeaseLost, match="lease lost"):
        await stale.finish("done", DelegateEntry(agent="lead", result="late").to_json())
    with pytest.raises(LeaseLost, match="lease lost"):
        await stale.expect([request(0)], 1, "fp")
    assert await journal.messages("parent", 5) == []
    assert await current.checkpoint(0, state, [Message.text("user", Role.USER, "mine")], "running") == (1, False)


async def test_renewal_is_refused_once_another_worker_holds_the_run(journal: Journal):
    stale = await parent(journal)
    assert await stale.renew()
    await journal.client.delete(journal.keys.run_lease("parent"))
    await claimed(journal, "parent", "new")
    assert not await stale.renew()


async def test_claim_numbers_a_fresh_run_once_and_a_redelivery_keeps_the_number(journal: Journal):
    lease = await parent(journal)
    ids, _ = await lease.expect([request(0), request(1)], 1, "fp")
    first = await journal.claim(ids[0], "parent", "tok-a", "w1", session="0123456789abcdef", agent="w")
    second = await journal.claim(ids[1], "parent", "tok-b", "w1", session="0123456789abcdef", agent="w")
    assert first.lease is not None and second.lease is not None
    assert (first.lease.record.instance_n, second.lease.record.instance_n) == (1, 2)
    await first.lease.drop()  # the task is redelivered: the run is claimed again, still fresh
    again = await journal.claim(ids[0], "parent", "tok-c", "w2", session="0123456789abcdef", agent="w")
    assert again.lease is not None and again.lease.record.instance_n == 1
    assert await journal.next_instance("0123456789abcdef", "w") == 3


async def test_the_claim_and_every_checkpoint_bring_back_the_runs_stop_reason(journal: Journal):
    lease = await parent(journal)
    ids, _ = await lease.expect([request(0)], 1, "fp")
    child = await claimed(journal, ids[0])
    assert child.record.stop == ""
    await journal.client.hset(journal.keys.run(ids[0]), "stop", "canceled: sibling failed")  # a sibling failed
    state = RunState(run_id=ids[0], config_name="w", instance_name="w-1")
    await child.checkpoint(0, state, [Message.text("user", Role.USER, "one")], "running")
    assert child.record.stop == "canceled: sibling failed"
    await child.drop()
    assert (await claimed(journal, ids[0], "tok-2")).record.stop == "canceled: sibling failed"


async def test_a_finish_writes_the_held_last_checkpoint_in_the_same_step(journal: Journal):
    lease = await parent(journal)
    ids, _ = await lease.expect([request(0)], 1, "fp")
    child = await claimed(journal, ids[0])
    state = RunState(run_id=ids[0], config_name="w", instance_name="w-1")
    child.hold(0, state, [Message.text("user", Role.USER, "task"), Message.text("w", Role.ASSISTANT, "answer")])
    assert await child.finish("done", DelegateEntry(agent="w", result="answer").to_json()) == (0, "worker")
    record = await journal.record(ids[0])
    assert record is not None and (record.status, record.msg_count) == ("done", 2)
    assert [m.text_content() for m in await journal.messages(ids[0], 2)] == ["task", "answer"]


async def test_a_finish_writes_its_end_fields_as_given_beside_a_held_checkpoint(journal: Journal):
    """The end's fields travel as one JSON object the script decodes (``RunEnd``): any text, in any
    script, comes back byte for byte, after the held messages in the same call."""
    lease = await parent(journal)
    ids, _ = await lease.expect([request(0)], 1, "fp")
    child = await claimed(journal, ids[0])
    reply = 'done 😀 — "quoted", back\\slash, nul \x00 and\nnewline'
    state = RunState(run_id=ids[0], config_name="w", instance_name="w-7")
    child.hold(0, state, [Message.text("w", Role.ASSISTANT, reply)])
    end = RunEnd(usage='{"input_tokens": 3}', instance="w-7", reply=reply)
    await child.finish("done", DelegateEntry(agent="w", result=reply).to_json(), end=end)
    record = await journal.record(ids[0])
    assert record is not None
    assert (record.reply, record.instance, record.usage, record.error) == (reply, "w-7", '{"input_tokens": 3}', "")
    assert [m.text_content() for m in await journal.messages(ids[0], 1)] == [reply]


async def test_a_finish_refuses_a_held_checkpoint_when_the_journal_is_not_at_its_offset(journal: Journal):
    lease = await parent(journal)
    ids, _ = await lease.expect([request(0)], 1, "fp")
    child = await claimed(journal, ids[0])
    state = RunState(run_id=ids[0], config_name="w", instance_name="w-1")
    await child.checkpoint(0, state, [Message.text("user", Role.USER, "one")], "running")
    child.hold(0, state, [Message.text("w", Role.ASSISTANT, "stale")])
    with pytest.raises(StoreError, match="expected 0 messages, found 1"):
        await child.finish("done", DelegateEntry(agent="w", result="stale").to_json())
    assert (await journal.record(ids[0])).status == "running"  # type: ignore[union-attr]


async def test_joined_answers_the_entries_so_far_and_the_trees_cancel_flag_together(journal: Journal):
    lease = await parent(journal)
    ids, _ = await lease.expect([request(0), request(1)], 1, "fp")
    await (await claimed(journal, ids[0])).finish("done", DelegateEntry(agent="w", result="r0").to_json())
    keys = [child_key(request(0), 1), child_key(request(1), 1)]
    got, canceled = await journal.joined("parent", "parent", keys)
    assert ([e.result for e in got.values()], canceled) == (["r0"], False)
    await journal.client.hset(journal.keys.run("parent"), "canceled", "1")
    assert (await journal.joined("parent", "parent", keys))[1] is True


async def test_a_claim_of_another_generation_ends_the_sends_long_deadline(journal: Journal):
    # SENT leaves a sent run to the broker for a visibility timeout; the first claim attempt by a
    # worker of another generation brings its deadline back to requeue_after, so any worker's
    # reaper re-sends it (Celery's retry may return it to the same foreign worker every time)
    await journal.create_root("r", agent="lead", session="0123456789abcdef", mode="worker", task="go",
                              fingerprint="old")
    await journal.sent("r", "r", took=True)
    deadlines = journal.keys.tree_deadlines("r")
    sent_at = await journal.client.zscore(deadlines, "r")
    assert sent_at is not None and sent_at > (time.time() + journal.settings.visibility_timeout - 5) * 1000
    claim = await journal.claim("r", "r", "tok", "w1", fingerprint="new")
    assert (claim.outcome, claim.detail) == ("foreign", "old")
    claimed_at = await journal.client.zscore(deadlines, "r")
    assert claimed_at is not None and claimed_at <= (time.time() + journal.settings.requeue_after) * 1000


async def test_sends_recorded_together_move_each_waiting_childs_deadline_to_the_backstop(journal: Journal):
    """A fan-out's ``SENT`` scripts leave in one pipeline (``Journal._record_sent``); each one still
    acts on its own run: a queued child waits for the backstop, a claimed one keeps its lease's."""
    lease = await parent(journal)
    ids, _ = await lease.expect([request(i) for i in range(3)], 1, "fp")
    await claimed(journal, ids[2])
    deadlines = journal.keys.tree_deadlines("parent")
    claimed_at = await journal.client.zscore(deadlines, ids[2])
    await asyncio.gather(*(journal.sent("parent", cid, True) for cid in ids))
    backstop = (time.time() + max(journal.settings.visibility_timeout, journal.settings.requeue_after)) * 1000
    for cid in ids[:2]:
        assert abs(await journal.client.zscore(deadlines, cid) - backstop) < 5000, cid
    assert await journal.client.zscore(deadlines, ids[2]) == claimed_at


async def test_a_fan_out_wider_than_one_redis_call_takes_is_expected_whole(journal: Journal):
    """EXPECT writes its children's deadlines and tree membership in calls of 1,000 arguments:
    1,200 children (2,400 deadline arguments) take several, and none is lost between them."""
    lease = await parent(journal)
    ids, to_start = await lease.expect([request(i) for i in range(1200)], 1, "fp")
    assert len(set(ids)) == 1200 and to_start == ids
    assert (await journal.fields("parent"))["pending"] == "1200"
    keys, client = journal.keys, journal.client
    assert None not in await client.zmscore(keys.tree_deadlines("parent"), ids)
    assert await client.smismember(keys.tree_runs("parent"), ids) == [1] * 1200
    record = await journal.record(ids[-1])
    assert record is not None and (record.status, record.parent, record.task) == ("queued", "parent", "t1199")


async def test_the_record_a_claim_answers_is_the_one_it_stored(journal: Journal):
    lease = await parent(journal)
    ids, _ = await lease.expect([request(0)], 1, "fp")
    got = (await claimed(journal, ids[0])).record
    stored = await journal.record(ids[0])
    assert stored is not None
    assert (got.status, got.worker, got.attempts, got.task) == ("running", "w1", 1, "t0")
    assert (got.status, got.worker, got.attempts, got.task) == (stored.status, stored.worker, stored.attempts,
                                                                stored.task)


async def test_a_finish_journals_a_held_chat_longer_than_one_redis_call_takes(journal: Journal):
    lease = await parent(journal)
    ids, _ = await lease.expect([request(0)], 1, "fp")
    child = await claimed(journal, ids[0])
    state = RunState(run_id=ids[0], config_name="w", instance_name="w-1")
    chat = [Message.text("w", Role.ASSISTANT, f"m{i}") for i in range(1500)]
    child.hold(0, state, chat)
    await child.finish("done", DelegateEntry(agent="w", result="m1499").to_json())
    assert [m.text_content() for m in await journal.messages(ids[0], 1500)] == [f"m{i}" for i in range(1500)]


@pytest.fixture
def renewer(journal: Journal) -> Iterator[Renewer]:
    """The lease renewer of a worker ``w1`` of generation ``fp``, on the real Redis."""
    renewer = Renewer(journal.settings, journal.keys)
    renewer.worker, renewer.fingerprint = "w1", "fp"
    yield renewer
    renewer.close()


async def test_a_claim_ends_the_receipt_so_the_run_is_reaped_at_its_next_deadline(journal: Journal,
                                                                                    renewer: Renewer):
    # a run that suspends (its model call's turn) or waits after its claim is due at a time of its
    # own: the receipt its message left must not hold the reaper back for up to a lease
    await journal.create_root("r", agent="lead", session="0123456789abcdef", mode="worker", task="go",
                              fingerprint="fp")
    await asyncio.to_thread(renewer.receive, "delivery-1", "r", "r")
    assert await journal.client.exists(journal.keys.run_received("r"))
    claim = await journal.claim("r", "r", "tok", "w1", fingerprint="fp")
    assert claim.lease is not None
    assert not await journal.client.exists(journal.keys.run_received("r"))
    await journal.client.delete(journal.keys.run_lease("r"))  # the step ended, the run is due now
    await journal.client.zadd(journal.keys.tree_deadlines("r"), {"r": time.time() * 1000 - 1})
    assert (await journal.reap("r", "r"))[0] == "running"


async def test_a_worker_of_another_generation_leaves_no_receipt_to_hold_the_resend(journal: Journal,
                                                                                  renewer: Renewer):
    # a rolling update: the new worker keeps getting the old run's message back (Celery's retry);
    # its receipt would keep the reaper from sending it to a worker of the run's generation
    await journal.create_root("r", agent="lead", session="0123456789abcdef", mode="worker", task="go",
                              fingerprint="old")
    await asyncio.to_thread(renewer.receive, "delivery-1", "r", "r")
    assert not await journal.client.exists(journal.keys.run_received("r"))
    renewer.fingerprint = "old"
    await asyncio.to_thread(renewer.receive, "delivery-2", "r", "r")
    assert await journal.client.exists(journal.keys.run_received("r"))


async def test_a_claim_left_to_another_generation_ends_the_receipt(journal: Journal, renewer: Renewer):
    await journal.create_root("r", agent="lead", session="0123456789abcdef", mode="worker", task="go",
                              fingerprint="old")
    renewer.fingerprint = ""  # a worker that cannot tell (its receipt is taken)
    await asyncio.to_thread(renewer.receive, "delivery-1", "r", "r")
    assert await journal.client.exists(journal.keys.run_received("r"))
    claim = await journal.claim("r", "r", "tok", "w1", fingerprint="new")
    assert claim.outcome == "foreign"
    assert not await journal.client.exists(journal.keys.run_received("r"))
