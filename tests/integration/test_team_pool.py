"""Teams that talk on a real pool (issue 24): every wake a journal root run on a real worker."""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from shelly_dist.runtime.wake import WakeSettings
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

from .cluster import Cluster, scripted, wait_until
from .keys import assert_all_keys_have_ttl

pytestmark = pytest.mark.timeout(240)

REVIEW = {
    "coder": [{"tool_calls": [{"name": "channel_send", "arguments": {"message": "@reviewer patch ready"}}]},
              "patch written"],
    "reviewer": [{"tool_calls": [{"name": "team_doc_write", "arguments": {"content": "review: approved"}}]},
                 "approved"],
}


def write_workflow(root: Path, kickoff: str = "@coder please fix the parser") -> Path:
    path = root / "review.yaml"
    path.write_text(yaml.safe_dump({"name": "review", "agents": {"coder": {"ref": "coder"},
                                                                 "reviewer": {"ref": "reviewer"}},
                                    "kickoff": kickoff}))
    return path


def wake_records(cluster: Cluster) -> list[dict[str, Any]]:
    keys = [k for k in cluster.redis.scan_iter(match=cluster.prefix + "run:{wake*") if k.count(":") == 3]
    return [cluster.redis.hgetall(k) for k in keys]


def test_a_review_workflow_runs_to_idle_on_two_workers_with_every_wake_on_a_worker(cluster: Cluster) -> None:
    cluster.write_config([scripted("team", **REVIEW)],
                         [{"name": "coder", "provider": "team", "toolboxes": ["team"]},
                          {"name": "reviewer", "provider": "team", "toolboxes": ["team"]}])
    workers = cluster.start_workers("wa", "wb")
    done = cluster.shelly("workflow", "run", str(write_workflow(cluster.root)), timeout=180)
    assert done.returncode == 0, f"{done.stderr}\n{cluster.worker_log()}"
    assert done.stdout.strip() == "review: approved"
    assert done.stderr.startswith("session ")
    assert "⏰ reviewer woken for 1 message(s)" in done.stderr  # the live view tails the workers' events
    wakes = wake_records(cluster)
    assert sorted(r["agent"] for r in wakes) == ["coder", "reviewer"]
    assert all(r["status"] == "done" and r["worker"] in workers for r in wakes)
    kinds = {(e["kind"], e["agent"]) for e in cluster.events(done.stderr.split()[1])}
    assert {("wake_started", "coder"), ("wake_finished", "reviewer"), ("inbox_ack", "reviewer"),
            ("channel_post", "user")} <= kinds
    assert_all_keys_have_ttl(cluster.redis, cluster.prefix)


def test_inline_workflow_agents_run_on_two_workers_with_their_own_model_prompt_and_steps(cluster: Cluster) -> None:
    """Workers build the inline agents from the definitions the session keeps in Redis."""
    def respond(req: RecordedRequest) -> Reply:
        if any(m.get("role") == "tool" for m in req.body["messages"]):
            return Reply(text="written")
        return Reply(tool_calls=[{"name": "team_doc_write", "arguments": {"content": "notes by scribe"}}])

    with ModelServer(format="openai", responder=respond) as server:
        mock = {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
                "rate_limit": {"max_retries": 0}}
        cluster.write_config([mock], [{"name": "coder", "provider": "mock", "toolboxes": ["team"]}])
        workers = cluster.start_workers("wa", "wb")
        path = cluster.root / "inline.yaml"
        path.write_text(yaml.safe_dump({"name": "x", "kickoff": "@scribe write the notes",
                                        "agents": {"coder": {"ref": "coder"},
                                                   "scribe": {"provider": "mock", "model": "gpt-scribe",
                                                              "system_prompt": "Scribe rules.", "max_steps": 3}}}))
        done = cluster.shelly("workflow", "run", str(path), timeout=180)
        bodies = [r.body for r in server.requests]
    assert done.returncode == 0, f"{done.stderr}\n{cluster.worker_log()}"
    assert done.stdout.strip() == "notes by scribe"
    [wake] = wake_records(cluster)
    assert wake["agent"] == "scribe" and wake["status"] == "done" and wake["worker"] in workers
    assert {b["model"] for b in bodies} == {"gpt-scribe"}  # the inline model override, on the worker
    assert all("Scribe rules." in json.dumps(b) for b in bodies)


def test_an_inline_agent_with_an_unknown_provider_is_refused_before_the_run_naming_it(cluster: Cluster) -> None:
    cluster.write_config([scripted("team", coder=["ok"])],
                         [{"name": "coder", "provider": "team", "toolboxes": ["team"]}])
    path = cluster.root / "inline.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "agents": {"coder": {"ref": "coder"}, "helper": {"provider": "nope"}},
                                    "kickoff": "@helper hi"}))
    done = cluster.shelly("workflow", "run", str(path))
    assert done.returncode == 2 and 'agent "helper": provider "nope" is not in the config' in done.stderr


def test_a_worker_killed_during_a_wake_loses_no_message_and_acks_only_after_success(cluster: Cluster) -> None:
    killed = threading.Event()
    calls: list[int] = []

    def respond(req: RecordedRequest) -> Reply:
        calls.append(1)
        if not killed.is_set():
            return Reply(text="too late", delay=120)  # in flight when its worker is killed
        return Reply(text="fixed after the crash")

    with ModelServer(format="openai", responder=respond) as server:
        mock = {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
                "rate_limit": {"max_retries": 0}}
        cluster.write_config([mock], [{"name": "coder", "provider": "mock", "toolboxes": ["team"]},
                                      {"name": "reviewer", "provider": "mock", "toolboxes": ["team"]}])
        workers = cluster.start_workers("wa", "wb")
        run = cluster.popen("workflow", "run", str(write_workflow(cluster.root, "@coder fix it")))
        try:
            server.wait_for_requests(1, timeout=60)
            [wake] = wait_until(lambda: [r for r in wake_records(cluster) if r.get("worker")], 30, "the wake's run")
            session = wake["session"]
            cursors = f"{cluster.prefix}s:{{{session}}}:ws:cursors"
            assert cluster.redis.hget(cursors, "coder") is None  # nothing acked while the wake runs
            killed.set()
            cluster.kill_worker(wake["worker"])
            stdout, stderr = run.communicate(timeout=150)
        finally:
            if run.poll() is None:
                run.kill()
    assert run.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
    assert stdout.strip() == "fixed after the crash"
    assert cluster.redis.hget(cursors, "coder") == "1"
    [after] = [r for r in wake_records(cluster) if r["agent"] == "coder"]
    assert after["status"] == "done" and after["worker"] in workers and after["worker"] != wake["worker"]


def start_ticker(cluster: Cluster, wakeup: str, prompt: str, replies: list[str]) -> tuple[Any, str, str]:
    """`shelly workflow start` of a one-agent team (``ticker``, woken by ``wakeup``) on two workers:
    the process, its session and the session's channel key."""
    cluster.write_config([scripted("team", ticker=replies)],
                         [{"name": "ticker", "provider": "team", "toolboxes": ["team"]}])
    cluster.start_workers("wa", "wb")
    path = cluster.root / "ticker.yaml"
    path.write_text(yaml.safe_dump({"name": "ticker", "agents": {"ticker": {"ref": "ticker", "wakeup": wakeup,
                                                                             "wakeup_prompt": prompt}}}))
    start = cluster.popen("workflow", "start", str(path))
    try:
        assert start.stderr is not None
        session = start.stderr.readline().split()[1]
    except BaseException:
        start.kill()
        raise
    return start, session, f"{cluster.prefix}s:{{{session}}}:ws:channel"


def test_an_interval_schedule_with_two_workers_fires_once_per_due_time(cluster: Cluster) -> None:
    start, session, channel = start_ticker(cluster, "2s", "Tick.", ["checked"])
    try:

        def posts() -> list[dict[str, Any]]:
            return [json.loads(raw) for raw in cluster.redis.lrange(channel, 0, -1)]

        wait_until(lambda: sum(p["content"] == "@ticker Tick." for p in posts()) >= 4, 60, "four scheduled wakeups")
        stopped = cluster.shelly("workflow", "stop", "--session", session)
        assert stopped.returncode == 0, stopped.stderr
        start.communicate(timeout=30)
    finally:
        if start.poll() is None:
            start.kill()
    ticks = [p["timestamp"] for p in posts() if p["content"] == "@ticker Tick."]
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert min(gaps) >= 1.9, f"a due time fired twice: {gaps}"
    answers = [p for p in posts() if p["from"] == "ticker"]
    assert len(answers) >= len(ticks) - 1  # each fire woke the agent once (the last may still run)
    assert start.returncode == 0
    assert_all_keys_have_ttl(cluster.redis, cluster.prefix)


def test_a_user_sends_from_outside_and_reads_channel_inbox_and_docs(cluster: Cluster) -> None:
    cluster.write_config([scripted("team", **REVIEW)],
                         [{"name": "coder", "provider": "team", "toolboxes": ["team"]},
                          {"name": "reviewer", "provider": "team", "toolboxes": ["team"]}])
    cluster.start_workers("wa")
    start = cluster.popen("workflow", "start", str(write_workflow(cluster.root, kickoff="")))
    try:
        assert start.stderr is not None
        session = start.stderr.readline().split()[1]
        sent = cluster.shelly("send", "--session", session, "@reviewer please look at the diff")
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout)["mentions"] == ["reviewer"]
        assert ("channel_post", "user") in {(e["kind"], e["agent"]) for e in cluster.events(session)}
        wait_until(lambda: cluster.shelly("docs", "--session", session, "notes.md").stdout.strip()
                   == "review: approved", 60, "the reviewer's document")
        wait_until(lambda: json.loads(cluster.shelly("inbox", "--session", session, "reviewer").stdout) == [],
                   30, "the reviewer's inbox acked")
        channel = cluster.shelly("channel", "--session", session).stdout.splitlines()
        assert "@user: @reviewer please look at the diff" in channel[0] and "@reviewer: approved" in channel[-1]
        assert json.loads(cluster.shelly("docs", "--session", session).stdout) == ["notes.md"]
        assert cluster.shelly("workflow", "stop", "--session", session).returncode == 0
        stdout, _ = start.communicate(timeout=30)
    finally:
        if start.poll() is None:
            start.kill()
    assert stdout.strip() == "review: approved"


def test_a_failing_wake_on_the_pool_is_retried_then_dead_lettered_and_the_run_exits_1(cluster: Cluster) -> None:
    cluster.write_config([scripted("team", coder=[{"error": "model down"}], reviewer=["-"])],
                         [{"name": "coder", "provider": "team", "toolboxes": ["team"]},
                          {"name": "reviewer", "provider": "team", "toolboxes": ["team"]}])
    cluster.start_workers("wa", "wb")
    done = cluster.shelly("workflow", "run", str(write_workflow(cluster.root, "@coder fix it")), timeout=180)
    assert done.returncode == 1, f"{done.stderr}\n{cluster.worker_log()}"
    assert "dead letter: coder messages 1..1 after 3 attempts" in done.stderr
    session = done.stderr.split()[1]
    status = json.loads(cluster.shelly("workflow", "status", "--session", session).stdout)
    [letter] = status["dead_letters"]
    assert (letter["agent"], letter["attempts"]) == ("coder", 3) and "model down" in letter["error"]
    assert sorted(r["agent"] for r in wake_records(cluster)) == ["coder"] * 3  # three runs, none acked early


def test_a_dead_letter_replayed_on_the_pool_is_handled_and_removed(cluster: Cluster) -> None:
    fixed = threading.Event()

    def respond(req: RecordedRequest) -> Reply:
        return Reply(text="handled on replay") if fixed.is_set() else Reply.error(400, "model down")

    with ModelServer(format="openai", responder=respond) as server:
        mock = {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
                "rate_limit": {"max_retries": 0}}
        cluster.write_config([mock], [{"name": "coder", "provider": "mock", "toolboxes": ["team"]}])
        cluster.start_workers("wa", "wb")
        path = cluster.root / "one.yaml"
        path.write_text(yaml.safe_dump({"name": "one", "agents": {"coder": {"ref": "coder"}}, "kickoff": "@coder go"}))
        done = cluster.shelly("workflow", "run", str(path), timeout=180)
        assert done.returncode == 1, f"{done.stderr}\n{cluster.worker_log()}"
        session = done.stderr.split()[1]
        fixed.set()
        replayed = cluster.shelly("workflow", "replay", "--session", session, "coder")
        assert replayed.returncode == 0 and len(json.loads(replayed.stdout)) == 1, replayed.stderr

        def status() -> dict[str, Any]:
            return json.loads(cluster.shelly("workflow", "status", "--session", session).stdout)

        wait_until(lambda: status()["dead_letters"] == [], 60, "the dead letter handled")
    channel = cluster.shelly("channel", "--session", session).stdout
    assert "@coder: handled on replay" in channel


def lose_queued_wakes(cluster: Cluster) -> int:
    """Delete the wake tasks waiting in this cluster's queue (a lost message); how many there were."""
    broker = redis.Redis.from_url(cluster.broker_url, decode_responses=True)
    try:
        lists = [k for k in broker.scan_iter(match=cluster.queue + "*") if broker.type(k) == "list"]
        lost = sum(int(broker.llen(k)) for k in lists)
        if lists:
            broker.delete(*lists)
        return lost
    finally:
        broker.close()


def redo_lost_wake(cluster: Cluster, *, lease_left_by_a_killed_worker: bool = False) -> float:
    """Post to the reviewer while no worker runs, lose the wake's message (and, if asked, leave the
    lease a worker killed before journaling the run would leave), start two workers; the seconds
    until the reviewer's inbox is acked, which must come with its wake's success."""
    cluster.write_config([scripted("team", **REVIEW)],
                         [{"name": "coder", "provider": "team", "toolboxes": ["team"]},
                          {"name": "reviewer", "provider": "team", "toolboxes": ["team"]}])
    start = cluster.popen("workflow", "start", str(write_workflow(cluster.root, kickoff="")))
    try:
        assert start.stderr is not None
        session = start.stderr.readline().split()[1]
        cursors = f"{cluster.prefix}s:{{{session}}}:ws:cursors"
        sent = cluster.shelly("send", "--session", session, "@reviewer please look")
        assert sent.returncode == 0, sent.stderr
        assert lose_queued_wakes(cluster) == 1  # no worker ran: the wake's only message is gone
        if lease_left_by_a_killed_worker:
            lease = f"{cluster.prefix}s:{{{session}}}:ws:wake:reviewer"
            cluster.redis.set(lease, "killed-worker-task", px=int(WakeSettings().claim * 1000))
        assert cluster.redis.hget(cursors, "reviewer") is None  # nothing acked for a wake that never ran
        cluster.start_workers("wa", "wb")
        began = time.monotonic()
        wait_until(lambda: cluster.redis.hget(cursors, "reviewer") is not None, 60, "the reviewer's inbox acked")
        took = time.monotonic() - began
        assert "@reviewer: approved" in cluster.shelly("channel", "--session", session).stdout
        assert cluster.shelly("workflow", "stop", "--session", session).returncode == 0
        start.communicate(timeout=30)
    finally:
        if start.poll() is None:
            start.kill()
    print(f"lost wake redone and acked {took:.1f}s after the workers started")
    return took


def test_a_lost_wake_message_is_sent_again_by_a_workers_check_and_acked_only_after_success(cluster: Cluster) -> None:
    took = redo_lost_wake(cluster)
    assert took < 20, f"the lost wake was redone after {took:.1f}s"


def test_a_wake_whose_worker_died_before_its_run_was_journaled_holds_the_agent_only_briefly(
    cluster: Cluster,
) -> None:
    """What a worker killed between taking the wake lease and journaling the run leaves: the lease,
    held for the short claim time (not the 15-minute wake lease), and no run, no task."""
    took = redo_lost_wake(cluster, lease_left_by_a_killed_worker=True)
    assert took < WakeSettings().claim + 12, f"the agent was blocked {took:.1f}s"


def test_a_cron_schedule_fires_once_per_due_time_across_two_workers(cluster: Cluster) -> None:
    """No minute-long waits: the test makes the cron's entry due now, three times over (as each
    next minute would), and checks that one fire per due time reached the channel and that each
    claim moved the entry to the cron's next time."""
    from shelly_dist.workspace.schedule import cron_next

    start, session, channel = start_ticker(cluster, "* * * * *", "Cron.", ["checked"] * 5)
    try:
        due, entry = f"{cluster.prefix}team:due", f"{session}/ticker"

        def fires() -> int:
            return sum(json.loads(raw)["content"] == "@ticker Cron." for raw in cluster.redis.lrange(channel, 0, -1))

        for n in (1, 2, 3):
            now = time.time()
            cluster.redis.zadd(due, {entry: int(now * 1000)})  # this minute has come
            wait_until(lambda n=n: fires() >= n, 30, f"fire {n}")
            following = int(cron_next("* * * * *", now) * 1000)
            wait_until(lambda f=following: (cluster.redis.zscore(due, entry) or 0) >= f, 10, "the cron's next time")
        assert fires() == 3  # two workers tick every second: each due time fired once
        assert cluster.shelly("workflow", "stop", "--session", session).returncode == 0
        start.communicate(timeout=30)
    finally:
        if start.poll() is None:
            start.kill()


async def test_the_mcp_team_tools_let_an_outside_client_post_as_user_and_wake_an_agent(cluster: Cluster) -> None:
    """`shelly mcp serve --toolbox team --session S` driven by the official MCP client over stdio:
    the client's channel_send @mentions the reviewer, who is woken on a worker and answers."""
    import asyncio
    import sys

    import mcp_types as types
    from mcp import ClientSession, StdioServerParameters, stdio_client

    cluster.write_config([scripted("team", **REVIEW)],
                         [{"name": "coder", "provider": "team", "toolboxes": ["team"]},
                          {"name": "reviewer", "provider": "team", "toolboxes": ["team"]}])
    workers = cluster.start_workers("wa")
    start = cluster.popen("workflow", "start", str(write_workflow(cluster.root, kickoff="")))
    try:
        assert start.stderr is not None
        session = start.stderr.readline().split()[1]
        params = StdioServerParameters(command=sys.executable, env=cluster.env(), cwd=cluster.root,
                                       args=["-m", "shelly_dist.cli.main", "mcp", "serve", "--toolbox", "team",
                                             "--session", session])

        def text(result: types.CallToolResult) -> Any:
            assert not result.is_error, result.content
            return json.loads("".join(c.text for c in result.content if isinstance(c, types.TextContent)))

        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"channel_send", "channel_read", "my_inbox", "my_inbox_ack", "team_doc_read"} <= names
            sent = text(await client.call_tool("channel_send", {"message": "@reviewer please look"}))
            assert sent["from"] == "user" and sent["mentions"] == ["reviewer"]

            async def answered() -> list[dict[str, Any]]:
                for _ in range(600):
                    said = text(await client.call_tool("channel_read", {}))
                    if any(m["from"] == "reviewer" for m in said):
                        return said
                    await asyncio.sleep(0.1)
                raise AssertionError(f"the reviewer never answered\n{cluster.worker_log()}")

            said = await answered()
            assert [m["content"] for m in said] == ["@reviewer please look", "approved"]
            assert text(await client.call_tool("my_inbox", {})) == []  # nobody mentioned user
        [wake] = wake_records(cluster)
        assert wake["agent"] == "reviewer" and wake["status"] == "done" and wake["worker"] in workers
        assert cluster.shelly("workflow", "stop", "--session", session).returncode == 0
        start.communicate(timeout=30)
    finally:
        if start.poll() is None:
            start.kill()


def test_agents_mentioning_each_other_on_the_pool_stop_at_the_wake_budget_with_the_event(cluster: Cluster) -> None:
    cluster.write_config([scripted("team", a=["@b ping"] * 100, b=["@a pong"] * 100)],
                         [{"name": "a", "provider": "team"}, {"name": "b", "provider": "team"}])
    cluster.start_workers("wa")
    path = cluster.root / "pingpong.yaml"
    path.write_text(yaml.safe_dump({"name": "pingpong", "kickoff": "@a start",
                                    "wake_budget": {"total": 10, "loop_rounds": 0},
                                    "agents": {"a": {"ref": "a"}, "b": {"ref": "b"}}}))
    done = cluster.shelly("workflow", "run", str(path), timeout=180)
    assert done.returncode == 1, f"{done.stderr}\n{cluster.worker_log()}"
    assert "workflow paused: the session's wake budget is spent (10 wakes in all)" in done.stderr
    assert len(wake_records(cluster)) == 10
    paused = [e for e in cluster.events(done.stderr.split()[1]) if e["kind"] == "wakes_paused"]
    assert len(paused) == 1 and "wake budget is spent" in paused[0]["data"]["reason"]


def test_the_live_view_of_a_workflow_on_the_pool_shows_a_runs_tool_call_before_its_post_and_its_end_first(
        cluster: Cluster) -> None:
    cluster.write_config([scripted("team", **REVIEW)],
                         [{"name": "coder", "provider": "team", "toolboxes": ["team"]},
                          {"name": "reviewer", "provider": "team", "toolboxes": ["team"]}])
    cluster.start_workers("wa", "wb")
    done = cluster.shelly("workflow", "run", str(write_workflow(cluster.root)), timeout=180)
    assert done.returncode == 0, f"{done.stderr}\n{cluster.worker_log()}"
    lines = done.stderr.splitlines()

    def at(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    # as embedded: the tool call, then its post; the run's end, then its last word, ack and wake end
    assert at("coder → channel_send") < at("#2 @coder: @reviewer patch ready"), done.stderr
    assert at("✔ coder done on") < at("#3 @coder: patch written") < at("✔ coder wake done"), done.stderr
