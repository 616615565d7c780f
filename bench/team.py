"""The sizes of each scenario and the one config that holds every scenario's agents.

Orchestrators are scripted (they answer at once, so their cost is the runtime's, not a model's);
the children call the loopback model servers over HTTP in the OpenAI wire format, as a real
provider would. One config serves every scenario, so workers started once serve several.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Sizes:
    overhead_reps: int = 20
    """Sequential delegations (and raw round trips) averaged per run."""
    fanout_n: int = 500
    fanout_latency: float = 1.0
    throughput_n: int = 200
    concurrency: int = 50
    """``--concurrency`` of the general worker and of the raw Celery reference worker."""
    embed_n: int = 200
    embed_latency: float = 0.5
    commands_k: int = 20
    memory_n: int = 500
    scaling_n: int = 200
    scaling_latency: float = 0.05
    scaling_workers: tuple[int, ...] = (1, 2, 4)
    """Worker process counts of the scaling row (``--workers``)."""
    scaling_seconds: float = 10.0
    """Seconds each scaling configuration runs at steady state, at least (per run)."""
    scaling_roots: str = "pool"
    """Where the scaling row's top-level runs are driven (``--roots``): ``coordinator``, by the
    bench process; ``pool``, submitted to the pool (each root's loop, and the joins of its children,
    run on a worker, as a ``shelly batch`` item's do)."""
    batch_n: int = 2000
    """Items of each ``shelly batch`` run (row 10; the 10,000-item batch is a slow test)."""


FULL = Sizes()
QUICK = Sizes(overhead_reps=2, fanout_n=10, fanout_latency=0.2, throughput_n=10, concurrency=8, embed_n=10,
              embed_latency=0.05, commands_k=2, memory_n=10, scaling_n=10, scaling_seconds=0.5, batch_n=20)


def _delegate(agent: str, n: int, task: str = "job") -> dict[str, Any]:
    tasks = [{"agent": agent, "task": f"{task} {i}", "context": ""} for i in range(n)]
    return {"tool_calls": [{"name": "delegate", "arguments": {"tasks": tasks}}]}


def _complete(summary: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_complete", "arguments": {"status": "completed", "summary": summary}}]}


def _openai(name: str, url: str) -> dict[str, Any]:
    return {"name": name, "kind": "openai", "model": "bench", "base_url": url, "api_key": "bench",
            "rate_limit": {"max_retries": 0}}


def config(sizes: Sizes, models: dict[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(providers, agents) for ``sizes``; ``models`` maps model names to loopback URLs."""
    script = {
        "one": [_delegate("instant_child", 1), "done"],
        "ten": [_delegate("instant_child", 10), "done"],
        "fan": [_delegate("slow_child", sizes.fanout_n), "done"],
        "burst": [_delegate("instant_child", sizes.throughput_n), "done"],
        "hold": [_delegate("hold_child", sizes.memory_n), "done"],
        "scale": [_delegate("fifty_child", sizes.scaling_n), "done"],
        "embed": [_delegate("embed_child", sizes.embed_n), "done"],
        "chain": [_delegate("chain_a", 1, "chain"), "done"],
        "chain_a": [_delegate("chain_b", 1, "deeper"), _complete("a done")],
        "chain_b": [_delegate("chain_c", 1, "deepest"), _complete("b done")],
        "chain_c": [_complete("c done")],
        "fan10": [_delegate("leaf", 10), "done"],
        "leaf": [_complete("leaf {task}")],
    }
    providers = [{"name": "script", "kind": "scripted", "model": "script", "script": script}]
    providers += [_openai(name, url) for name, url in models.items()]
    deep = {"max_delegation_depth": 4}
    agents: list[dict[str, Any]] = [{"name": n, "provider": "script", "options": deep} for n in script]
    agents += [{"name": f"{m}_child", "provider": m} for m in models]
    return providers, agents
