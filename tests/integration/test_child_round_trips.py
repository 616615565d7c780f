"""What one child costs Redis on the pool, counted by a redis-server of the test's own (``MONITOR``:
the commands clients send, a script being one ``EVALSHA`` and a pipeline as many as it holds):
the claim and the finish (its last checkpoint held and written with it) are one command each, the
due index's hint folded into their scripts, so a regression that adds a command fails here."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from shelly_dist.agent import ChildRequest, DelegateEntry, RunState
from shelly_dist.chats import Message, Role
from shelly_dist.runtime.celery.journal import Journal, Lease
from shelly_dist.runtime.celery.journal.due import SHARDS
from shelly_dist.runtime.celery.settings import RuntimeSettings

from .own_redis import own_redis

MARKER = "round-trips-stop"
STATE = RunState(run_id="c", config_name="w", instance_name="w")


async def sent_during(port: int, action: Callable[[], Awaitable[Any]]) -> Counter[str]:
    """The commands clients sent while ``action`` ran (not those scripts ran), by name."""
    sent, _ = await commands_during(port, action)
    return sent


async def commands_during(port: int, action: Callable[[], Awaitable[Any]]) -> tuple[Counter[str], list[str]]:
    """The commands clients sent while ``action`` ran, by name, and the commands their scripts ran
    inside Redis (each as ``NAME key``)."""
    seen: Counter[str] = Counter()
    ran: list[str] = []
    ready = threading.Event()

    def watch() -> None:
        with redis.Redis(port=port, decode_responses=True).monitor() as m:
            ready.set()
            for cmd in m.listen():
                text = cmd.get("command", "")
                if MARKER in text:
                    return
                if cmd.get("client_type") != "lua":
                    seen[text.split(" ", 1)[0].upper()] += 1
                else:
                    ran.append(" ".join(text.split(" ", 2)[:2]))

    stopper = redis.Redis(port=port)
    stopper.ping()  # connected before counting: its handshake is not counted
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    assert ready.wait(30), "MONITOR did not start"
    await action()
    stopper.echo(MARKER)
    stopper.close()
    thread.join(30)
    assert not thread.is_alive(), "MONITOR did not reach the stop marker"
    return seen, ran


def request(i: int) -> ChildRequest:
    return ChildRequest(key=f"call_1:{i}", tool_call_id="call_1", index=i, agent="w", task=f"t{i}", depth=1,
                        visited=["lead", "w"], parent_run_id="parent", parent_agent="lead")


async def one_child(journal: Journal, child_id: str, left: int = 0) -> None:
    """A child's life on a worker, as the executor lives it for a child that replies at once:
    claimed, its final reply held, finished (the held checkpoint written with the finish);
    ``left``: its parent's children still pending after it."""
    claim = await journal.claim(child_id, "parent", uuid.uuid4().hex, "w1", fingerprint="fp")
    assert claim.lease is not None, claim.outcome
    claim.lease.hold(0, STATE, [Message(role=Role.USER, content="t"), Message(role=Role.ASSISTANT, content="ok")])
    pending, _ = await claim.lease.finish("done", DelegateEntry(agent="w", result="ok").to_json())
    assert pending == left


@dataclass
class Pool:
    port: int
    journal: Journal
    parent: Lease
    """A claimed parent that already ran one child: the scripts are loaded (no ``NOSCRIPT`` in the counts)."""


@pytest.fixture
async def pool(tmp_path: Path) -> AsyncIterator[Pool]:
    with own_redis(tmp_path) as port:
        url = f"redis://127.0.0.1:{port}/0"
        client = aioredis.Redis.from_url(url, decode_responses=True)
        try:
            journal = Journal(client, RuntimeSettings(broker_url=url, redis_url=url))
            await journal.create_root("parent", agent="lead", session="s", mode="worker", task="go", fingerprint="fp")
            claim = await journal.claim("parent", "parent", "parent-token", "w0", fingerprint="fp")
            assert claim.lease is not None
            ids, _ = await claim.lease.expect([request(0)], 1, "fp")
            await one_child(journal, ids[0])
            yield Pool(port, journal, claim.lease)
        finally:
            await client.aclose()


async def test_a_childs_claim_and_finish_are_one_command_each(pool: Pool) -> None:
    ids, _ = await pool.parent.expect([request(0)], 2, "fp")
    assert await sent_during(pool.port, lambda: one_child(pool.journal, ids[0])) == Counter({"EVALSHA": 2})
    # the finish completed the join: the parent's resume is due, and hinted where the reapers look
    hints = [await pool.journal.client.zscore(pool.journal.keys.due_shard(s), "parent") for s in range(SHARDS)]
    assert any(h is not None for h in hints)


async def test_expecting_a_child_is_one_command(pool: Pool) -> None:
    assert await sent_during(pool.port, lambda: pool.parent.expect([request(0)], 2, "fp")) == Counter({"EVALSHA": 1})


CALLS_PER_CHILD = 26
"""Commands a child's claim and finish run inside Redis (on a single Redis, the due index's hint
included), for a child that is not its parent's last (26 since the claim ends the task's receipt,
one ``DEL``: issue 41's mark would otherwise hold the reaper back from the run's next deadline).
Each costs Redis's one thread ≈ 2 µs on top of its own work (docs/benchmarks.md, "Fewer calls
inside the scripts"): more fails here."""


async def test_a_childs_claim_and_finish_run_at_most_their_budget_of_calls_inside_redis(pool: Pool) -> None:
    ids, _ = await pool.parent.expect([request(0), request(1)], 2, "fp")
    _, ran = await commands_during(pool.port, lambda: one_child(pool.journal, ids[0], left=1))
    assert len(ran) <= CALLS_PER_CHILD, (len(ran), ran)


def early(journal: Journal) -> Journal:
    """The journal with ``requeue_after`` shorter than the lease: a parent's resume may then come due
    before the finishing child's own deadline, so the finish that makes it due hints it."""
    return Journal(journal.client, replace(journal.settings, requeue_after=journal.settings.lease / 2))


async def test_a_finish_that_leaves_its_parent_waiting_writes_no_due_hint(pool: Pool) -> None:
    ids, _ = await pool.parent.expect([request(0), request(1)], 2, "fp")
    first = await early(pool.journal).claim(ids[0], "parent", uuid.uuid4().hex, "w1", fingerprint="fp")
    assert first.lease is not None
    _, ran = await commands_during(
        pool.port, lambda: first.lease.finish("done", DelegateEntry(agent="w", result="ok").to_json()))  # type: ignore[union-attr]
    assert ran and not [c for c in ran if ":due:" in c], ran  # the claim hinted its lease's deadline


async def test_with_requeue_after_below_the_lease_the_finish_completing_a_join_hints_the_resume(pool: Pool) -> None:
    ids, _ = await pool.parent.expect([request(0), request(1)], 2, "fp")
    await one_child(pool.journal, ids[0], left=1)
    last = await early(pool.journal).claim(ids[1], "parent", uuid.uuid4().hex, "w1", fingerprint="fp")
    assert last.lease is not None
    _, ran = await commands_during(
        pool.port, lambda: last.lease.finish("done", DelegateEntry(agent="w", result="ok").to_json()))  # type: ignore[union-attr]
    assert [c for c in ran if c.startswith("ZADD ") and ":due:" in c], ran


async def test_on_default_settings_no_finish_writes_a_due_hint(pool: Pool) -> None:
    ids, _ = await pool.parent.expect([request(0)], 2, "fp")
    claim = await pool.journal.claim(ids[0], "parent", uuid.uuid4().hex, "w1", fingerprint="fp")
    assert claim.lease is not None
    _, ran = await commands_during(
        pool.port, lambda: claim.lease.finish("done", DelegateEntry(agent="w", result="ok").to_json()))  # type: ignore[union-attr]
    assert ("HINCRBY" in " ".join(ran)) and not [c for c in ran if ":due:" in c], ran  # the join, no hint
