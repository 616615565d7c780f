"""Every stopper of a subtree on the pool goes through one mechanism (:mod:`.stops`): the same runs
are flagged with the stopper's reason (so each ends ``canceled`` with it as its entry's error at
its next step), runs already ended are left alone, and each flagged run is woken on the cancel
channel. A tree's cancel is the same at the tree's scope (fakeredis, Lua)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import fakeredis
import pytest

from shelly_dist.agent.children import run_id_of
from shelly_dist.agent.stops import DELEGATION_CLOSED, SIBLING_FAILED, TASK_CANCELED
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.children import cancel, round_timeout, stops
from shelly_dist.runtime.celery.children.policy import PoolPolicy

A, F = "1:call_1:0", "1:call_1:1"
"""The join keys of two siblings under the root ``p``: ``a`` (the subtree stopped) and ``f``."""


class Tree:
    """``p`` (waiting) → ``a`` (running) and ``f`` (failed); ``a`` → ``a1`` (waiting) and ``a2``
    (done); ``a1`` → ``a11`` (queued)."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.client, self.keys = client, keys
        self.a, self.f = run_id_of("p", A), run_id_of("p", F)
        self.a1, self.a2 = run_id_of(self.a, "1:c:0"), run_id_of(self.a, "1:c:1")
        self.a11 = run_id_of(self.a1, "1:c:0")
        self.woken: list[str] = []

    async def build(self) -> Tree:
        runs = {"p": ("waiting", "", ""), self.a: ("running", "p", A), self.f: ("failed", "p", F),
                self.a1: ("waiting", self.a, "1:c:0"), self.a2: ("done", self.a, "1:c:1"),
                self.a11: ("queued", self.a1, "1:c:0")}
        for rid, (status, parent, key) in runs.items():
            await self.client.hset(self.keys.run(rid), mapping={"id": rid, "root": "p", "status": status,
                                                                 "parent": parent, "parent_key": key, "mode": "worker"})
            await self.client.sadd(self.keys.tree_runs("p"), rid)
            if parent:
                await self.client.sadd(self.keys.run_expected(parent), key)
                if status not in ("done", "failed"):
                    await self.client.hincrby(self.keys.run(parent), "pending", 1)
        publish = self.client.publish

        async def recording(channel: str, message: str) -> Any:
            if channel == self.keys.cancel_channel():
                self.woken.append(message)
            return await publish(channel, message)

        self.client.publish = recording
        return self

    async def stops(self) -> dict[str, str | None]:
        return {rid: await self.client.hget(self.keys.run(rid), "stop")
                for rid in ("p", self.a, self.f, self.a1, self.a2, self.a11)}

    def subtree_stopped(self, reason: str) -> dict[str, str | None]:
        """What every stopper of ``a``'s subtree leaves: its unfinished runs flagged, nothing else."""
        return {"p": None, self.a: reason, self.f: None, self.a1: reason, self.a2: None, self.a11: reason}


@pytest.fixture
async def tree() -> Tree:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    return await Tree(client, Keys(f"t:{uuid.uuid4().hex[:6]}:")).build()


async def test_fail_fast_stops_a_failed_childs_sibling_with_its_whole_subtree(tree: Tree):
    await PoolPolicy(tree.client, tree.keys).stop_siblings("p", F)
    assert await tree.stops() == tree.subtree_stopped(SIBLING_FAILED)
    assert sorted(tree.woken) == sorted([tree.a, tree.a1, tree.a11])


async def test_a_cancelled_spawned_run_stops_with_its_whole_subtree(tree: Tree):
    await stops.stop_runs(tree.client, tree.keys, [tree.a], TASK_CANCELED)  # Spawner.cancel, stop_spawned
    assert await tree.stops() == tree.subtree_stopped(TASK_CANCELED)
    assert sorted(tree.woken) == sorted([tree.a, tree.a1, tree.a11])


async def test_an_interactive_child_past_its_round_timeout_stops_with_its_whole_subtree(tree: Tree):
    member = {"parent": "p", "root": "p", "key": A, "child": tree.a, "agent": "w", "id": "d1", "limit": 1.0}
    await tree.client.zadd(tree.keys.delegations_due(), {json.dumps(member): int(time.time() * 1000) - 1})
    resumed: list[str] = []

    async def resume(run_id: str) -> None:
        resumed.append(run_id)

    assert await round_timeout.expire_due(tree.client, tree.keys, retention=60, requeue_after=5, resume=resume) == 1
    assert resumed == ["p"]  # its entry joined: the waiting parent goes on
    assert await tree.stops() == tree.subtree_stopped(DELEGATION_CLOSED)
    assert sorted(tree.woken) == sorted([tree.a, tree.a1, tree.a11])


async def test_a_child_its_caller_flagged_itself_is_woken_and_its_subtree_stopped(tree: Tree):
    await tree.client.hset(tree.keys.run(tree.a), "stop", DELEGATION_CLOSED)  # as ANSWER_CHILD does on close
    flagged = await stops.stop_runs(tree.client, tree.keys, [], DELEGATION_CLOSED, flagged=[tree.a])
    assert sorted(flagged) == sorted([tree.a1, tree.a11])
    assert await tree.stops() == tree.subtree_stopped(DELEGATION_CLOSED)
    assert sorted(tree.woken) == sorted([tree.a, tree.a1, tree.a11])


async def test_cancelling_the_tree_flags_its_root_ends_the_idle_runs_and_wakes_the_tree(tree: Tree):
    runs = await cancel.cancel_tree(tree.client, tree.keys, "p")
    assert sorted(runs) == sorted(["p", tree.a, tree.f, tree.a1, tree.a2, tree.a11])
    assert await tree.client.hget(tree.keys.run("p"), "canceled") == "1"
    statuses = {rid: await tree.client.hget(tree.keys.run(rid), "status") for rid in runs}
    assert statuses == {"p": "canceled", tree.a: "running", tree.f: "failed", tree.a1: "canceled",
                        tree.a2: "done", tree.a11: "canceled"}  # the running one ends at its wake-up
    assert tree.woken == ["p"]


async def test_a_run_claimed_between_the_trees_read_and_its_cancel_is_left_running(
        tree: Tree, monkeypatch: pytest.MonkeyPatch):
    """The cancel's marking re-reads each status in its script: a queued run a worker claims just
    before the marking reaches Redis keeps ``running`` (it ends canceled at its own wake-up)."""
    real = cancel.run_script

    async def claimed_first(script: Any, keys: list[str], args: list[Any], **kw: Any) -> Any:
        if tree.keys.run(tree.a11) in keys:
            await tree.client.hset(tree.keys.run(tree.a11), "status", "running")
        return await real(script, keys, args, **kw)

    monkeypatch.setattr(cancel, "run_script", claimed_first)
    await cancel.cancel_tree(tree.client, tree.keys, "p")
    assert await tree.client.hget(tree.keys.run(tree.a11), "status") == "running"
    assert await tree.client.hget(tree.keys.run(tree.a1), "status") == "canceled"
