"""``shelly steer`` on the pool with real workers (issue 35): the text reaches the busy run's next
model call on the worker and not the call in flight; ``--interrupt`` ends the approval a run waits
for, and the run goes on with the message; a run that has ended takes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .cluster import Cluster, complete, delegate, scripted, wait_until
from .test_approvals import decisions, deploys, finished, pending_approval, project, reaped

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def busy_team(cluster: Cluster) -> None:
    """``lead`` delegates to ``busy``, whose first model call is held (``until``) and marks its start;
    that call's tool writes what the call saw as the user's latest message."""
    first = {"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "first_saw", "value": "{task}"}}],
             "mark": str(cluster.root / "calling"), "until": str(cluster.root / "go")}
    cluster.write_config(
        [scripted(lead=[delegate(("busy", "watch the weather")), "lead heard: {result}"],
                  busy=[first, complete("then saw: {task}")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "busy", "toolboxes": ["state"]}],
        # the held call outlasts a `shelly steer` start-up, which under load takes longer than the
        # cluster's 10 s step limit
        distributed={"step_time_limit": 120, "visibility_timeout": 180})


def state(cluster: Cluster, session: str, key: str) -> Any:
    out = cluster.shelly("state", "get", key, "--session", session)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_shelly_steer_reaches_the_busy_runs_next_model_call_on_a_worker_and_not_the_one_in_flight(
        cluster: Cluster) -> None:
    busy_team(cluster)
    cluster.start_worker("w", concurrency=2)
    with reaped(cluster.popen("run", "forecast", "--agent", "lead", "--json", "--quiet")) as lead:
        wait_until(lambda: (cluster.root / "calling").exists(), 90, "the busy child's model call")
        session = cluster.session_ids()[0]
        steered = cluster.shelly("steer", "--session", session, "--agent", "busy", "use the blue one")
        assert steered.returncode == 0, steered.stderr
        (cluster.root / "go").touch()
        out = finished(lead, cluster)
    assert '"result": "then saw: use the blue one"' in out["reply"]
    assert state(cluster, session, "first_saw")["value"] == "watch the weather"
    steered_events = [e for e in cluster.events(session) if e["kind"] == "steered"]
    assert [(e["agent"].split("-")[0], e["data"]["text"]) for e in steered_events] == [("busy", "use the blue one")]


def test_steer_interrupt_ends_the_approval_a_run_waits_for_and_the_run_goes_on_with_the_message(
        cluster: Cluster) -> None:
    project(cluster, deployer=[{"tool_calls": [{"name": "deploy", "arguments": {"env": "prod"}}]},
                               complete("{result} | {task}")])
    cluster.start_worker("solo", concurrency=1)
    with reaped(cluster.popen("run", "release", "--agent", "lead", "--json", "--quiet")) as lead:
        pending = pending_approval(cluster)
        steered = cluster.shelly("steer", "--session", pending["session"], "--agent", "deployer", "--interrupt",
                                 "stop: deploy to staging first")
        assert steered.returncode == 0, steered.stderr
        out = finished(lead, cluster)
    assert '"result": "skipped: the user interrupted | stop: deploy to staging first"' in out["reply"]
    assert deploys(cluster) == [] and decisions(cluster) == []


def test_a_message_sent_during_a_childs_last_model_call_gives_it_another_step_on_a_worker(
        cluster: Cluster) -> None:
    last = {"text": "first answer", "mark": str(cluster.root / "calling"), "until": str(cluster.root / "go")}
    cluster.write_config(
        [scripted(lead=[delegate(("busy", "watch the weather")), "lead heard: {result}"],
                  busy=[last, "second answer, hearing: {task}"])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "busy"}],
        distributed={"step_time_limit": 120, "visibility_timeout": 180})
    cluster.start_worker("w", concurrency=2)
    with reaped(cluster.popen("run", "forecast", "--agent", "lead", "--json", "--quiet")) as lead:
        wait_until(lambda: (cluster.root / "calling").exists(), 90, "the busy child's last model call")
        session = cluster.session_ids()[0]
        steered = cluster.shelly("steer", "--session", session, "--agent", "busy", "mention the rain")
        assert steered.returncode == 0, steered.stderr
        (cluster.root / "go").touch()
        out = finished(lead, cluster)
    assert '"result": "second answer, hearing: mention the rain"' in out["reply"]


def test_steering_a_run_that_has_ended_is_a_one_line_error(cluster: Cluster) -> None:
    cluster.write_config([scripted(solo=["done"])], [{"name": "solo"}])
    out = cluster.shelly("run", "hi", "--json", "--quiet")
    assert out.returncode == 0, out.stderr
    session = json.loads(out.stdout)["session"]
    steered = cluster.shelly("steer", "--session", session, "too late")
    assert steered.returncode == 2
    assert steered.stderr.strip().splitlines()[-1].startswith(
        f"shelly: steer: no live run of a top-level run in session {session}")
