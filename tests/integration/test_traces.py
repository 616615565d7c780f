"""OpenTelemetry traces across processes: a two-level delegation on two real workers, exported over
OTLP/HTTP to a receiver in the test, is one trace in which every child's ``invoke_agent`` span is a
child of the right ``execute_tool delegate`` span, across workers and the parent's resume."""

from __future__ import annotations

from typing import Any

import pytest

from .cluster import Cluster, complete, delegate, scripted, wait_until
from .ops import run_json
from .support.otlp import OTLPReceiver, ReceivedSpan

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def three_levels(cluster: Cluster) -> None:
    """lead (coordinator) -> mid (a worker; suspends, resumes) -> leaf (a worker)."""
    cluster.write_config(
        [scripted(lead=[delegate(("mid", "plan the audit")), "lead done"],
                  mid=[delegate(("leaf", "dig into Q3")), complete("mid done")],
                  leaf=[complete("leaf done")])],
        [{"name": "lead", "options": {"max_delegation_depth": 2}},
         {"name": "mid", "options": {"max_delegation_depth": 2}},
         {"name": "leaf"}],
    )


def one(spans: list[ReceivedSpan], name: str, **attrs: Any) -> ReceivedSpan:
    found = [s for s in spans if s.name == name and all(s.attributes.get(k) == v for k, v in attrs.items())]
    assert len(found) == 1, (name, attrs, [(s.name, s.attributes) for s in spans])
    return found[0]


def test_a_delegation_over_two_workers_is_one_trace_with_children_under_their_delegate_spans(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
):
    with OTLPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        three_levels(cluster)
        cluster.start_workers("w1", "w2", env={"OTEL_SERVICE_NAME": "shelly-worker"})
        out = run_json(cluster, "audit")
        session = out["session"]

        def complete_trace() -> list[ReceivedSpan] | None:
            spans = receiver.snapshot()
            names = [s.name for s in spans]
            done = names.count("invoke_agent mid") >= 2 and {"invoke_agent leaf", "invoke_agent lead"} <= set(names)
            return spans if done else None

        spans = wait_until(complete_trace, 30, f"the spans of every process\n{cluster.worker_log()}")

    assert {s.trace_id for s in spans} == {spans[0].trace_id}, "one trace for the whole tree"
    lead = one(spans, "invoke_agent lead")
    assert lead.service == "shelly" and lead.parent_id == ""
    assert lead.attributes["gen_ai.conversation.id"] == session
    delegates = {s.span_id: s for s in spans if s.name == "execute_tool delegate"}
    by_id = {s.span_id: s for s in spans}

    mids = [s for s in spans if s.name == "invoke_agent mid"]
    first = next(s for s in mids if not s.attributes.get("shelly.resumed"))
    resumed = next(s for s in mids if s.attributes.get("shelly.resumed"))
    assert first.parent_id in delegates and resumed.parent_id == first.parent_id, \
        "the resume continues under the same delegate span"
    assert by_id[first.parent_id].parent_id == lead.span_id, "mid's delegate span is the lead's tool call"
    assert first.service == resumed.service == "shelly-worker"
    assert first.attributes["gen_ai.agent.name"] == "mid"
    assert first.attributes["gen_ai.agent.id"] != lead.attributes["gen_ai.agent.id"]

    leaf = one(spans, "invoke_agent leaf")
    leaf_parent = delegates[leaf.parent_id]
    assert by_id[leaf_parent.parent_id] is first, "leaf's delegate span is mid's tool call, in mid's first advance"
    assert leaf_parent.attributes["gen_ai.tool.name"] == "delegate"
    assert leaf_parent.attributes["gen_ai.tool.call.id"]

    chats = [s for s in spans if s.name == "chat script"]
    assert chats and all(s.attributes["gen_ai.request.model"] == "script" for s in chats)
    assert all("gen_ai.usage.input_tokens" in s.attributes for s in chats)
    complete_tools = [s for s in spans if s.name == "execute_tool task_complete"]
    assert {by_id[s.parent_id].name for s in complete_tools} == {"invoke_agent mid", "invoke_agent leaf"}


def test_a_step_redone_after_its_worker_died_gives_a_retry_span_under_the_same_delegate_span(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
):
    release = cluster.root / "release"
    with OTLPReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        cluster.write_config(
            [scripted(lead=[delegate(("slowpoke", "take your time")), "lead done"],
                      slowpoke=[{**complete("slow done"), "until": str(release)}])],
            [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "slowpoke"}],
            distributed={"lease": 3},
        )
        a, b = cluster.start_workers("wa", "wb")
        coordinator = cluster.popen("run", "crash test", "--json")
        try:
            def held() -> str | None:
                for key in cluster.redis.scan_iter(match=cluster.prefix + "run:*"):
                    if key.count(":") == 3 and cluster.redis.hget(key, "agent") == "slowpoke" and \
                            cluster.redis.hget(key, "status") == "running":
                        return cluster.redis.hget(key, "worker")
                return None

            holder = wait_until(held, 60, "slowpoke's first step to run")
            cluster.kill_worker(holder)  # mid-step, its span never ends
            survivor = b if holder == a else a
            wait_until(lambda: held() == survivor, 60, f"the reaper to hand slowpoke to {survivor}\n"
                                                         f"{cluster.worker_log()}")
            release.touch()
            _, stderr = coordinator.communicate(timeout=120)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
        assert coordinator.returncode == 0, stderr

        def slow_span() -> list[ReceivedSpan] | None:
            spans = receiver.snapshot()
            return spans if any(s.name == "invoke_agent slowpoke" for s in spans) and \
                any(s.name == "invoke_agent lead" for s in spans) else None

        spans = wait_until(slow_span, 30, "the spans")
    redone = one(spans, "invoke_agent slowpoke")
    assert redone.attributes.get("shelly.retry") is True
    assert not redone.attributes.get("shelly.resumed")
    delegate_span = next(s for s in spans if s.span_id == redone.parent_id)
    assert delegate_span.name == "execute_tool delegate"
    assert delegate_span.parent_id == one(spans, "invoke_agent lead").span_id
