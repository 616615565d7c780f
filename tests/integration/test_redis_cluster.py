"""Every script and transaction against a real Redis Cluster (three local nodes): the journal and
its leases, the reaper, cancel, the blackboard, the task board, cooldowns and saved sessions all
keep each script and MULTI to one hash slot (DESIGN §3 rule 14), so none meets ``CROSSSLOT``."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from shelly_dist.agent import ChildRequest, DelegateEntry, RunState
from shelly_dist.agent.limits import BudgetScope, Charge, Limits
from shelly_dist.agent.slots import Acquired
from shelly_dist.chats import Message, Role
from shelly_dist.engine.redis_sessions import RedisSessionStore
from shelly_dist.engine.sessions import SessionInfo
from shelly_dist.redisio.connection import connect, is_cluster
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.children.cancel import cancel_session, cancel_tree
from shelly_dist.runtime.celery.children.handoff import hand_off
from shelly_dist.runtime.celery.children.policy import PoolPolicy
from shelly_dist.runtime.celery.client.events import read_events
from shelly_dist.runtime.celery.journal import Journal, child_key
from shelly_dist.runtime.celery.journal.renewer import Renewer
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.runtime.celery.worker.reaper import Reaper
from shelly_dist.runtime.redis_cooldown import RedisCooldownStore
from shelly_dist.state.limits import RedisLedger
from shelly_dist.state.redis import RedisStore
from shelly_dist.tasks.redis import RedisBoard
from shelly_dist.testing.model_server import ModelServer, Reply
from shelly_dist.workspace.redis import RedisDueIndex, RedisWorkspace

from .cluster import BROKER_DB, NEVER_IN_TIME, Cluster, complete, delegate, scripted, slow_team, wait_until
from .test_questions import finished, open_questions, tool_results

# several `shelly` start-ups per test: one took 111 s at load 12, past the 120 s default
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
async def journal(redis_cluster_url: str) -> AsyncIterator[Journal]:
    client = connect(redis_cluster_url)
    prefix = f"shelly-test:{uuid.uuid4().hex[:12]}:"
    settings = RuntimeSettings(broker_url="redis://127.0.0.1:6379/5", redis_url=redis_cluster_url,
                               key_prefix=prefix, lease=1.0, requeue_after=0.5)
    yield Journal(client, settings)
    await client.aclose()


def child(i: int) -> ChildRequest:
    return ChildRequest(key=f"call_1:{i}", tool_call_id="call_1", index=i, agent="w", task=f"t{i}", depth=1,
                        visited=["lead", "w"], parent_run_id="root1", parent_agent="lead")


def step_events(text: str) -> str:
    return json.dumps([{"kind": "message", "agent": "lead", "session_id": "sess-1", "data": {"text": text}}])


async def stream_texts(journal: Journal, session: str) -> list[str]:
    out = []
    async for _, event in read_events(journal.client, journal.keys, session):
        out.append(str(event.data.get("text")))
    return out


async def test_the_client_factory_makes_a_cluster_client_for_a_cluster_url(journal: Journal) -> None:
    assert is_cluster(journal.client) and journal.clustered


async def test_a_delegating_tree_runs_every_journal_script_on_a_cluster(journal: Journal) -> None:
    await journal.create_root("root1", agent="lead", session="sess-1", mode="worker", task="go", fingerprint="fp")
    claim = await journal.claim("root1", "root1", "tok-root", "w0", session="sess-1", agent="lead")
    assert claim.outcome == "ok" and claim.lease is not None
    parent = claim.lease
    assert parent.record.instance_n == 1
    assert await parent.renew()
    state = RunState(run_id="root1", config_name="lead", instance_name="lead-1")
    count, canceled = await parent.checkpoint(0, state, [Message.text("u", Role.USER, "go")], "running",
                                              step_events("step 1"))
    assert (count, canceled) == (1, False)
    ids, to_start = await parent.expect([child(0), child(1)], 1, "fp")
    assert to_start == ids
    assert await parent.release() == 2
    for i, cid in enumerate(ids):
        got = await journal.claim(cid, "root1", f"tok-{i}", "w1", session="sess-1", agent="w")
        assert got.lease is not None, got.outcome
        left, mode = await got.lease.finish("done", DelegateEntry(agent="w", result=f"r{i}").to_json(),
                                            events=step_events(f"child {i} done"))
        assert (left, mode) == (1 - i, "worker")
    resumed = await journal.claim("root1", "root1", "tok-root-2", "w0")
    assert resumed.lease is not None
    await resumed.lease.finish("done", DelegateEntry(agent="lead", result="all").to_json(),
                               events=step_events("root done"))
    assert (await journal.fields("root1"))["status"] == "done"
    assert await stream_texts(journal, "sess-1") == ["step 1", "child 0 done", "child 1 done", "root done"]


async def test_a_repeated_finish_on_a_cluster_appends_its_events_once(journal: Journal) -> None:
    await journal.create_root("root2", agent="lead", session="sess-2", mode="worker", task="go", fingerprint="fp")
    lease = (await journal.claim("root2", "root2", "tok", "w0")).lease
    assert lease is not None
    await lease.finish("done", DelegateEntry(agent="lead", result="x").to_json(), events=step_events("end"))
    assert await lease.finish("done", DelegateEntry(agent="lead", result="x").to_json(),
                              events=step_events("end")) == (-1, "")
    assert await stream_texts(journal, "sess-2") == ["end"]


async def test_a_coordinator_root_and_a_dropped_lease_work_on_a_cluster(journal: Journal) -> None:
    owner = await journal.open_root("root5", agent="lead", session="sess-7", task="go", fingerprint="fp")
    state = RunState(run_id="root5", config_name="lead", instance_name="lead")
    assert await owner.checkpoint(0, state, [Message.text("u", Role.USER, "go")], "running") == (1, False)
    ids, _ = await owner.expect([child(0)], 1, "fp")
    first = (await journal.claim(ids[0], "root5", "tok-1", "w1")).lease
    assert first is not None
    await first.drop()
    again = await journal.claim(ids[0], "root5", "tok-2", "w2")
    assert again.outcome == "ok", "a dropped lease frees the run at once"


async def test_the_renewer_keeps_the_leases_of_two_trees_in_two_slots_on_a_cluster(journal: Journal) -> None:
    """One renewer thread, two trees in two hash slots: a single ``RENEW`` for both would fail with
    ``CROSSSLOT``, so the renewer calls it once per tree, and both leases outlive their length."""
    roots = ["rootA", "rootB"]
    assert len({key_slot(journal.keys.run_lease(r).encode()) for r in roots}) == 2
    leases = []
    for root in roots:
        await journal.create_root(root, agent="lead", session="sess-r", mode="worker", task="go", fingerprint="fp")
        claim = await journal.claim(root, root, f"tok-{root}", "w0")
        assert claim.lease is not None, claim.outcome
        leases.append(claim.lease)
    claimed = {r: await journal.client.zscore(journal.keys.tree_deadlines(r), r) for r in roots}
    renewer = Renewer(journal.settings, journal.keys, clustered=journal.clustered)  # a sync cluster client
    for lease in leases:
        renewer.hold(lease, asyncio.current_task())  # type: ignore[arg-type]
    try:
        async def renewed_twice() -> bool:  # a deadline two leases past the claim's: renewed, not expired
            scores = {r: await journal.client.zscore(journal.keys.tree_deadlines(r), r) for r in roots}
            return all((scores[r] or 0) >= claimed[r] + 2 * journal.settings.lease_ms for r in roots)

        deadline = asyncio.get_running_loop().time() + 30
        while not await renewed_twice():
            assert asyncio.get_running_loop().time() < deadline, "the leases were not renewed"
            await asyncio.sleep(0.1)
        assert [await journal.client.get(journal.keys.run_lease(r)) for r in roots] == [f"tok-{r}" for r in roots]
        assert not any(lease.lost for lease in leases)
    finally:
        for lease in leases:
            renewer.release(lease)
        renewer.close()


async def test_fail_fast_stops_and_max_concurrency_slots_work_on_a_cluster(journal: Journal) -> None:
    await journal.create_root("root6", agent="lead", session="sess-8", mode="worker", task="go", fingerprint="fp")
    lease = (await journal.claim("root6", "root6", "tok", "w0")).lease
    assert lease is not None
    ids, _ = await lease.expect([child(0), child(1)], 1, "fp")
    policy = PoolPolicy(journal.client, journal.keys)
    assert await policy.stop_siblings("root6", child_key(child(0), 1)) == [ids[1]]
    assert await policy.stop_reason(ids[1])
    slots = policy.slots
    assert await slots.try_acquire("sess-8", "w", ids[0], 1, 5.0) == Acquired.NEW
    assert await slots.try_acquire("sess-8", "w", ids[1], 1, 5.0) == Acquired.FULL
    assert await slots.renew("sess-8", "w", ids[0], 5.0)
    await slots.release("sess-8", "w", ids[0])
    assert await slots.try_acquire("sess-8", "w", ids[1], 1, 5.0) == Acquired.NEW


async def test_a_root_with_an_idempotency_key_is_created_once_on_a_cluster(journal: Journal) -> None:
    made = [await journal.create_root("b0ce", agent="lead", session="sess-9", mode="worker", task=t,
                                      fingerprint="fp", if_absent=True) for t in ("first", "second")]
    assert made == [True, False]
    assert (await journal.fields("b0ce"))["task"] == "first"


async def test_a_handoff_creates_its_peer_and_appends_its_events_once_on_a_cluster(journal: Journal) -> None:
    await journal.create_root("root7", agent="lead", session="sess-10", mode="worker", task="go", fingerprint="fp")
    parent = (await journal.claim("root7", "root7", "tok", "w0")).lease
    assert parent is not None
    ids, _ = await parent.expect([child(0)], 1, "fp")
    lease = (await journal.claim(ids[0], "root7", "tok-c", "w1")).lease
    assert lease is not None
    peer = child(0).model_copy(update={"agent": "w2", "handoffs": 1})
    result = DelegateEntry(agent="w", result="over to w2").to_json()
    peer_id, queued = await hand_off(lease, peer, result, events=step_events("handed off"))
    assert queued and (await journal.fields(peer_id))["status"] == "queued"
    assert await hand_off(lease, peer, result, events=step_events("handed off")) == (peer_id, True)
    assert await stream_texts(journal, "sess-10") == ["handed off"]


async def test_tree_limits_reserve_across_nested_scopes_on_a_cluster(journal: Journal) -> None:
    ledger = RedisLedger(journal.client, journal.keys, retention=600)
    scopes = [BudgetScope(id="outer1", limits=Limits(model_requests=2)),
              BudgetScope(id="inner2", limits=Limits(model_requests=1))]
    assert await ledger.reserve(scopes, Charge(model_requests=1)) is None
    refusal = await ledger.reserve(scopes, Charge(model_requests=1))
    assert refusal is not None and refusal.scope == "inner2"
    await ledger.settle(scopes, Charge(model_requests=1), Charge(model_requests=1, total_tokens=5))
    assert (await ledger.spent("inner2", "outer1"))[0] == Charge(model_requests=1, total_tokens=5)


async def test_the_reaper_re_enqueues_a_lapsed_run_on_a_cluster(journal: Journal) -> None:
    await journal.create_root("root3", agent="lead", session="sess-3", mode="worker", task="go", fingerprint="fp")
    sent: list[tuple[str, list[Any]]] = []

    async def enqueue(name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        sent.append((name, args))

    reaper = Reaper(journal, enqueue, "fp")
    deadline = asyncio.get_running_loop().time() + 30
    while not sent and asyncio.get_running_loop().time() < deadline:
        await reaper.scan()
        await asyncio.sleep(0.2)
    assert sent and sent[0][1] == ["root3", "root3"]


async def test_cancel_by_run_id_and_by_session_find_the_tree_on_a_cluster(journal: Journal) -> None:
    await journal.create_root("root4", agent="lead", session="sess-4", mode="worker", task="go", fingerprint="fp")
    lease = (await journal.claim("root4", "root4", "tok", "w0")).lease
    assert lease is not None
    ids, _ = await lease.expect([child(0)], 1, "fp")
    await lease.release()
    assert await cancel_tree(journal.client, journal.keys, "root4") == sorted(["root4", *ids])
    assert (await journal.fields(ids[0]))["status"] == "canceled"
    assert await journal.is_canceled("root4")
    assert await cancel_session(journal.client, journal.keys, "sess-4") == ["root4"]


async def test_blackboard_writes_and_watches_work_on_a_cluster(journal: Journal) -> None:
    store = RedisStore(journal.client, journal.keys, session="sess-5")
    watch = asyncio.create_task(store.watch("k", timeout=30))
    await asyncio.sleep(0)
    await store.set("k", {"v": 1})
    assert (await watch).value == {"v": 1}
    assert (await store.compare_and_set("k", {"v": 2}, 1)) is not None
    assert await store.delete("k")


async def test_task_board_mutations_work_on_a_cluster(journal: Journal) -> None:
    board = RedisBoard(journal.client, journal.keys, session="sess-6")
    task = await board.create("write the report", created_by="lead")
    done = asyncio.create_task(board.watch_completed(task.id, timeout=30))
    await board.claim(task.id, "w")
    await board.update(task.id, status="completed")
    assert (await done).status == "completed"


async def test_a_team_workspace_and_its_schedules_work_on_a_cluster(journal: Journal) -> None:
    ws = RedisWorkspace(journal.client, journal.keys, session="sess-9")
    await ws.join(["coder", "reviewer"])
    await ws.send("coder", "@reviewer " + "x" * 1300)  # smart send: a resource too
    assert await ws.ack("reviewer", 1) == 1
    assert await ws.acquire_wake("coder", "t", 5) and await ws.renew_wake("coder", "t", 5)
    await ws.release_wake("coder", "t")
    await ws.doc_append("coder", "notes.md", "a")
    proposal = await ws.propose("coder", type="decision", title="x", options=["a", "b"], quorum=1)
    assert (await ws.vote("reviewer", proposal.id, "a")).status == "resolved"
    due = RedisDueIndex(journal.client, journal.keys)
    await due.schedule("sess-9/coder", 1.0)
    [(entry, score)] = await due.due(2.0)
    assert await due.claim(entry, score, 10.0) and not await due.claim(entry, score, 10.0)


async def test_cooldowns_and_saved_sessions_work_on_a_cluster(journal: Journal) -> None:
    cooldowns = RedisCooldownStore(journal.client, prefix=journal.keys.prefix)
    assert await cooldowns.record_failure("p", billing=False, now=1000.0) > 1000.0
    sessions = RedisSessionStore(lambda: journal.client, Keys(journal.keys.prefix))
    info = await sessions.save(SessionInfo(id="0123456789abcdef", agent="lead"), [Message.text("u", Role.USER, "hi")])
    assert [s.id for s in await sessions.list()] == [info.id]


# -- end to end: `shelly worker` and the CLI with their state on the cluster --------------------


@pytest.fixture
def on_cluster(tmp_path: Path, redis_url: str, redis_cluster_url: str) -> Iterator[Cluster]:
    """A project whose state lives on the Redis Cluster; the broker stays a single Redis (kombu has
    no cluster transport): the shared one, database 5, as every integration cluster."""
    c = Cluster(tmp_path, redis_url=redis_cluster_url, broker_url=f"{redis_url.rsplit('/', 1)[0]}/{BROKER_DB}")
    try:
        yield c
    finally:
        c.stop()


def test_a_delegating_run_on_the_pool_keeps_its_state_on_a_cluster(on_cluster: Cluster) -> None:
    on_cluster.write_config(
        [scripted(
            orchestrator=[delegate(("worker", "first part"), ("worker", "second part")), "combined answer"],
            worker=[{**complete("finished {task}"), "text": "working on {task}", "delay": 0.2}],
        )],
        [{"name": "orchestrator", "description": "splits work", "options": {"max_delegation_depth": 1}},
         {"name": "worker", "description": "does one part"}],
    )
    host = on_cluster.start_worker("w1")
    out = on_cluster.shelly("run", "do it")
    assert out.returncode == 0, f"{out.stderr}\n{on_cluster.worker_log()}"
    assert out.stdout.strip() == "combined answer"
    started = [line for line in out.stderr.splitlines() if "started on" in line]
    assert len(started) == 2 and all(host in line for line in started), out.stderr  # the live view
    session = on_cluster.session_ids()[0]
    runs = on_cluster.runs(session)
    assert len(runs) == 3 and {r["status"] for r in runs} == {"done"}
    events = on_cluster.events(session)
    children = {r["id"] for r in runs if r["parent"]}
    finished = [e["data"]["entry"]["result"] for e in events if e["kind"] == "run_finished" and e["run_id"] in children]
    assert sorted(finished) == ["finished first part", "finished second part"]
    for child in (r for r in runs if r["parent"]):  # each child's events in step order
        kinds = [e["kind"] for e in events if e.get("run_id") == child["id"]]
        assert kinds.index("run_started") < kinds.index("run_finished"), kinds


def test_shelly_events_follow_reads_the_whole_stream_from_a_cluster(on_cluster: Cluster) -> None:
    on_cluster.write_config([scripted(solo=["hello from the cluster"])], [{"name": "solo"}])
    on_cluster.start_worker("w1")
    (on_cluster.root / "in.jsonl").write_text(json.dumps({"id": "one", "agent": "solo", "task": "hi"}) + "\n")
    out = on_cluster.shelly("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet")
    assert out.returncode == 0, f"{out.stderr}\n{on_cluster.worker_log()}"
    session = on_cluster.session_ids()[0]
    expected = on_cluster.events(session)
    assert [e["kind"] for e in expected][-1] == "run_finished"
    follower = on_cluster.popen("events", "--session", session, "--follow", "--json")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(follower.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_until(lambda: len(lines) >= len(expected), 60, f"{len(expected)} followed events")
        assert follower.poll() is None, "--follow must keep waiting for more"
    finally:
        follower.terminate()
        follower.wait(20)
    assert [json.loads(line)["kind"] for line in lines[:len(expected)]] == [e["kind"] for e in expected]


def test_cancel_by_run_id_finds_the_tree_on_a_cluster(on_cluster: Cluster) -> None:
    with ModelServer(format="openai", default=Reply(text="never in time", delay=NEVER_IN_TIME)) as server:
        slow_team(on_cluster, server)
        on_cluster.start_worker("w1")
        coordinator = on_cluster.popen("run", "cancel me", "--json")
        try:
            server.wait_for_requests(2, timeout=60)
            session = on_cluster.session_ids()[0]
            child = next(r for r in on_cluster.runs(session) if r["parent"])
            out = on_cluster.shelly("cancel", child["id"])
            assert out.returncode == 0, out.stderr
            wait_until(lambda: all(r["status"] == "canceled" for r in on_cluster.runs(session)), 30,
                       "every run canceled")
            coordinator.wait(30)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
        assert coordinator.returncode == 130


def asking_team(cluster: Cluster, **asker_options: str) -> None:
    """``lead`` delegates to ``asker``, who asks the user a question, then completes."""
    ask = {"tool_calls": [{"name": "ask_user", "arguments": {"question": "Which colour?", "options": ["red", "blue"]}}]}
    cluster.write_config(
        [scripted(lead=[delegate(("asker", "pick a colour")), "lead done"], asker=[ask, complete("asked")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}},
         {"name": "asker", "options": asker_options}],
    )


def test_ask_user_on_the_pool_is_answered_with_shelly_answer_on_a_cluster(on_cluster: Cluster) -> None:
    asking_team(on_cluster)
    on_cluster.start_worker("w1")
    run = on_cluster.popen("run", "colour job", "--agent", "lead", "--json", "--quiet")
    try:
        session = on_cluster.session_ids()[0]
        (question,) = wait_until(lambda: open_questions(on_cluster, session), 90, "the asker's question")
        assert (question["id"], question["text"]) == ("q-1", "Which colour?")
        answered = on_cluster.shelly("answer", "--session", session, "q-1", "blue")
        assert answered.returncode == 0, answered.stderr
        out = finished(run, on_cluster)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert out["reply"] == "lead done"
    asker = next(r for r in on_cluster.runs(session) if r["agent"] == "asker")
    assert any(p.get("content") == "blue" for p in tool_results(on_cluster, asker["id"]))
    assert open_questions(on_cluster, session) == []


def test_a_question_past_its_timeout_is_answered_by_the_reaper_on_a_cluster(on_cluster: Cluster) -> None:
    asking_team(on_cluster, question_timeout="1s")
    on_cluster.start_worker("w1")
    out = on_cluster.shelly("run", "colour job", "--agent", "lead", "--json", "--quiet")
    assert out.returncode == 0, f"{out.stderr}\n{on_cluster.worker_log()}"
    session = json.loads(out.stdout)["session"]
    asker = next(r for r in on_cluster.runs(session) if r["agent"] == "asker")
    errors = [p for p in tool_results(on_cluster, asker["id"]) if p.get("is_error")]
    assert errors and errors[0]["content"] == "ask_user: no answer to q-1 within 1s (options.question_timeout)"


def test_interactive_delegation_asks_answers_and_times_out_on_a_cluster(on_cluster: Cluster) -> None:
    # mid (a worker run) delegates interactively: asker's question joins mid's round (ASK_PARENT),
    # slowpoke's model call outlasts question_timeout (the reaper's EXPIRE stops it), mid's answer
    # reaches asker on a worker (ANSWER_CHILD): every script of interactive delegation runs on the
    # cluster.
    ask = {"tool_calls": [{"name": "request_input", "arguments": {"question": "Which colour?"}}]}
    tasks = [{"agent": a, "task": f"{a} task", "context": "ctx", "mode": "interactive"} for a in ("asker", "slowpoke")]
    on_cluster.write_config(
        [scripted(lead=[delegate(("mid", "plan it")), "lead done"],
                  mid=[{"tool_calls": [{"name": "delegate", "arguments": {"tasks": tasks}}]},
                       {"tool_calls": [{"name": "answer_delegation_questions", "arguments": {
                           "answers": [{"delegation_id": "d-1", "answer": "blue"}]}}]},
                       complete("mid done")],
                  asker=[ask, complete("painted it blue")], slowpoke=[{"text": "too slow", "delay": 30}])],
        [{"name": "lead", "options": {"max_delegation_depth": 2}},
         {"name": "mid", "options": {"max_delegation_depth": 2, "interaction_mode": "interactive",
                                     "question_timeout": "1s"}},
         {"name": "asker"}, {"name": "slowpoke"}],
    )
    on_cluster.start_worker("w1", concurrency=2)
    out = on_cluster.shelly("run", "go", "--json", "--quiet")
    assert out.returncode == 0, f"{out.stderr}\n{on_cluster.worker_log()}"
    assert json.loads(out.stdout)["reply"] == "lead done"
    session = on_cluster.session_ids()[0]
    runs = {r["agent"]: r for r in on_cluster.runs(session)}
    keys = Keys(on_cluster.prefix)
    journal = on_cluster.redis.lrange(keys.run_msgs(runs["mid"]["id"]), 0, -1)
    mid_results = [p["content"] for m in map(json.loads, journal) if m["role"] == "tool" for p in m["parts"]]
    asked, answered = (json.loads(r) for r in mid_results[:2])
    assert asked[0]["pending_question"]["content"] == "Which colour?"
    assert asked[1] == {"agent": "slowpoke", "error": "question timeout (1s) exceeded for delegation d-2"}
    assert answered == [{"agent": "asker", "result": "painted it blue",
                         "completion": {"status": "completed", "summary": "painted it blue"}}]
    wait_until(lambda: {r["agent"]: r["status"] for r in on_cluster.runs(session)}["slowpoke"] == "canceled", 60,
               "the timed-out child canceled")
