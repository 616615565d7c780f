"""Approvals and steering on the pool's Redis code paths (fakeredis, Lua): an approval registers
beside the questions and in the pool-wide index, its verdict reaches the gate, ``--always`` sticks
per session or batch, a deadline rejects it, the index lists O(pending) and drops what a crash
left, and a run's inbox is read past its cursor only when its record's count says so."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import fakeredis
import pytest
from prometheus_client import REGISTRY

from shelly_dist import Message, Role
from shelly_dist.agent import Run, Suspended
from shelly_dist.agent.approval import ApprovalPolicy
from shelly_dist.agent.steering import SteerMessage
from shelly_dist.errors import UsageError
from shelly_dist.runtime.celery.children import questions
from shelly_dist.runtime.celery.children.steering import RedisInbox, post
from shelly_dist.runtime.celery.journal import Journal, Lease
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.runtime.celery.worker.reaper import Reaper
from shelly_dist.tools import Tool, ToolBox
from shelly_dist.tools.builtin.ask import Responder, SuspendingAnswerer
from shelly_dist.tools.decisions import Verdict

from ..agent.helpers import Team, call


@pytest.fixture
async def journal() -> AsyncIterator[Journal]:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    settings = RuntimeSettings(broker_url="redis://", redis_url="redis://", key_prefix=f"t:{uuid.uuid4().hex[:6]}:",
                               requeue_after=0)
    yield Journal(client, settings)
    await client.aclose()


def deploy_box(ran: list[str]) -> ToolBox:
    async def deploy(arguments: str) -> str:
        ran.append(arguments)
        return "deployed"

    return ToolBox([Tool("deploy", "deploy", {"type": "object"}, deploy)], name="ops")


async def gated_run(journal: Journal, ran: list[str], *, root: str = "root", session: str = "s",
                    limit: float = 0) -> tuple[Lease, Run, Team]:
    await journal.create_root(root, agent="ops", session=session, mode="worker", task="go", fingerprint="fp")
    claim = await journal.claim(root, root, "holder", "w0")
    assert claim.lease is not None
    team = Team()
    team.add("ops", [call("deploy", {"env": "prod"}), "done: {result}"], toolboxes=(deploy_box(ran),),
             decider=Responder(SuspendingAnswerer()), approval=ApprovalPolicy(["deploy"], timeout=limit))
    run = Run.start(team.spawn("ops"), [Message.text("user", Role.USER, "go")], run_id=root)
    assert isinstance(await run.step(), Suspended)
    return claim.lease, run, team


async def decide(journal: Journal, qid: str, verdict: Verdict, session: str = "s") -> questions.Answered:
    s = journal.settings
    return await questions.answer(journal.client, journal.keys, session, qid, verdict.to_text(),
                                  retention=s.retention, requeue_after=s.requeue_after, by=verdict.by)


async def resumed(journal: Journal, lease: Lease, run: Run, team: Team) -> Run:
    """The run continued by another worker after its verdict joined: collected, then stepped."""
    again = Run.restore(team.spawn("ops"), run.snapshot())
    await questions.collect(lease, again)
    await again.until_done()
    return again


async def test_an_approval_is_registered_listed_pool_wide_and_its_verdict_runs_the_tool_once(journal: Journal):
    ran: list[str] = []
    lease, run, team = await gated_run(journal, ran)
    await questions.register(lease, run)
    await questions.register(lease, run)  # a repeated step registers nothing twice
    [listed] = await questions.open_decisions(journal.client, journal.keys)
    assert {k: listed[k] for k in ("id", "kind", "session", "run", "tool", "arguments", "path")} == {
        "id": "a-1", "kind": "approval", "session": "s", "run": "root", "tool": "deploy",
        "arguments": {"env": "prod"}, "path": ["ops"]}
    assert (await journal.record("root")).pending == 1
    assert (await decide(journal, "a-1", Verdict.approve(by="alice"))).outcome == "ok"
    again = await resumed(journal, lease, run, team)
    assert ran == ['{"env": "prod"}']
    assert again.agent.chat.messages()[-1].text_content() == "done: deployed"
    assert await questions.open_decisions(journal.client, journal.keys) == []
    assert await journal.client.zcard(journal.keys.decisions("approval")) == 0


async def test_a_rejection_reaches_the_model_and_the_tool_never_runs(journal: Journal):
    ran: list[str] = []
    lease, run, team = await gated_run(journal, ran)
    await questions.register(lease, run)
    await decide(journal, "a-1", Verdict.reject("not today", by="bob"))
    again = await resumed(journal, lease, run, team)
    assert ran == []
    assert again.agent.chat.messages()[-1].text_content() == "done: deploy: rejected: not today"


async def test_an_always_verdict_decides_the_tools_next_call_in_the_session_without_asking(journal: Journal):
    ran: list[str] = []
    lease, run, _ = await gated_run(journal, ran)
    await questions.register(lease, run)
    await decide(journal, "a-1", Verdict.approve(by="alice", always=True))
    lease2, run2, _ = await gated_run(journal, ran, root="root2")
    await questions.register(lease2, run2)
    assert not run2.state.awaiting and list(run2.state.approved.values()) == [""]
    assert await questions.open_decisions(journal.client, journal.keys) == []
    lease3, run3, _ = await gated_run(journal, ran, root="root3", session="other")
    await questions.register(lease3, run3)  # another session still asks
    assert [d["id"] for d in await questions.open_decisions(journal.client, journal.keys)] == ["a-1"]


async def test_a_batch_items_always_verdict_holds_for_the_batchs_other_sessions(journal: Journal):
    for session in ("item1", "item2"):
        await journal.client.set(journal.keys.session_batch(session), "b42")
    ran: list[str] = []
    lease, run, _ = await gated_run(journal, ran, session="item1")
    await questions.register(lease, run)
    [listed] = await questions.open_decisions(journal.client, journal.keys)
    assert listed["batch"] == "b42"
    await decide(journal, "a-1", Verdict.reject("frozen", by="carol", always=True), session="item1")
    lease2, run2, _ = await gated_run(journal, ran, root="root2", session="item2")
    await questions.register(lease2, run2)
    assert not run2.state.awaiting
    assert list(run2.state.tool_results.values())[0].content == "deploy: rejected: frozen"


async def test_an_approval_past_its_timeout_is_rejected_by_the_reaper(journal: Journal):
    ran: list[str] = []
    lease, run, team = await gated_run(journal, ran, limit=0.05)
    await questions.register(lease, run)
    deadline = time.monotonic() + 30
    while not await questions.expire_due(journal.client, journal.keys, ["root"], retention=journal.settings.retention,
                                         requeue_after=0, resume=lambda *_: _noop()):
        assert time.monotonic() < deadline
    again = await resumed(journal, lease, run, team)
    assert ran == []
    assert again.agent.chat.messages()[-1].text_content() == "done: deploy: rejected: approval timed out"


async def _noop() -> None:
    return None


async def test_answering_an_approval_with_neither_yes_nor_no_is_a_usage_error(journal: Journal):
    lease, run, _ = await gated_run(journal, [])
    await questions.register(lease, run)
    s = journal.settings
    with pytest.raises(UsageError, match="a-1 of session s is an approval: answer approve"):
        await questions.answer(journal.client, journal.keys, "s", "a-1", "perhaps", retention=s.retention,
                               requeue_after=0)


async def test_the_listing_drops_an_index_entry_whose_decision_is_gone(journal: Journal):
    lease, run, _ = await gated_run(journal, [])
    await questions.register(lease, run)
    await journal.client.delete(journal.keys.tree_questions("root"))  # its tree expired, say
    assert await questions.open_decisions(journal.client, journal.keys) == []
    assert await journal.client.zcard(journal.keys.decisions("approval")) == 0


async def test_the_scanner_of_shard_0_sets_the_pending_decisions_gauge(journal: Journal):
    lease, run, _ = await gated_run(journal, [])
    await questions.register(lease, run)

    async def never(name: str, args: list[str], kwargs: dict[str, str]) -> None:
        raise AssertionError("nothing is due")

    await Reaper(journal, never, "fp", name="solo").scan()
    assert REGISTRY.get_sample_value("shelly_decisions_pending", {"kind": "approval"}) == 1
    assert REGISTRY.get_sample_value("shelly_decisions_pending", {"kind": "question"}) == 0


async def test_a_steering_message_is_read_past_the_cursor_only_when_the_count_says_so(journal: Journal):
    _, run, _ = await gated_run(journal, [])
    s = journal.settings
    assert await post(journal.client, journal.keys, "root", SteerMessage(text="one"), retention=s.retention) == (
        "running", 1)
    known: list[int | None] = [0]
    inbox = RedisInbox(journal.client, journal.keys, lambda: known[0])
    assert await inbox.unread(run) == []  # the run has not read the count yet: no read of the inbox
    assert [m.text for m in await inbox.unread(run, fresh=True)] == ["one"]
    known[0] = 1
    run.state.steered = 1
    assert await inbox.unread(run) == []


async def test_steering_a_run_that_has_ended_delivers_nothing(journal: Journal):
    lease, _, _ = await gated_run(journal, [])
    await lease.finish("done", {"agent": "ops"})
    s = journal.settings
    assert await post(journal.client, journal.keys, "root", SteerMessage(text="late"), retention=s.retention) == (
        "ended", 0)
    assert await journal.client.exists(journal.keys.run_steer("root")) == 0
