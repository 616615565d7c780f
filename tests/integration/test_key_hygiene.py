"""No key lives forever: cancels never re-create expired records, the session's run index is
trimmed, and a whole session of work (delegation, boards, a batch, a cancel) leaves no key
without a TTL."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

import pytest

from shelly_dist.events import Event
from shelly_dist.redisio.connection import connect
from shelly_dist.runtime.celery.children.cancel import cancel_session, cancel_tree
from shelly_dist.runtime.celery.journal import Journal
from shelly_dist.runtime.celery.journal import runs as journal_module
from shelly_dist.runtime.celery.journal.stream import StreamSink
from shelly_dist.runtime.celery.settings import RuntimeSettings

from .cluster import Cluster, complete, delegate, scripted, wait_until
from .keys import assert_all_keys_have_ttl
from .ops import run_json

pytestmark = pytest.mark.integration

SESSION = "0123456789abcdef"


@pytest.fixture
async def journal(redis_url: str, key_prefix: str) -> AsyncIterator[Journal]:
    client = connect(redis_url)
    settings = RuntimeSettings(broker_url=redis_url, redis_url=redis_url, key_prefix=key_prefix)
    yield Journal(client, settings)
    await client.aclose()


async def root(journal: Journal, run_id: str) -> None:
    await journal.create_root(run_id, agent="a", session=SESSION, mode="worker", task="t", fingerprint="fp")


async def test_cancelling_an_expired_root_does_not_recreate_its_record(journal: Journal):
    await root(journal, "gone")
    await journal.client.delete(journal.keys.run("gone"))  # what its TTL does after retention
    assert await cancel_tree(journal.client, journal.keys, "gone") == []
    assert not await journal.client.exists(journal.keys.run("gone"))


async def test_cancelling_a_session_skips_its_expired_roots(journal: Journal):
    await root(journal, "alive")
    await root(journal, "expired")
    await journal.client.delete(journal.keys.run("expired"))
    assert await cancel_session(journal.client, journal.keys, SESSION) == ["alive"]
    assert await journal.client.hget(journal.keys.run("alive"), "canceled") == "1"
    assert not await journal.client.exists(journal.keys.run("expired"))


async def test_the_session_run_index_drops_roots_older_than_retention(journal: Journal):
    index = journal.keys.session_runs(SESSION)
    await journal.client.zadd(index, {"ancient": time.time() - journal.settings.retention - 60})
    await root(journal, "fresh")
    assert await journal.client.zrange(index, 0, -1) == ["fresh"]


async def test_the_session_run_index_keeps_only_the_newest_roots(journal: Journal, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(journal_module, "SESSION_RUNS_MAX", 3)
    for i in range(5):
        await root(journal, f"r{i}")
    assert await journal.client.zrange(journal.keys.session_runs(SESSION), 0, -1) == ["r2", "r3", "r4"]


async def test_a_root_created_with_its_id_as_idempotency_key_is_created_once(journal: Journal):
    assert await journal.create_root("once", agent="a", session=SESSION, mode="worker", task="first",
                                     fingerprint="fp", if_absent=True)
    assert not await journal.create_root("once", agent="b", session=SESSION, mode="worker", task="second",
                                         fingerprint="fp", if_absent=True)
    assert (await journal.fields("once"))["task"] == "first"


def test_a_session_of_delegation_boards_batch_and_cancel_leaves_no_key_without_ttl(cluster: Cluster):
    cluster.write_config(
        [scripted(
            lead=[delegate(("scribe", "note it")),
                  {"tool_calls": [{"name": "shared_state_get", "arguments": {"key": "finding"}}]},
                  "lead done"],
            scribe=[{"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "finding", "value": 42}}]},
                    {"tool_calls": [{"name": "shared_tasks_create", "arguments": {"title": "follow up"}}]},
                    complete("noted")],
            solver=["answer to {task}"],
            boss=[delegate(("sleeper", "wait")), "unreachable"],
            sleeper=[{"text": "too late", "delay": 60}],
        )],
        [{"name": "lead", "toolboxes": ["state", "tasks"], "options": {"max_delegation_depth": 1}},
         {"name": "scribe", "toolboxes": ["state", "tasks"]},
         {"name": "solver"},
         {"name": "boss", "options": {"max_delegation_depth": 1}},
         {"name": "sleeper"}],
    )
    cluster.start_worker("w1")
    out = run_json(cluster, "delegate and note")
    assert out["reply"] == "lead done"
    items = [json.dumps({"id": f"q{i}", "agent": "solver", "task": f"q{i}"}) for i in range(3)]
    (cluster.root / "in.jsonl").write_text("\n".join(items) + "\n")
    batch = cluster.shelly("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet")
    assert batch.returncode == 0, batch.stderr
    slow = cluster.popen("run", "wait for the sleeper", "--agent", "boss", "--json")
    try:
        sleeping = wait_until(lambda: next((k for k in cluster.redis.scan_iter(match=cluster.prefix + "run:*")
                                            if cluster.redis.type(k) == "hash"
                                            and cluster.redis.hget(k, "agent") == "sleeper"
                                            and cluster.redis.hget(k, "status") == "running"), None),
                              60, "the sleeper running on the pool")
        session = cluster.redis.hget(sleeping, "session")
        cancel = cluster.shelly("cancel", "--session", session)
        assert cancel.returncode == 0, cancel.stderr
        slow.communicate(timeout=60)
    finally:
        if slow.poll() is None:
            slow.kill()
            slow.wait()
    assert_all_keys_have_ttl(cluster.redis, cluster.prefix)


async def test_the_first_events_of_a_session_get_a_ttl_even_before_a_journal_write(journal: Journal):
    sink = StreamSink(journal.client, journal.keys, SESSION, retention=journal.settings.retention)
    sink(Event(kind="run_started", agent="a", run_id="r"))
    await sink.flush(expire=False)  # what a worker does before its first checkpoint
    assert await journal.client.ttl(journal.keys.events(SESSION)) > 0
