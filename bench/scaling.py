"""8. Scaling: 1, 2 and 4 worker processes (``--workers 1,2,4,8,16``) against a 50 ms model.

Each configuration runs at steady state for at least ``scaling_seconds`` (10 s at full size):
enough delegations of N children (200) are kept in flight that the pool never drains, and the
figure is children per second from the first start to the last end; the reference is the first
configuration's rate in the same invocation. Workers are added, never restarted, between the
steps. So a reader sees which process saturates, the note gives, per configuration, the CPU of
the coordinator (this process, which runs the top-level agents), of each worker process and of
Redis (``INFO cpu``; the shared Redis also serves whatever else runs on the machine) over the
same window, as a share of one core, the coordinator's, the workers' and Redis's CPU per child,
and where each single process would cap the pool (:func:`ceilings`: the worker processes whose
work saturates that process's one core).
With the broker on a redis-server of its own (``BENCH_BROKER_URL``), the note splits Redis into
the journals' server and the broker's. With the journals on a Redis Cluster
(``BENCH_REDIS_URL=redis+cluster://…``, :mod:`bench.cluster`), it gives the journals' CPU per
primary node, then their total, and the messages the nodes sent over the cluster bus per child
(``CLUSTER INFO``: those forwarding a classic ``PUBLISH``, and all, pings included).
"""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time

import redis

from bench.cluster import bus_messages, is_cluster, journal_nodes
from bench.context import STEP, Bench
from bench.harness import REDIS_URL, delegate_once, submit_once
from bench.procs import cpu_seconds
from bench.report import Row
from bench.servers import redis_cpu
from shelly_dist.engine import Engine

NAME = "scaling"
KEYS = {1: "8a", 2: "8b", 4: "8c"}


async def steady(engine: Engine, b: Bench, workers: int) -> float:
    """Children per second with enough delegations in flight to keep ``workers`` busy, for at
    least ``scaling_seconds``."""
    n = b.sizes.scaling_n
    lanes = max(2, math.ceil(workers * b.sizes.concurrency / n) + 1)
    stop_at = time.perf_counter() + b.sizes.scaling_seconds
    done = 0

    once = submit_once if b.sizes.scaling_roots == "pool" else delegate_once

    async def lane() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            await b.step(f"scaling × {workers}: a delegation of {n} children", STEP, once(engine, "scale"))
            done += n

    start = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(lanes)))
    return done / (time.perf_counter() - start)


def ceilings(workers: float, singles: dict[str, float]) -> str:
    """Where each single process would cap the pool: with ``workers`` seconds of worker CPU and
    ``cpu`` seconds of a one-core process over the same children, that process saturates its core
    when the pool has ``workers / cpu`` worker processes, each busy on a core of its own."""
    caps = ", ".join(f"{name} {workers / cpu:.0f}" if cpu > 0 else f"{name} –" for name, cpu in singles.items())
    return f"one core of each caps the pool at (worker processes): {caps}"


def _journals_note(cpu: list[float], seconds: float, children: float) -> tuple[str, str]:
    """The journals' share of a core and CPU per child, per cluster node and in total."""
    share = "/".join(f"{100 * c / seconds:.0f}" for c in cpu)
    per_child = "/".join(f"{1000 * c / children:.2f}" for c in cpu)
    return (f"journals ({len(cpu)} cluster nodes) {share} (total {100 * sum(cpu) / seconds:.0f})",
            f"journals' Redis ({len(cpu)} cluster nodes) {per_child} ms (total {1000 * sum(cpu) / children:.2f} ms)")


def _bus(nodes: list[redis.Redis]) -> tuple[int, int]:
    """Cluster bus messages sent so far, summed over the nodes (:func:`bench.cluster.bus_messages`)."""
    counts = [bus_messages(node) for node in nodes]
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


async def measure(b: Bench) -> list[Row]:
    n, c = b.sizes.scaling_n, b.sizes.concurrency
    rates: dict[int, list[float]] = {}
    notes: dict[int, str] = {}
    me, nodes = os.getpid(), journal_nodes(REDIS_URL)
    broker = redis.Redis.from_url(b.stack.broker_url)
    cluster = is_cluster(REDIS_URL)
    apart = cluster or nodes[0].info("server")["run_id"] != broker.info("server")["run_id"]
    try:
        async with b.stack.engine() as engine:
            for k in b.sizes.scaling_workers:
                await b.stack.use_workers({f"scale{i}": c for i in range(k)})
                pids = [b.stack.worker_pid(f"scale{i}") for i in range(k)]
                await b.step(f"scaling × {k}: warm-up delegation", STEP, delegate_once(engine, "one"))
                rates[k] = []
                coordinator, workers, brokers, children, seconds = 0.0, [0.0] * k, 0.0, 0.0, 0.0
                servers = [0.0] * len(nodes)
                bus = [0, 0]
                for _ in range(b.runs):
                    before = (cpu_seconds(me), [cpu_seconds(p) for p in pids], [redis_cpu(x) for x in nodes],
                              time.perf_counter(), redis_cpu(broker) if apart else 0.0)
                    bus_before = _bus(nodes) if cluster else (0, 0)
                    rate = await steady(engine, b, k)
                    elapsed = time.perf_counter() - before[3]
                    rates[k].append(rate)
                    coordinator += cpu_seconds(me) - before[0]
                    workers = [w + cpu_seconds(p) - b0 for w, p, b0 in zip(workers, pids, before[1], strict=True)]
                    servers = [s + redis_cpu(x) - b0 for s, x, b0 in zip(servers, nodes, before[2], strict=True)]
                    brokers += redis_cpu(broker) - before[4] if apart else 0.0
                    bus_after = _bus(nodes) if cluster else (0, 0)
                    bus = [bus[i] + bus_after[i] - bus_before[i] for i in range(2)]
                    children, seconds = children + rate * elapsed, seconds + elapsed
                each = "/".join(f"{100 * w / seconds:.0f}" for w in workers)
                server = sum(servers)
                if cluster:
                    journals_share, journals_per_child = _journals_note(servers, seconds, children)
                    redis_share = f"Redis: {journals_share}, broker {100 * brokers / seconds:.0f}"
                    redis_per_child = (f"{journals_per_child}, broker's {1000 * brokers / children:.2f} ms; "
                                       f"cluster bus messages per child: {bus[0] / children:.2f} PUBLISH, "
                                       f"{bus[1] / children:.2f} in all")
                else:
                    redis_share = (f"Redis: journals {100 * server / seconds:.0f}, broker {100 * brokers / seconds:.0f}"
                                   if apart else f"Redis {100 * server / seconds:.0f}")
                    redis_per_child = (f"journals' Redis {1000 * server / children:.2f} ms, broker's "
                                       f"{1000 * brokers / children:.2f} ms" if apart
                                       else f"Redis {1000 * server / children:.2f} ms")
                singles = {"coordinator": coordinator, ("busiest journals node" if cluster else
                           "journals' Redis" if apart else "Redis"): max(servers)}
                if apart:
                    singles["broker"] = brokers
                notes[k] = (f"CPU, % of a core: coordinator {100 * coordinator / seconds:.0f}, workers {each}, "
                            f"{redis_share}; per child: coordinator {1000 * coordinator / children:.2f} ms, "
                            f"workers {1000 * sum(workers) / children:.2f} ms, {redis_per_child}; "
                            f"{ceilings(sum(workers), singles)}; {seconds / b.runs:.0f} s per run")
    finally:
        for node in nodes:
            node.close()
        broker.close()
    base = rates[b.sizes.scaling_workers[0]]
    one = statistics.median(base)
    return [
        Row(KEYS.get(k, f"8-{k}"), f"scaling: {k} worker process{'es' if k > 1 else ''} × {c}, "
            f"delegations of {n} children at {b.sizes.scaling_latency * 1000:g} ms, steady state"
            f"{', roots on the pool' if b.sizes.scaling_roots == 'pool' else ''}", "/s", r,
            f"{b.sizes.scaling_workers[0]} worker{'s' if b.sizes.scaling_workers[0] > 1 else ''}", base,
            [x / one for x in r], note=notes[k])
        for k, r in rates.items()
    ]
