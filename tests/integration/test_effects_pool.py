"""Effects on the worker pool: an effect's work is journaled with the run, so a worker killed right
after a compaction leaves a journal that continues from the compacted chat on another worker, and
a budget that runs out in a remote child reaches its parent as Shelly's failed completion."""

from __future__ import annotations

import json
import threading

import pytest

from shelly_dist.agent.effects.compact import COMPACTED
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

from .cluster import Cluster, delegate, scripted, wait_until

pytestmark = pytest.mark.integration

SUMMARIZER = "You are a conversation summarizer."


def _system(req: RecordedRequest) -> str:
    messages = req.body.get("messages", [])
    return str(messages[0].get("content", "")) if messages else ""


def _digger(cluster: Cluster, server: ModelServer, effects: list[dict]) -> None:
    cluster.write_config(
        [scripted("lead", lead=[delegate(("digger", "dig deep")), "lead done"]),
         {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
          "context_window": 8000, "rate_limit": {"max_retries": 0}}],
        [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 1}},
         {"name": "digger", "provider": "mock", "toolboxes": ["state"], "effects": effects}],
    )


def test_a_compaction_survives_the_worker_killed_right_after_it(cluster: Cluster):
    """The child's first reply reports a context past the threshold; before its next call the
    compaction summarises the chat and journals the rewrite; the worker dies during that next call.
    Another worker continues from the compacted chat: no second summary, no old messages."""
    hung = threading.Event()

    def respond(req: RecordedRequest) -> Reply:
        if SUMMARIZER in _system(req):
            return Reply(text="SUMMARY-7f3a: looked up k")
        body = json.dumps(req.body)
        if "[Conversation compacted" not in body:
            return Reply(text="", tool_calls=[{"id": "call_first_lookup", "name": "shared_state_get",
                                               "arguments": {"key": "k"}}], usage={"input": 7000, "output": 5})
        if not hung.is_set():
            hung.set()
            return Reply(text="too late", delay=60)  # the worker holding the step is killed meanwhile
        return Reply(text="", tool_calls=[{"name": "task_complete",
                                           "arguments": {"status": "completed", "summary": "dug"}}])

    with ModelServer(format="openai", responder=respond) as server:
        _digger(cluster, server, [{"kind": "compact", "params": {"threshold": 0.5}}])
        cluster.start_worker("wa")
        cluster.start_worker("wb")
        coordinator = cluster.popen("run", "compact and crash", "--json")
        try:
            wait_until(hung.is_set, 60, "the child's call after its compaction")
            child = wait_until(
                lambda: next((k for k in cluster.redis.scan_iter(match=cluster.prefix + "run:*")
                              if cluster.redis.type(k) == "hash" and cluster.redis.hget(k, "agent") == "digger"),
                             None), 30, "the child's run record")
            cluster.kill_worker(str(cluster.redis.hget(child, "worker")))
            stdout, stderr = coordinator.communicate(timeout=120)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
        assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
        assert json.loads(stdout)["reply"] == "lead done"
        requests = server.requests
        summaries = [r for r in requests if SUMMARIZER in _system(r)]
        assert len(summaries) == 1, "the compaction was journaled: it is not redone after the crash"
        after = json.dumps(requests[-1].body, ensure_ascii=False)
        assert COMPACTED.split("\n")[0] in after and "SUMMARY-7f3a" in after
        assert "call_first_lookup" not in after, "the rebuilt chat is the compacted one"


def test_a_remote_child_out_of_tokens_reports_shellys_failed_completion(cluster: Cluster):
    def respond(req: RecordedRequest) -> Reply:
        return Reply(text="", tool_calls=[{"name": "shared_state_get", "arguments": {"key": "k"}}],
                     usage={"input": 30, "output": 0})

    with ModelServer(format="openai", responder=respond) as server:
        _digger(cluster, server, [{"kind": "token_budget", "params": {"max_tokens": 50}}])
        cluster.start_worker("wa")
        out = cluster.shelly("run", "spend", "--json", timeout=120)
        assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
        session = json.loads(out.stdout)["session"]
        child = next(r for r in cluster.runs(session) if r["parent"])
        assert child["status"] == "failed"  # the run ended on its budget; its parent got an entry, not an error
        assert len(server.requests) == 2  # 30, then 60 ≥ 50
        tool_texts = [e["data"]["text"] for e in cluster.events(session)
                      if e["kind"] == "message_added" and e["data"].get("role") == "tool" and e["agent"] == "lead"]
        (entry,) = json.loads(tool_texts[0])
        summary = entry["completion"]["summary"]
        assert summary == 'Agent "digger" exhausted its token budget without completing the task.'
