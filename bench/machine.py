"""A description of the machine the figures were measured on (they mean little without it)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import celery
import redis

from bench.cluster import is_cluster, journal_nodes


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def describe(redis_url: str) -> str:
    nodes = journal_nodes(redis_url)
    try:
        redis_version = str(nodes[0].info("server").get("redis_version", "unknown"))
    finally:
        for node in nodes:
            node.close()
    where = (f"journals and state on a {len(nodes)}-node cluster, the broker on a redis-server of its own"
             if is_cluster(redis_url) else "broker, journals, state")
    return "\n".join([
        f"- CPU: {_cpu_model()}, {os.cpu_count()} cores",
        f"- memory: {_memory()}",
        f"- OS: {platform.system()} {platform.release()}",
        f"- Python {platform.python_version()}, Celery {celery.__version__}, redis-py {redis.__version__}",
        f"- Redis {redis_version} on loopback ({where})",
    ])
