"""The live view shows remote sub-agents: worker, depth, status and tokens from stream events."""

from __future__ import annotations

from shelly_dist import events
from shelly_dist.cli.events import _line
from shelly_dist.cli.live import Board
from shelly_dist.events import Event


def test_remote_run_events_fill_worker_depth_status_and_tokens():
    board = Board()
    started = board.apply(Event(kind=events.RUN_STARTED, agent="coder-fix-1", data={"worker": "w1@host", "depth": 1}))
    board.apply(Event(kind=events.MESSAGE_ADDED, agent="coder-fix-1",
                      data={"role": "assistant", "text": "", "tool_calls": ["delegate"],
                            "usage": {"input_tokens": 10, "output_tokens": 5}}))
    board.apply(Event(kind=events.RUN_WAITING, agent="coder-fix-1", data={"waiting_on": 2}))
    row = board.rows["coder-fix-1"]
    assert started == "  ▶ coder-fix-1 started on w1@host (depth 1)"
    assert (row.worker, row.depth, row.status, row.tokens) == ("w1@host", 1, "waiting", 15)
    board.apply(Event(kind=events.RUN_RESUMED, agent="coder-fix-1", data={"worker": "w2@host"}))
    assert (row.worker, row.status) == ("w2@host", "running")
    done = board.apply(Event(kind=events.RUN_FINISHED, agent="coder-fix-1",
                             data={"status": "done", "entry": {"agent": "coder", "result": "fixed"}}))
    assert row.status == "done" and done == "  ✔ coder-fix-1 done on w2@host (15 tokens)"


def test_canceled_remote_run_is_shown_as_canceled():
    board = Board()
    board.apply(Event(kind=events.RUN_STARTED, agent="w-a-1", data={"worker": "w1", "depth": 1}))
    line = board.apply(Event(kind=events.RUN_FINISHED, agent="w-a-1",
                             data={"status": "canceled", "entry": {"agent": "w", "error": "task canceled"}}))
    assert board.rows["w-a-1"].status == "canceled" and "✗ w-a-1 canceled" in line



def test_a_failed_run_is_shown_with_its_reason_even_before_it_started():
    board = Board()
    line = board.apply(Event(kind=events.RUN_FINISHED, agent="x", data={
        "status": "failed", "worker": "w2", "entry": {"agent": "x", "error": "run r: config fingerprint mismatch"},
        "usage": {}}))
    assert line == "✗ x failed on w2: run r: config fingerprint mismatch (0 tokens)"


def test_an_embedded_run_has_no_worker_and_its_tokens_come_with_its_end():
    board = Board()
    started = board.apply(Event(kind=events.RUN_STARTED, agent="k-a-1", data={"worker": "", "depth": 1}))
    done = board.apply(Event(kind=events.RUN_FINISHED, agent="k-a-1", data={
        "status": "done", "worker": "", "entry": {"agent": "k", "result": "ok"},
        "usage": {"input_tokens": 7, "output_tokens": 3}}))
    assert (started, done) == ("  ▶ k-a-1 started (depth 1)", "  ✔ k-a-1 done (10 tokens)")


def test_a_handoff_is_shown_as_one_not_as_a_success():
    board = Board()
    board.apply(Event(kind=events.RUN_STARTED, agent="a-x-1", data={"worker": "w1", "depth": 1}))
    line = board.apply(Event(kind=events.RUN_FINISHED, agent="a-x-1", data={
        "status": "done", "worker": "w1", "entry": {"agent": "a", "handoff": "b"}}))
    assert line == "  ↪ a-x-1 handed off to b on w1 (0 tokens)"


def test_events_lines_say_why_a_run_failed():
    line = _line(Event(kind=events.RUN_FINISHED, agent="x", run_id="r1", timestamp=0, data={
        "status": "failed", "worker": "w1", "entry": {"agent": "x", "error": "boom"}}))
    assert line.endswith("run_finished       failed on w1: boom")


def test_a_child_out_of_its_budget_is_failed_with_its_completions_summary():
    board = Board()
    line = board.apply(Event(kind=events.RUN_FINISHED, agent="c-x-1", data={
        "status": "failed", "worker": "", "entry": {"agent": "c", "result": "s", "completion": {
            "status": "failed", "summary": 'Agent "c" exhausted its token budget without completing the task.'}}}))
    assert line == '✗ c-x-1 failed: Agent "c" exhausted its token budget without completing the task. (0 tokens)'


def test_a_spawn_and_its_announcement_are_shown_on_the_parents_row():
    board = Board()
    spawned = board.apply(Event(kind=events.RUN_SPAWNED, agent="lead", run_id="r1",
                                data={"child_run": "r1-ab", "child_agent": "worker"}))
    assert spawned == "  lead ⇢ spawned worker (r1-ab)"
    heard = board.apply(Event(kind=events.SPAWN_ANNOUNCED, agent="lead", run_id="r1",
                              data={"child_run": "r1-ab", "child_agent": "worker", "state": "completed"}))
    assert heard == "  lead ⇠ heard worker: completed" and board.rows["lead"].action == "heard worker (completed)"
    assert _line(Event(kind=events.SPAWN_ANNOUNCED, agent="lead", run_id="r1", data={
        "child_run": "r1-ab", "child_agent": "worker", "state": "failed"})).endswith("worker (r1-ab) failed")


def test_a_run_waiting_for_its_providers_budget_says_so_in_the_live_view():
    import time

    board = Board()
    board.apply(Event(kind=events.RUN_STARTED, agent="coder-1", data={"worker": "w1", "depth": 1}))
    line = board.apply(Event(kind=events.MODEL_WAITING, agent="coder-1", data={
        "wait": "governor", "reason": "the openai key: rpm", "due_at": time.time() + 12.4}))
    board.apply(Event(kind=events.RUN_WAITING, agent="coder-1", data={"waiting_on": 0,
                                                                      "model": "the openai key: rpm"}))
    row = board.rows["coder-1"]
    assert (row.status, row.action) == ("waiting", "waiting for the openai key: rpm")
    assert line in ("  ⏸ coder-1 waiting for the openai key: rpm (12s)",
                    "  ⏸ coder-1 waiting for the openai key: rpm (11s)")


def test_a_reply_being_streamed_shows_its_latest_words_until_it_is_whole():
    board = Board()
    for data in ({"text": "", "begin": True}, {"text": "Blue light "}, {"text": "scatters"}):
        assert board.apply(Event(kind=events.MESSAGE_DELTA, agent="w-1", data=data)) is None  # no line of its own
    row = board.rows["w-1"]
    assert (row.writing, row.action) == ("Blue light scatters", "✎ Blue light scatters")
    board.apply(Event(kind=events.MESSAGE_DELTA, agent="w-1", data={"text": "Bl", "begin": True}))  # a retry
    assert row.writing == "Bl"
    board.apply(Event(kind=events.MESSAGE_ADDED, agent="w-1", data={"role": "assistant", "text": "Blue."}))
    assert (row.writing, row.action) == ("", "Blue.")


def test_a_run_waiting_for_a_provider_batch_shows_the_vendor_batch_and_its_size():
    board = Board()
    board.apply(Event(kind=events.RUN_STARTED, agent="writer-1", data={"worker": "w1", "depth": 1}))
    line = board.apply(Event(kind=events.BATCH_POLLING, agent="writer-1", data={
        "provider": "vendor", "vendor": "openai", "batch_id": "batch_abc", "count": 37}))
    row = board.rows["writer-1"]
    assert (row.status, row.action) == ("waiting", "waiting for openai batch batch_abc (37 requests)")
    assert line == "    writer-1 waiting for openai batch batch_abc (37 requests)"
    fell = board.apply(Event(kind=events.BATCH_FALLBACK, agent="writer-1", data={
        "provider": "vendor", "vendor": "openai", "reason": "expired", "batch_id": "batch_abc"}))
    assert fell == "    writer-1: openai batch fallback (expired), calling directly"


def test_shelly_events_names_the_vendor_batch_of_a_batch_event():
    line = _line(Event(kind=events.BATCH_POLLING, agent="writer-1", run_id="r1",
                       data={"vendor": "anthropic", "batch_id": "msgbatch_1", "count": 3}))
    assert line.endswith("batch_polling      anthropic msgbatch_1 (3 requests)")


def test_the_sends_own_run_start_and_end_print_once_through_agent_start_and_end():
    board = Board()
    lines = [board.apply(Event(kind=events.AGENT_START, agent="lead", data={"depth": 0})),
             board.apply(Event(kind=events.RUN_STARTED, agent="lead", data={"worker": "", "depth": 0, "parent": ""})),
             board.apply(Event(kind=events.RUN_FINISHED, agent="lead",
                               data={"status": "done", "entry": {"agent": "lead", "result": "ok"}})),
             board.apply(Event(kind=events.AGENT_END, agent="lead", data={}))]
    assert [line for line in lines if line] == ["▶ lead started (depth 0)", "✔ lead finished (0 tokens)"]


def test_a_root_run_watched_from_elsewhere_prints_its_start_and_end():
    board = Board()
    started = board.apply(Event(kind=events.RUN_STARTED, agent="lead", data={"worker": "w1", "depth": 0, "parent": ""}))
    done = board.apply(Event(kind=events.RUN_FINISHED, agent="lead",
                             data={"status": "done", "worker": "w1", "entry": {"agent": "lead", "result": "ok"}}))
    assert started == "▶ lead started on w1 (depth 0)" and done == "✔ lead done on w1 (0 tokens)"
