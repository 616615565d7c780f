"""Approval gates on the pool with real workers (issue 35): a gated Python tool's call waits in Redis
holding no worker slot, ``shelly decisions`` lists it with its arguments and path, ``shelly
approve`` runs the tool exactly once, ``shelly reject --reason`` reaches the model and the tool
never runs, ``approve --all --tool`` decides a whole batch's, and a worker killed after the
approval and before the tool's result leaves the tool run at most once while the run goes on."""

from __future__ import annotations

import contextlib
import json
import subprocess
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from .cluster import Cluster, complete, delegate, scripted, wait_until

# several `shelly` start-ups per test (one took 111 s at load 12 in test_questions)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OPS_MODULE = textwrap.dedent('''
    """A dangerous tool, gated: every call needs a person's approval."""
    import os
    import time
    from pathlib import Path

    from shelly_dist import tool

    RUNS = Path(__file__).resolve().parent.parent / "deploys.txt"
    HOLD = Path(__file__).resolve().parent.parent / "hold"


    @tool(toolbox="ops", approval=True)
    def deploy(env: str) -> str:
        """Deploy the service to an environment."""
        with RUNS.open("a") as f:
            f.write(f"{env} {os.getpid()}\\n")
        while HOLD.exists():  # a test that kills the worker mid-call holds it here
            time.sleep(0.05)
        return f"deployed to {env}"
''')


def project(cluster: Cluster, *, lead: list[Any] | None = None, deployer: list[Any] | None = None,
            max_concurrency: int = 0, **extra_scripts: list[Any]) -> None:
    """``lead`` delegates to ``deployer``, whose one tool (``deploy``) is gated; ``other`` delegates
    to ``quick``: another tree to run on the only slot while the approval waits."""
    (cluster.root / "team").mkdir(exist_ok=True)
    (cluster.root / "team" / "__init__.py").write_text("")
    (cluster.root / "team" / "ops.py").write_text(OPS_MODULE)
    cluster.write_config(
        [scripted(
            lead=lead or [delegate(("deployer", "ship the release")), "lead heard: {result}"],
            deployer=deployer or [{"tool_calls": [{"name": "deploy", "arguments": {"env": "prod"}}]},
                                  complete("deploy said: {result}")],
            other=[delegate(("quick", "quick job")), "other done"],
            quick=[complete("quick done")],
            plain=["plain done"],
            **extra_scripts,
        )],
        [{"name": "lead", "options": {"max_delegation_depth": 1}},
         {"name": "deployer", "toolboxes": ["ops"], "max_concurrency": max_concurrency},
         {"name": "other", "options": {"max_delegation_depth": 1}},
         {"name": "quick"},
         {"name": "plain"},
         *({"name": name, "toolboxes": ["ops"]} for name in extra_scripts)],
        python=["team.ops"],
    )


@contextlib.contextmanager
def reaped(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``proc``, killed on the way out if the test left it running."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def deploys(cluster: Cluster) -> list[str]:
    runs = cluster.root / "deploys.txt"
    return runs.read_text().splitlines() if runs.exists() else []


def decisions(cluster: Cluster, *args: str) -> list[dict[str, Any]]:
    out = cluster.shelly("decisions", "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def finished(proc: subprocess.Popen[str], cluster: Cluster, timeout: float = 120) -> dict[str, Any]:
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"stdout:{stdout}\nstderr:{stderr}\n{cluster.worker_log()}"
    return json.loads(stdout)


def pending_approval(cluster: Cluster) -> dict[str, Any]:
    """The one approval waiting, once ``shelly decisions`` lists it."""
    found = wait_until(lambda: [d for d in decisions(cluster) if d["kind"] == "approval"], 90, "the approval")
    assert len(found) == 1, found
    return found[0]


def test_a_gated_call_waits_holding_no_slot_and_shelly_approve_runs_it_exactly_once(cluster: Cluster) -> None:
    project(cluster)
    cluster.start_worker("solo", concurrency=1)
    with reaped(cluster.popen("run", "release", "--agent", "lead", "--json", "--quiet")) as first:
        pending = pending_approval(cluster)
        assert (pending["id"], pending["tool"], pending["arguments"]) == ("a-1", "deploy", {"env": "prod"})
        assert pending["path"][0] == "lead" and pending["path"][1].startswith("deployer-")
        assert pending["agent"] == pending["path"][1]
        session = pending["session"]
        assert decisions(cluster, "--session", session) == [pending]
        assert decisions(cluster, "--agent", "deployer") == [pending]
        assert decisions(cluster, "--agent", "quick") == []

        # The only slot is free: another session's tree runs to the end on it while the approval waits.
        other = cluster.shelly("run", "second job", "--agent", "other", "--json", "--quiet")
        assert other.returncode == 0, f"{other.stderr}\n{cluster.worker_log()}"
        assert json.loads(other.stdout)["reply"] == "other done"
        assert deploys(cluster) == []

        approved = cluster.shelly("approve", "--session", session, "a-1")
        assert approved.returncode == 0, approved.stderr
        out = finished(first, cluster)
    assert [line.split()[0] for line in deploys(cluster)] == ["prod"]
    assert "deploy said: deployed to prod" in out["reply"]
    assert decisions(cluster) == []
    kinds = [e["kind"] for e in cluster.events(session)]
    assert "approval_requested" in kinds and "approval_decided" in kinds


def test_shelly_reject_with_a_reason_reaches_the_model_and_the_tool_never_runs(cluster: Cluster) -> None:
    project(cluster)
    cluster.start_worker("solo", concurrency=1)
    with reaped(cluster.popen("run", "release", "--agent", "lead", "--json", "--quiet")) as first:
        pending = pending_approval(cluster)
        rejected = cluster.shelly("reject", "--session", pending["session"], "a-1", "--reason", "not on Fridays")
        assert rejected.returncode == 0, rejected.stderr
        out = finished(first, cluster)
    assert deploys(cluster) == []
    assert "deploy said: deploy: rejected: not on Fridays" in out["reply"]
    decided = [e for e in cluster.events(pending["session"]) if e["kind"] == "approval_decided"]
    assert decided[0]["data"]["decision"] == "reject" and decided[0]["data"]["by"].startswith("cli:")


def test_a_worker_killed_after_the_approval_before_the_tools_result_leaves_it_run_at_most_once(
        cluster: Cluster) -> None:
    project(cluster)
    hold = cluster.root / "hold"
    hold.write_text("")  # the tool, once running, waits here until the worker is killed
    doomed = cluster.start_worker("doomed", concurrency=1, may_die=True)
    with reaped(cluster.popen("run", "release", "--agent", "lead", "--json", "--quiet")) as first:
        pending = pending_approval(cluster)
        assert cluster.shelly("approve", "--session", pending["session"], "a-1").returncode == 0
        wait_until(lambda: deploys(cluster), 90, "the approved tool to start")
        cluster.kill_worker(doomed)
        hold.unlink()
        cluster.start_worker("heir", concurrency=1)
        out = finished(first, cluster, timeout=180)
    assert len(deploys(cluster)) == 1  # at most once: the heir did not run it again
    assert "deploy said: tool outcome unknown: the worker running it stopped" in out["reply"]


def test_approve_all_with_a_tool_decides_every_gated_item_of_a_batch_while_the_others_complete(
        cluster: Cluster) -> None:
    # max_concurrency 4: twelve approvals wait at once only if a waiting run holds no slot of its agent
    project(cluster, lead=[complete("unused")], max_concurrency=4,
            deployer=[{"tool_calls": [{"name": "deploy", "arguments": {"env": "{task}"}}]}, "deploy said: {result}"])
    cluster.start_worker("w", concurrency=4)
    tasks, output = cluster.root / "tasks.jsonl", cluster.root / "out.jsonl"
    gated = [{"id": f"g{i}", "agent": "deployer", "task": f"env{i}"} for i in range(12)]
    plain = [{"id": f"p{i}", "agent": "plain", "task": "plain job"} for i in range(3)]
    tasks.write_text("".join(json.dumps(item) + "\n" for item in gated + plain))
    with reaped(cluster.popen("batch", "--tasks", str(tasks), "--output", str(output), "--quiet")) as batch:
        waiting = wait_until(lambda: len(found := decisions(cluster, "--kind", "approval")) == 12 and found, 120,
                             "12 approvals")
        assert {d["tool"] for d in waiting} == {"deploy"} and len({d["batch"] for d in waiting}) == 1
        done = wait_until(lambda: output.exists() and len(output.read_text().splitlines()) == 3, 120,
                          "the ungated items, done while the gated ones wait")
        assert done and deploys(cluster) == []
        approved = cluster.shelly("approve", "--all", "--tool", "deploy", "--batch", str(output))
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.strip() == "approved 12"
        _, stderr = batch.communicate(timeout=180)
    assert batch.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert sorted(r["id"] for r in lines if r["status"] == "completed") == sorted(i["id"] for i in gated + plain)
    assert sorted(line.split()[0] for line in deploys(cluster)) == sorted(f"env{i}" for i in range(12))
    assert decisions(cluster) == []


def test_a_decision_that_is_not_open_is_a_one_line_error(cluster: Cluster) -> None:
    project(cluster)
    out = cluster.shelly("approve", "--session", "0123456789abcdef", "a-7")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "shelly: approve: no open decision a-7 in session 0123456789abcdef "
        "(see `shelly decisions --session 0123456789abcdef`)")

