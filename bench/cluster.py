"""The journals' Redis as a list of servers: one redis-server, or each primary of a Redis Cluster.

The journals may live on a Redis Cluster (``BENCH_REDIS_URL=redis+cluster://host:port``; see
``shelly_dist.redisio.connection``); the broker cannot (kombu has no cluster transport), so the bench
then needs ``BENCH_BROKER_URL`` on a redis-server of its own. What the bench does to "its Redis"
directly — ``INFO cpu`` for the scaling row, deleting its keys by prefix on the way out — is per
server, so it asks :func:`journal_nodes` for a plain client of each primary. Scenarios that only
make sense on one server (``MONITOR`` in row 6) call :func:`refuse_cluster` and fail at once.

``python -m bench.cluster`` starts a private 3-node cluster and a broker redis-server on free
ports, prints the two ``BENCH_*`` variables to export, and stops them all on Ctrl-C / SIGTERM::

    python -m bench.cluster &            # prints BENCH_REDIS_URL=… BENCH_BROKER_URL=…
    BENCH_REDIS_URL=redis+cluster://127.0.0.1:P BENCH_BROKER_URL=redis://127.0.0.1:Q/0 \\
        python -m bench --only scaling --workers 1,2 --runs 2
    kill %1
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

import redis

from bench.procs import BenchError
from bench.servers import free_port, start_redis_server
from shelly_dist.redisio.connection import cluster_url

NODES = 3


def is_cluster(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``)."""
    return cluster_url(url) is not None


def primaries(cluster_nodes: str) -> list[tuple[str, int]]:
    """``(host, port)`` of every primary in a ``CLUSTER NODES`` reply that serves slots, sorted.

    A line is ``id host:port@bus[,hostname] flags primary-id ping pong epoch link slot…``; replicas,
    failed nodes and primaries without slots hold none of the journals' keys, so they are left out."""
    nodes = []
    for line in cluster_nodes.splitlines():
        fields = line.split()
        if len(fields) < 9:
            continue
        flags = set(fields[2].split(","))
        if "master" not in flags or flags & {"fail", "noaddr", "handshake"}:
            continue
        host, port = fields[1].split("@", 1)[0].rsplit(":", 1)
        nodes.append((host.strip("[]") or "127.0.0.1", int(port)))
    return sorted(nodes)


def journal_nodes(url: str) -> list[redis.Redis]:
    """A plain client of each server holding the journals: ``[one]`` for a single Redis, each
    primary (sorted by address) for a cluster URL. Close them all."""
    plain = cluster_url(url)
    if plain is None:
        return [redis.Redis.from_url(url, decode_responses=True)]
    seed = redis.Redis.from_url(plain, decode_responses=True)
    seed.set_response_callback("CLUSTER NODES", lambda response, **_: response)  # the text, not redis-py's dict
    try:
        text = seed.execute_command("CLUSTER NODES")
    except redis.RedisError as exc:
        raise BenchError(f"bench: {url}: CLUSTER NODES failed: {type(exc).__name__}: {exc}") from exc
    finally:
        seed.close()
    found = primaries(str(text))
    if not found:
        raise BenchError(f"bench: {url}: CLUSTER NODES names no primary serving slots")
    return [redis.Redis(host=host, port=port, decode_responses=True) for host, port in found]


def bus_messages(client: redis.Redis) -> tuple[int, int]:
    """Messages this cluster node has sent over the cluster bus so far (``CLUSTER INFO``): those
    carrying a classic ``PUBLISH`` to the other nodes, and all of them (pings included). A sharded
    ``SPUBLISH`` stays on the node owning its channel's slot (no bus message; a replica would get
    one, and this bench's cluster has none)."""
    info = client.execute_command("CLUSTER INFO")
    text = info if isinstance(info, str) else "\n".join(f"{k}:{v}" for k, v in dict(info).items())
    stats = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return int(stats.get("cluster_stats_messages_publish_sent", 0)), int(stats.get("cluster_stats_messages_sent", 0))


def delete_matching(client: redis.Redis, pattern: str) -> None:
    """Delete the keys of one server matching ``pattern``, one key per ``DEL`` (pipelined): on a
    cluster node a many-key ``DEL`` across slots is refused (``CROSSSLOT``)."""
    pipe = client.pipeline(transaction=False)
    for i, key in enumerate(client.scan_iter(match=pattern, count=1000), 1):
        pipe.delete(key)
        if i % 500 == 0:
            pipe.execute()
    pipe.execute()


def refuse_cluster(url: str, scenario: str, why: str) -> None:
    """``BenchError`` at once when ``url`` is a cluster and ``scenario`` cannot run on one."""
    if is_cluster(url):
        raise BenchError(f"bench: {scenario}: cannot run with the journals on a Redis Cluster ({url}): {why}")


# -- a private cluster for the bench (python -m bench.cluster) ------------------------------------


def _cluster_ok(port: int) -> bool:
    client = redis.Redis(port=port, decode_responses=True)
    try:
        return bool(client.cluster("info").get("cluster_state") == "ok")
    finally:
        client.close()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> int:
    procs: list[subprocess.Popen[bytes]] = []
    signal.signal(signal.SIGTERM, _raise_interrupt)
    with tempfile.TemporaryDirectory(prefix="shelly-bench-cluster-") as tmp:
        try:
            ports = []
            for _ in range(NODES):
                port, proc = start_redis_server(Path(tmp), "--cluster-enabled", "yes", "--cluster-config-file",
                                                "nodes.conf", "--cluster-port", str(free_port()))
                ports.append(port)
                procs.append(proc)
            created = subprocess.run(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                                      "--cluster-replicas", "0", "--cluster-yes"],
                                     capture_output=True, text=True, timeout=60, check=False)
            if created.returncode != 0:
                raise BenchError(f"bench.cluster: redis-cli --cluster create failed: {created.stdout}{created.stderr}")
            deadline = time.monotonic() + 60
            while not all(_cluster_ok(p) for p in ports):
                if time.monotonic() > deadline:
                    raise BenchError("bench.cluster: the nodes did not reach cluster_state:ok within 60 s")
                time.sleep(0.1)
            broker, proc = start_redis_server(Path(tmp))
            procs.append(proc)
            print(f"BENCH_REDIS_URL=redis+cluster://127.0.0.1:{ports[0]} "
                  f"BENCH_BROKER_URL=redis://127.0.0.1:{broker}/0", flush=True)
            print(f"bench.cluster: nodes {', '.join(map(str, ports))}, broker {broker}; Ctrl-C or SIGTERM stops them",
                  file=sys.stderr, flush=True)
            signal.pause()
        except KeyboardInterrupt:
            pass
        except BenchError as exc:
            print(str(exc), file=sys.stderr)
            return 1
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
