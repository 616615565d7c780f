"""Effects on the worker pool: an effect's work is journaled with the run, so a worker killed right
after a compaction leaves a journal that continues from the compacted chat on another worker, and
a budget that runs out in a remote child reaches its parent as Shelly's failed completion."""

from __future__ import annotations

import json
import threading

import pytest

from shelly_dist.agent.effects.compact import COMPACTED
from shelly_dist.redisio.keys import Keys
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply, speaker

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
        # 30,000 reported tokens for a prompt of a few hundred: past the threshold, and too far from
        # the estimate for the window to learn a ratio from it (ContextWindow.observe ignores ratios
        # above MAX_RATIO). A plausible ratio (7,000 for ~600 estimated) is learned and journaled, and
        # then the compacted chat itself is estimated past the threshold and compacted again.
        if "[Conversation compacted" not in body:
            return Reply(text="", tool_calls=[{"id": "call_first_lookup", "name": "shared_state_get",
                                               "arguments": {"key": "k"}}], usage={"input": 30000, "output": 5})
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


# -- one child scripted call by call, one call hung once so the test can kill the worker holding it --

BIG = "B" * 1200


def _get(call_id: str, key: str = "big", **usage: int) -> Reply:
    return Reply(text="", tool_calls=[{"id": call_id, "name": "shared_state_get", "arguments": {"key": key}}],
                 usage=usage)


def _set_big(**usage: int) -> Reply:
    return Reply(text="", tool_calls=[{"id": "call_set", "name": "shared_state_set",
                                       "arguments": {"key": "big", "value": BIG}}], usage=usage)


DONE = Reply(text="", tool_calls=[{"id": "call_done", "name": "task_complete",
                                   "arguments": {"status": "completed", "summary": "dug"}}])


class Child:
    """The digger's side of the model server: its replies in order, summaries answered apart, and
    call ``hang_at`` held the first time it is asked (the test kills the worker meanwhile)."""

    def __init__(self, replies: list[Reply], *, hang_at: int, helper: Reply | None = None) -> None:
        self.replies = replies
        self.hang_at = hang_at
        self.helper = helper
        self.calls: list[RecordedRequest] = []
        self.summaries: list[RecordedRequest] = []
        self.hung = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, req: RecordedRequest) -> Reply:
        with self.lock:
            if SUMMARIZER in _system(req):
                self.summaries.append(req)
                return Reply(text=f"SUMMARY-{len(self.summaries)}")
            if speaker(req) == "helper" and self.helper is not None:
                return self.helper
            if len(self.calls) == self.hang_at and not self.hung.is_set():
                self.hung.set()
                return Reply(text="too late", delay=60)
            self.calls.append(req)
            return self.replies[min(len(self.calls) - 1, len(self.replies) - 1)]


def _tool_content(req: RecordedRequest, call_id: str) -> str:
    return next(str(m["content"]) for m in req.body["messages"] if m.get("tool_call_id") == call_id)


def _run_killing_the_holder(cluster: Cluster, child: Child, effects: list[dict], *,
                            toolboxes: tuple[str, ...] = ("state",), helper: bool = False) -> str:
    """``shelly run`` with the digger on two workers; the worker holding the digger when its call
    ``hang_at`` arrives is killed. Returns the session id."""
    with ModelServer(format="openai", responder=child) as server:
        digger: dict = {"name": "digger", "provider": "mock", "toolboxes": list(toolboxes), "effects": effects}
        agents = [{"name": "lead", "provider": "lead", "options": {"max_delegation_depth": 2}}, digger]
        if helper:
            digger["options"] = {"max_delegation_depth": 1}
            agents.append({"name": "helper", "provider": "mock"})
        cluster.write_config(
            [scripted("lead", lead=[delegate(("digger", "dig deep")), "lead done"]),
             {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
              "context_window": 8000, "rate_limit": {"max_retries": 0}}],
            agents,
        )
        cluster.start_worker("wa")
        cluster.start_worker("wb")
        coordinator = cluster.popen("run", "dig", "--json")
        try:
            wait_until(child.hung.is_set, 90, f"the digger's call {child.hang_at}")
            holder = wait_until(lambda: _holder(cluster, "digger"), 30, "the digger's run record")
            cluster.kill_worker(str(holder))
            stdout, stderr = coordinator.communicate(timeout=180)
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
        assert coordinator.returncode == 0, f"{stderr}\n{cluster.worker_log()}"
        assert json.loads(stdout)["reply"] == "lead done"
        return str(json.loads(stdout)["session"])


def _holder(cluster: Cluster, agent: str) -> str | None:
    """The worker holding ``agent``'s run (its run record's ``worker``)."""
    for key in cluster.redis.scan_iter(match=cluster.prefix + "run:*"):
        if cluster.redis.type(key) == "hash" and cluster.redis.hget(key, "agent") == agent:
            return cluster.redis.hget(key, "worker")
    return None


def _entry(cluster: Cluster, session: str) -> dict:
    """The digger's delegation entry as its parent received it."""
    texts = [e["data"]["text"] for e in cluster.events(session)
             if e["kind"] == "message_added" and e["data"].get("role") == "tool" and e["agent"] == "lead"]
    (entry,) = json.loads(texts[0])
    return entry


def test_trimmed_tool_results_stay_trimmed_on_the_worker_that_continues(cluster: Cluster):
    """After the fourth reply the first lookup's result is cut; that rewrite is journaled with the
    reply, so the next call — made by another worker — sends it cut."""
    child = Child([_set_big(), _get("call_get1"), _get("call_get2"), _get("call_get3"), DONE], hang_at=4)
    _run_killing_the_holder(cluster, child, [
        {"kind": "trim_tool_results", "params": {"max_result_length": 100, "preserve_recent": 1}}])
    after = _tool_content(child.calls[4], "call_get1")
    assert after == json.dumps(BIG)[:100] + "… [trimmed]"
    assert _tool_content(child.calls[4], "call_get3").startswith(json.dumps(BIG)), "the latest result stays whole"


def test_masked_observations_stay_masked_on_the_worker_that_continues(cluster: Cluster):
    """The first lookup's result is masked before the third call (the context reported past the
    threshold); the reported size is reset with the journaled rewrite, so the rebuilt run would not
    mask again — the masked chat it sends is the journaled one."""
    child = Child([_set_big(input=7000), _get("call_get1", input=7000), _get("call_get2", input=7000), DONE],
                  hang_at=3)
    _run_killing_the_holder(cluster, child, [
        {"kind": "observation_mask", "params": {"threshold": 0.5, "recent_window": 2}}])
    assert _tool_content(child.calls[3], "call_get1").startswith('[tool result for shared_state_get: "BBB')
    assert _tool_content(child.calls[3], "call_get2").startswith(json.dumps(BIG))


def test_the_sliding_windows_running_summary_survives_a_move_to_another_worker(cluster: Cluster):
    """The first eviction summarises on one worker; that worker dies; the second eviction, on
    another worker, updates the summary the first one wrote (kept in the journaled effect state)."""
    child = Child([_get("call_get0", input=7000), _get("call_get1", input=7000), _get("call_get2", input=7000),
                   DONE], hang_at=2)
    _run_killing_the_holder(cluster, child, [
        {"kind": "sliding_window", "params": {"threshold": 0.5, "recent_zone": 2, "medium_zone": 1}}])
    assert len(child.summaries) == 2, "the first eviction is not redone after the crash"
    second = json.dumps(child.summaries[1].body)
    assert "Existing summary:\\nSUMMARY-1\\n" in second
    last = json.dumps(child.calls[-1].body)
    assert "SUMMARY-2" in last and "SUMMARY-1" not in last


def test_an_offloaded_result_is_recalled_from_redis_by_another_worker(cluster: Cluster):
    """The first lookup's result is offloaded to Redis by one worker, which then dies; the ``recall``
    on the worker that continues returns it whole."""
    child = Child([_set_big(input=7000), _get("call_get1", input=7000), _get("call_get2", input=7000),
                   _get("call_get3", input=7000),
                   Reply(text="", tool_calls=[{"id": "call_recall", "name": "recall",
                                               "arguments": {"id": "call_get1"}}]),
                   DONE], hang_at=4)
    session = _run_killing_the_holder(cluster, child, [
        {"kind": "offload", "params": {"threshold": 0.5, "min_result_len": 1000, "recent_window": 1}}])
    placeholder = _tool_content(child.calls[4], "call_get1")
    assert placeholder.startswith('[offloaded: use recall("call_get1") to retrieve. Summary: "BBB')
    assert cluster.redis.hget(Keys(cluster.prefix).offload(session), "call_get1") == json.dumps(BIG)
    assert _tool_content(child.calls[5], "call_recall") == json.dumps(BIG)


def test_nudges_and_tool_scope_apply_on_the_pool_once_across_a_rebuild(cluster: Cluster):
    """A child whose lookups keep failing the same way: before its third call it is told it loops,
    to reflect (once: the nudges break the run of failed steps it counts), to write a progress
    note, and that it is stalled; the worker dies during its fourth
    call, and the one that continues repeats none of what the journaled effect states remember
    (the stall nudge) and ends the run on the stall. ``tool_scope`` hides a tool from every call."""
    # a key so long that the stall fingerprint (a result's first 200 characters) ignores the
    # runtime's own repeated-call warning appended to the error
    child = Child([_get(f"call_miss{i}", "missing-" + "m" * 200) for i in range(6)], hang_at=3)
    session = _run_killing_the_holder(cluster, child, [
        {"kind": "reflection", "params": {"failure_threshold": 2}},  # first: it counts the tool messages last
        {"kind": "loop_detect", "params": {"threshold": 2}},
        {"kind": "progress", "params": {"interval": 2}},
        {"kind": "tool_scope", "params": {"exclude": ["shared_state_delete"]}},
        {"kind": "stall_detect", "params": {"window": 2, "similarity_threshold": 0.5}},
    ], toolboxes=("state", "notes"))
    assert len(child.calls) == 4, "the stall ended the run before a fifth call"
    last = json.dumps(child.calls[-1].body, ensure_ascii=False)
    for text in ("with the same arguments 2 times", "with the same arguments 3 times",
                 "encountered 2 consecutive tool failures",
                 "You have completed 2 iterations. Write a brief progress note", "You appear stalled."):
        assert last.count(text) == 1, text
    for req in child.calls:
        offered = {t["function"]["name"] for t in req.body["tools"]}
        assert "shared_state_get" in offered and "write_note" in offered
        assert "shared_state_delete" not in offered
    entry = _entry(cluster, session)
    assert "stall detected" in json.dumps(entry)


def test_a_time_budget_counts_model_time_on_every_worker_and_not_the_time_suspended(cluster: Cluster):
    """3 s of model time: 1.8 s on the first worker (then 4 s suspended on a helper, not counted),
    the worker dies, 1.5 s more on the next one reaches the budget at the third call — neither
    earlier (suspension counted) nor later (the first worker's time lost)."""
    child = Child([Reply(text="", delay=1.8, tool_calls=[{"id": "call_deleg", "name": "delegate", "arguments": {
                      "tasks": [{"agent": "helper", "task": "help", "context": ""}]}}]),
                   _get("call_get1"),
                   Reply(text="", delay=1.5, tool_calls=[{"id": "call_get2", "name": "shared_state_get",
                                                          "arguments": {"key": "k"}}]),
                   DONE], hang_at=1,
                  helper=Reply(text="", delay=4, tool_calls=[{"name": "task_complete", "arguments": {
                      "status": "completed", "summary": "helped"}}]))
    session = _run_killing_the_holder(cluster, child, [{"kind": "time_budget", "params": {"max_duration": "3s"}}],
                                      helper=True)
    assert len(child.calls) == 3
    assert _entry(cluster, session)["completion"]["summary"] == (
        'Agent "digger" exhausted its time budget without completing the task.')
