"""The distributed runtime end to end: real Redis, real ``shelly worker`` subprocesses, the CLI as
the coordinator (DESIGN §3; the issue's "done when" list)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shelly_dist.agent.run import OUTCOME_UNKNOWN
from shelly_dist.redisio.keys import Keys
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

from .cluster import NEVER_IN_TIME, Cluster, complete, delegate, scripted, slow_team, wait_until

pytestmark = pytest.mark.integration


def run_json(cluster: Cluster, task: str, *extra: str, timeout: float = 120) -> dict:
    out = cluster.shelly("run", task, "--json", *extra, timeout=timeout)
    assert out.returncode == 0, f"stdout:{out.stdout}\nstderr:{out.stderr}\n{cluster.worker_log()}"
    return json.loads(out.stdout)


def two_task_team(cluster: Cluster) -> None:
    cluster.write_config(
        [scripted(
            orchestrator=[delegate(("worker", "first part"), ("worker", "second part")), "combined answer"],
            worker=[{**complete("finished {task}"), "text": "working on {task}", "delay": 0.2}],
        )],
        [{"name": "orchestrator", "description": "splits work", "options": {"max_delegation_depth": 1}},
         {"name": "worker", "description": "does one part"}],
    )




def test_two_delegated_tasks_run_on_the_workers_and_return_in_input_order(cluster: Cluster):
    check_two_task_delegation(cluster)


def test_two_delegated_tasks_with_rabbitmq_as_broker(rabbit_cluster: Cluster):
    check_two_task_delegation(rabbit_cluster)


def test_live_view_on_stderr_shows_the_remote_agents_and_their_workers(cluster: Cluster):
    two_task_team(cluster)
    host = cluster.start_worker("w1")
    out = cluster.shelly("run", "do it")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "combined answer"
    started = [line for line in out.stderr.splitlines() if "started on" in line]
    assert len(started) == 2 and all(host in line and "worker-" in line for line in started)


def check_two_task_delegation(cluster: Cluster) -> None:
    two_task_team(cluster)
    hosts = {cluster.start_worker("w1"), cluster.start_worker("w2")}
    out = run_json(cluster, "do it")
    assert out["reply"] == "combined answer"
    events = cluster.events(out["session"])
    children = [e for e in events if e["data"].get("parent")]  # the root reports its own start too
    started = [e for e in children if e["kind"] == "run_started"]
    assert len(started) == 2 and {e["data"]["worker"] for e in started} <= hosts
    child_runs = {e["run_id"] for e in started}
    finished = {e["agent"]: e["data"]["entry"]["result"] for e in events
                if e["kind"] == "run_finished" and e["run_id"] in child_runs}
    assert sorted(finished.values()) == ["finished first part", "finished second part"]
    runs = cluster.runs(out["session"])
    assert {r["status"] for r in runs} == {"done"}
    tool_results = [e for e in events if e["kind"] == "message_added" and e["data"].get("role") == "tool"
                    and e["agent"] == "orchestrator"]
    entries = json.loads(tool_results[0]["data"]["text"])
    assert [e["result"] for e in entries] == ["finished first part", "finished second part"]


def test_depth_three_chain_and_fan_out_complete_on_one_single_slot_worker(cluster: Cluster):
    check_chain_and_fan_out(cluster)


def test_depth_three_chain_and_fan_out_with_rabbitmq_as_broker(rabbit_cluster: Cluster):
    check_chain_and_fan_out(rabbit_cluster)


def check_chain_and_fan_out(cluster: Cluster) -> None:
    cluster.write_config(
        [scripted(
            orchestrator=[delegate(("a", "chain down")), delegate(("fan", "spread out")), "all done"],
            a=[delegate(("b", "deeper")), complete("a done")],
            b=[delegate(("c", "deepest")), complete("b done")],
            c=[complete("c done")],
            fan=[delegate(*[("leaf", f"job {i}") for i in range(10)]), complete("fanned out")],
            leaf=[complete("leaf {task}")],
        )],
        [{"name": "orchestrator", "options": {"max_delegation_depth": 4}},
         {"name": "a", "options": {"max_delegation_depth": 4}},
         {"name": "b", "options": {"max_delegation_depth": 4}},
         {"name": "c"},
         {"name": "fan", "options": {"max_delegation_depth": 4}},
         {"name": "leaf"}],
    )
    cluster.start_worker("solo", concurrency=1)
    out = run_json(cluster, "go deep")
    assert out["reply"] == "all done"
    runs = cluster.runs(out["session"])
    assert len(runs) == 1 + 3 + 1 + 10
    assert {r["status"] for r in runs} == {"done"}
    assert max(int(r["depth"]) for r in runs) == 3
    waited = [e for e in cluster.events(out["session"]) if e["kind"] == "run_waiting"]
    assert waited, "parents on the worker must suspend, not block the single slot"


def test_worker_agent_writes_the_blackboard_that_the_coordinator_reads(cluster: Cluster):
    cluster.write_config(
        [scripted(
            lead=[delegate(("scribe", "note it")),
                  {"tool_calls": [{"name": "shared_state_get", "arguments": {"key": "finding"}}]},
                  "read it"],
            scribe=[{"tool_calls": [{"name": "shared_state_set",
                                     "arguments": {"key": "finding", "value": {"answer": 42}}}]},
                    complete("noted")],
        )],
        [{"name": "lead", "toolboxes": ["state"], "options": {"max_delegation_depth": 1}},
         {"name": "scribe", "toolboxes": ["state"]}],
    )
    cluster.start_worker("w1")
    out = run_json(cluster, "record and read")
    events = cluster.events(out["session"])
    tool_texts = [e["data"]["text"] for e in events
                  if e["kind"] == "message_added" and e["data"].get("role") == "tool" and e["agent"] == "lead"]
    assert json.loads(tool_texts[-1]) == {"answer": 42}
    got = cluster.shelly("state", "get", "finding", "--session", out["session"])
    assert got.returncode == 0 and json.loads(got.stdout)["value"] == {"answer": 42}


def test_two_sessions_never_see_each_others_blackboard(cluster: Cluster):
    cluster.write_config(
        [scripted(reader=[{"tool_calls": [{"name": "shared_state_get", "arguments": {"key": "secret"}}]}, "done"])],
        [{"name": "reader", "toolboxes": ["state"]}],
    )
    first = run_json(cluster, "read")
    set_out = cluster.shelly("state", "set", "secret", '"only here"', "--session", first["session"])
    assert set_out.returncode == 0, set_out.stderr
    second = run_json(cluster, "read")
    assert second["session"] != first["session"]
    events = cluster.events(second["session"])
    result = next(e for e in events if e["kind"] == "message_added" and e["data"].get("role") == "tool")
    assert "key not found" in result["data"]["text"]


def _slow_child_server(first_requests: list[RecordedRequest]) -> ModelServer:
    """The child's first call answers a tool call at once; its second call hangs until killed."""

    def respond(req: RecordedRequest) -> Reply | None:
        messages = req.body.get("messages", [])
        assistant_turns = sum(1 for m in messages if m.get("role") == "assistant")
        if assistant_turns == 0:
            first_requests.append(req)
            return Reply(text="", tool_calls=[{"name": "list_notes_nowhere", "arguments": {}}])
        if len(first_requests) == 1 and not getattr(respond, "slowed", False):
            respond.slowed = True  # type: ignore[attr-defined]
            return Reply(text="too late", delay=60)
        return Reply(text="finished after the crash")

    return ModelServer(format="openai", responder=respond)


def test_killed_worker_mid_step_completes_elsewhere_without_repeating_journaled_steps(cluster: Cluster):
    first: list[RecordedRequest] = []
    with _slow_child_server(first) as server:
        cluster.write_config(
            [scripted("lead", lead=[delegate(("slowpoke", "take your time")), "lead done"]),
             {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
              "rate_limit": {"max_retries": 0}}],
            [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
             {"name": "slowpoke", "provider": "mock"}],
        )
        a, b = cluster.start_worker("wa"), cluster.start_worker("wb")
        coordinator = cluster.popen("run", "crash test", "--json")
        try:
            server.wait_for_requests(2, timeout=60)  # the child's second (slow) call is in flight
            child = wait_until(
                lambda: next((r for r in cluster.redis.scan_iter(match=cluster.prefix + "run:*")
                              if r.count(":") == 3 and cluster.redis.hget(r, "agent") == "slowpoke"), None),
                30, "the child's run record")
            holder = cluster.redis.hget(child, "worker")
            assert holder in (a, b)
            cluster.kill_worker(holder)
            stdout, stderr = coordinator.communicate(timeout=150)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
        assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
        out = json.loads(stdout)
        assert out["reply"] == "lead done"
        assert len(first) == 1, "the journaled first step must not call the model again"
        assert cluster.redis.hget(child, "worker") != holder
        assert cluster.redis.hget(child, "status") == "done"


def test_cancelling_a_session_cancels_every_run_and_stops_model_calls(cluster: Cluster):
    with ModelServer(format="openai", default=Reply(text="never in time", delay=NEVER_IN_TIME)) as server:
        slow_team(cluster, server, ("one", "two", "three"))
        cluster.start_worker("w1")
        cluster.start_worker("w2")
        coordinator = cluster.popen("run", "never finishes", "--json")
        try:
            server.wait_for_requests(3, timeout=60)
            session = cluster.session_ids()[0]
            cancel = cluster.shelly("cancel", "--session", session)
            assert cancel.returncode == 0, cancel.stderr
            seen = len(server.requests)
            wait_until(lambda: all(r["status"] == "canceled" for r in cluster.runs(session)), 30,
                       "every run canceled")
            coordinator.wait(30)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
        err = coordinator.stderr.read() if coordinator.stderr else ""
        assert coordinator.returncode == 130, err
        assert "canceled (by `shelly cancel`" in err and "interrupted" not in err  # not what Ctrl-C says
        assert len(cluster.runs(session)) == 4
        assert len(server.requests) == seen, "no model request after the cancel"


def test_batch_of_a_hundred_runs_on_two_workers_and_a_rerun_does_nothing(cluster: Cluster):
    cluster.write_config(
        [scripted(solver=[{"text": "answer to {task}", "delay": 0.05}])],
        [{"name": "solver", "description": "answers one question"}],
    )
    cluster.start_worker("w1")
    cluster.start_worker("w2")
    tasks = cluster.root / "in.jsonl"
    lines = [json.dumps({"id": f"item-{i}", "task": f"question {i}"}) for i in range(100)]
    lines.insert(50, json.dumps({"id": "ghost-item", "agent": "ghost", "task": "nobody answers"}))
    tasks.write_text("\n".join(lines) + "\n")
    output = cluster.root / "out.jsonl"
    first = cluster.shelly("batch", "--tasks", str(tasks), "--output", str(output), "--quiet", timeout=300)
    assert first.returncode == 1, first.stderr  # one item failed
    records = {r["id"]: r for r in map(json.loads, output.read_text().splitlines())}
    assert len(records) == 101
    assert records["ghost-item"]["status"] == "error" and "ghost" in records["ghost-item"]["error"]
    done = [r for r in records.values() if r["status"] == "completed"]
    assert len(done) == 100 and records["item-7"]["reply"] == "answer to question 7"
    workers = {cluster.redis.hget(Keys(cluster.prefix).run(r["run"]), "worker") for r in done}
    assert len(workers) == 2, "both workers take items"

    again = cluster.shelly("batch", "--tasks", str(tasks), "--output", str(output), "--quiet", timeout=120)
    assert again.returncode == 0, again.stderr
    assert len(output.read_text().splitlines()) == 101
    assert "skipping 101" in again.stderr


def test_pickled_message_on_the_queue_is_refused_not_executed(cluster: Cluster):
    from celery import Celery

    cluster.write_config([scripted(solo=["hi"])], [{"name": "solo"}])
    host = cluster.start_worker("w1")
    marker = cluster.prefix + "run:{pickled}"
    cluster.redis.hset(marker, mapping={"id": "pickled", "root": "pickled", "status": "queued", "agent": "solo",
                                        "session": "0123456789abcdef", "depth": "0", "task": "pwn"})
    evil = Celery("evil", broker=cluster.broker_url, set_as_current=False)
    evil.conf.task_serializer = "pickle"
    evil.conf.accept_content = ["pickle", "json"]
    evil.send_task("shelly.run_agent", args=["pickled", "pickled"], queue=cluster.queue, serializer="pickle")
    wait_until(lambda: "untrusted content" in cluster.logs[host].read_text()
               or "ContentDisallowed" in cluster.logs[host].read_text(), 30, "the worker to refuse the message")
    assert cluster.redis.hget(marker, "status") == "queued"
    evil.close()


def test_worker_with_another_config_fails_the_run_naming_both_fingerprints(cluster: Cluster):
    cluster.write_config(
        [scripted(lead=[delegate(("helper", "help")), "done"], helper=["helped"])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "helper"}],
    )
    cluster.start_worker("w1")
    # The coordinator runs with a different team (another description) but the same queue.
    other = cluster.root / "other.yaml"
    cfg = (cluster.root / ".shelly" / "config.yaml").read_text().replace("agents:", "agents:", 1)
    other.write_text(cfg.replace("name: helper", "name: helper\n  description: changed"))
    out = cluster.shelly("run", "go", "--json", "--config", str(other))
    assert out.returncode == 0, out.stderr
    events = cluster.events(json.loads(out.stdout)["session"])
    finished = next(e for e in events if e["kind"] == "run_finished" and e["agent"].startswith("helper"))
    assert "config fingerprint mismatch" in finished["data"]["entry"]["error"]
    assert "To fix: start the workers with the same config" in finished["data"]["entry"]["error"]


def _signal_a_waiting_coordinator(cluster: Cluster, sig: int, *, ends_runs: bool = True) -> tuple[str, int, str, float]:
    """Start a run whose children never answer in time, send ``sig`` to the coordinator once both
    wait on the model (then, with ``ends_runs``, wait until every run is canceled); the session,
    the exit code, stderr and the seconds from signal to exit."""
    import time

    with ModelServer(format="openai", default=Reply(text="never in time", delay=NEVER_IN_TIME)) as server:
        slow_team(cluster, server)
        cluster.start_worker("w1")
        coordinator = cluster.popen("run", "interrupt me")
        try:
            server.wait_for_requests(2, timeout=60)
            session = cluster.session_ids()[0]
            sent = time.monotonic()
            coordinator.send_signal(sig)
            _, err = coordinator.communicate(timeout=30)
            seconds = time.monotonic() - sent
            if ends_runs:
                wait_until(lambda: all(r["status"] == "canceled" for r in cluster.runs(session)), 30,
                           "every run canceled")
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
    return session, coordinator.returncode, err, seconds


def test_ctrl_c_in_the_coordinator_cancels_the_whole_tree(cluster: Cluster):
    import signal

    _, code, _, _ = _signal_a_waiting_coordinator(cluster, signal.SIGINT)
    assert code == 130


def test_sigterm_of_the_coordinator_cancels_the_whole_tree_and_exits_143(cluster: Cluster):
    import signal

    session, code, err, seconds = _signal_a_waiting_coordinator(cluster, signal.SIGTERM)
    assert code == 143, err
    assert "shelly: terminated" in err and "Traceback" not in err
    assert seconds < 15
    root = next(r for r in cluster.runs(session) if not r["parent"])
    out = cluster.shelly("cancel", root["id"])
    assert out.returncode == 0, out.stderr
    assert {r["status"] for r in cluster.runs(session)} == {"canceled"}


def test_a_canceled_childs_task_fails_with_the_reason_under_its_agents_name(cluster: Cluster):
    """What Flower shows comes from these task events: FAILURE with the reason, not SUCCESS."""
    import signal

    _signal_a_waiting_coordinator(cluster, signal.SIGINT)
    wait_until(lambda: cluster.worker_log().count("raised expected: RunEnded(") >= 2, 30, "both tasks failed")
    ended = [line for line in cluster.worker_log().splitlines() if "RunEnded(" in line]
    assert all("Task shelly.run_agent[slow][" in line and "canceled: task canceled" in line for line in ended), ended


def test_cancel_after_the_coordinator_was_killed_ends_its_root_too(cluster: Cluster):
    import signal

    session, _, _, _ = _signal_a_waiting_coordinator(cluster, signal.SIGKILL, ends_runs=False)
    root = next(r for r in cluster.runs(session) if not r["parent"])
    assert root["status"] == "running"  # nothing ends it on its own
    out = cluster.shelly("cancel", root["id"])
    assert out.returncode == 0, out.stderr
    runs = cluster.runs(session)  # the cancel returns once the root is ended
    assert next(r for r in runs if not r["parent"])["status"] == "canceled", runs
    # the children end once their worker hears of the cancel
    wait_until(lambda: all(r["status"] in ("done", "failed", "canceled") for r in cluster.runs(session)), 30,
               "every child ended")


def test_cancel_by_run_id_cancels_that_tree(cluster: Cluster):
    with ModelServer(format="openai", default=Reply(text="never in time", delay=NEVER_IN_TIME)) as server:
        slow_team(cluster, server)
        cluster.start_worker("w1")
        coordinator = cluster.popen("run", "cancel me", "--json")
        try:
            server.wait_for_requests(2, timeout=60)
            session = cluster.session_ids()[0]
            child = next(r for r in cluster.runs(session) if r["parent"])
            out = cluster.shelly("cancel", child["id"])
            assert out.returncode == 0, out.stderr
            wait_until(lambda: all(r["status"] == "canceled" for r in cluster.runs(session)), 30, "every run canceled")
            coordinator.wait(30)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
        assert coordinator.returncode == 130
        assert cluster.shelly("cancel", "no-such-run").returncode == 2


def test_prefork_worker_that_cannot_open_its_engine_fails_the_run_instead_of_hanging(cluster: Cluster):
    """The MCP server exists on the coordinator's machine but not on the worker's."""
    import os
    import subprocess
    import sys

    bindir = cluster.root / "coordinator-bin"
    bindir.mkdir()
    server = Path(__file__).parents[1] / "unit" / "tools" / "mcp" / "toolbox_server.py"
    script = bindir / "orders-mcp-server"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {server} \"$@\"\n")
    script.chmod(0o755)
    cluster.write_config(
        [scripted(lead=[delegate(("helper", "use the server")), "lead saw the failure"], helper=["never runs"])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "helper", "toolboxes": ["orders"]}],
        mcp_servers=[{"name": "orders", "command": "orders-mcp-server"}],
    )
    cluster.start_worker("prefork", concurrency=1, pool="prefork")
    env = cluster.env()
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    out = subprocess.run([sys.executable, "-m", "shelly_dist.cli.main", "run", "go", "--json"], cwd=cluster.root,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
    assert json.loads(out.stdout)["reply"] == "lead saw the failure"
    child = next(r for r in cluster.runs(json.loads(out.stdout)["session"]) if r["parent"])
    assert child["status"] == "failed" and "cannot start" in child["error"] and '"orders"' in child["error"]


def test_two_delegate_calls_in_one_reply_both_return_through_one_subscription(cluster: Cluster):
    both = {"tool_calls": [
        {"name": "delegate", "arguments": {"tasks": [{"agent": "worker", "task": "left", "context": ""}]}},
        {"name": "delegate", "arguments": {"tasks": [{"agent": "worker", "task": "right", "context": ""}]}},
    ]}
    cluster.write_config(
        [scripted(orchestrator=[both, "both back"], worker=[{**complete("did {task}"), "delay": 0.1}])],
        [{"name": "orchestrator", "options": {"max_delegation_depth": 1}}, {"name": "worker"}],
    )
    cluster.start_worker("w1")
    out = run_json(cluster, "two calls")
    assert out["reply"] == "both back"
    tool_texts = [e["data"]["text"] for e in cluster.events(out["session"])
                  if e["kind"] == "message_added" and e["data"].get("role") == "tool" and e["agent"] == "orchestrator"]
    assert [json.loads(t)[0]["result"] for t in tool_texts] == ["did left", "did right"]


def test_tool_that_killed_its_worker_is_not_run_again_and_the_model_hears_its_outcome_is_unknown(
    rabbit_cluster: Cluster,
):
    """The child's tool kills the worker process running it. RabbitMQ hands the message back at
    once, and the reaper re-enqueues the run once its lease lapses; the next worker finds the call
    journaled as started without a result and gives the model ``tool outcome unknown`` instead of
    running it again. (Before, the tool ran on every delivery until ``max_deliveries``.)"""
    import sys

    cluster = rabbit_cluster
    ran = cluster.root / "bomb-ran"
    # The program's parent is the launcher that reaps its tree (tools/builtin/_reaper.py); the
    # launcher's parent is the worker.
    kill_worker = (f"open({str(ran)!r}, 'a').write('x'); import os, signal; "
                   "launcher_stat = open(f'/proc/{os.getppid()}/stat').read(); "
                   "os.kill(int(launcher_stat.rsplit(')', 1)[1].split()[1]), signal.SIGKILL)")
    cluster.write_config(
        [scripted(lead=[delegate(("bomb", "go off")), "lead survived"],
                  bomb=[{"tool_calls": [{"name": "exec_run",
                                         "arguments": {"command": sys.executable, "args": ["-c", kill_worker]}}]},
                        "bomb defused"])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}},
         {"name": "bomb", "toolboxes": ["exec"]}],
        permissions={"trusted_commands": [sys.executable]},
    )
    coordinator = cluster.popen("run", "detonate", "--json")
    starts = 0
    try:
        while coordinator.poll() is None:
            starts += 1
            assert starts <= 3, f"workers kept dying\n{cluster.worker_log()}"
            host = cluster.start_worker(f"w{starts}", may_die=True)
            worker = cluster.workers[host]
            wait_until(lambda w=worker: w.poll() is not None or coordinator.poll() is not None,
                       120, "the worker to die or the run to end")
        stdout, stderr = coordinator.communicate(timeout=30)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
    out = json.loads(stdout)
    assert out["reply"] == "lead survived"
    assert starts == 2 and ran.read_text() == "x", "the tool ran once, on the worker it killed"
    child = next(r for r in cluster.runs(out["session"]) if r["parent"])
    assert child["status"] == "done"
    tool_texts = [e["data"]["text"] for e in cluster.events(out["session"])
                  if e["kind"] == "message_added" and e["data"].get("role") == "tool" and e["run_id"] == child["id"]]
    assert tool_texts == [OUTCOME_UNKNOWN]


def test_shelly_events_shows_the_coordinators_run_start_and_end(cluster: Cluster):
    two_task_team(cluster)
    cluster.start_worker("w1")
    out = run_json(cluster, "do it")
    root = next(r["id"] for r in cluster.runs(out["session"]) if not r["parent"])
    life = [(e["kind"], e["data"].get("status", e["data"].get("parent"))) for e in cluster.events(out["session"])
            if e["run_id"] == root and e["kind"] in ("run_started", "run_finished")]
    assert life == [("run_started", ""), ("run_finished", "done")]
