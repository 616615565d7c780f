"""An idle pool's reaping costs Redis what is due, not what is alive (DESIGN §3 rule 17): the
commands a reaper's scan sends are counted by a redis-server of the test's own (``INFO
commandstats``, which also counts the commands scripts run), for 10 and for 1,000 live idle
trees."""

from __future__ import annotations

import time
from pathlib import Path

import redis.asyncio as aioredis

from shelly_dist.runtime.celery.journal import Journal
from shelly_dist.runtime.celery.journal.due import SHARDS
from shelly_dist.runtime.celery.settings import RuntimeSettings
from shelly_dist.runtime.celery.worker.reaper import Reaper

from .own_redis import own_redis

SCANS = 5


async def commands(client: aioredis.Redis) -> int:
    """Every command the server ran since its statistics were reset (scripts' commands included)."""
    stats = await client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k not in ("cmdstat_info", "cmdstat_config"))


async def commands_per_scan(tmp_path: Path, trees: int) -> float:
    """Commands per scan of two reapers over ``trees`` live idle trees: batch items queued (their
    re-send time ahead) and sessions waiting on an answer (no deadline at all)."""
    (tmp_path / str(trees)).mkdir()
    with own_redis(tmp_path / str(trees)) as port:
        url = f"redis://127.0.0.1:{port}/0"
        client = aioredis.Redis.from_url(url, decode_responses=True)
        try:
            journal = Journal(client, RuntimeSettings(broker_url=url, redis_url=url))
            for i in range(trees):
                mode = "worker" if i % 2 else "coordinator"
                await journal.create_root(f"tree{i}", agent="lead", session="s", mode=mode, task="t", fingerprint="fp")

            async def never(name: str, args: list[str], kwargs: dict[str, str]) -> None:
                raise AssertionError(f"an idle tree was re-sent: {args}")

            reapers = [Reaper(journal, never, "fp", name=f"w{i}") for i in range(2)]
            for reaper in reapers:
                await reaper.scan()  # registers its generation (every 10 s, not every scan)
            await client.config_resetstat()
            started = time.monotonic()
            for _ in range(SCANS):
                for reaper in reapers:
                    assert await reaper.scan() == 0
            assert time.monotonic() - started < 10, "the scans were too slow to count as one period"
            return (await commands(client)) / (SCANS * len(reapers))
        finally:
            await client.aclose()


async def test_a_reapers_scan_costs_the_same_for_10_and_1000_live_idle_trees(tmp_path: Path) -> None:
    few, many = await commands_per_scan(tmp_path, 10), await commands_per_scan(tmp_path, 1000)
    assert few == many, f"{few} commands per scan with 10 idle trees, {many} with 1,000"
    assert many <= SHARDS, f"{many} commands per scan"
