"""Raw HTTP clients against the loopback model: the floor any provider transport stands on.

``python -m bench.transport [--runs 3]`` measures each client below with a bare ``asyncio.gather``
(no shelly code) against :mod:`bench.model` servers in their own processes: one call at a time
(instant model), 50, 500 and 2,000 concurrent calls at 1 s, and streamed answers (server-sent
events) one at a time and 500 at once. Every measurement runs in a fresh interpreter of its own
(``python -m bench.transport --client NAME --url URL --n N``, which prints one JSON line), so one
client's pool, imports and garbage never weigh on another's figure; the clients take turns run by
run, so the shared machine's noise falls on all of them alike.

The clients:

- ``httpx2``: one ``httpx2.AsyncClient`` (what a plain script would use);
- ``httpx2-sharded``: :data:`SHARDS` clients used round-robin, as ``shelly_dist.providers`` did
  before it moved to aiohttp (httpcore's pool scans every open connection per request);
- ``aiohttp``: one ``aiohttp.ClientSession`` (measured only when aiohttp is installed).

:func:`floor` is what ``python -m bench`` uses for its HTTP-floor rows: the same N calls through
each client, and the fastest of them in that run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from bench.procs import BenchError, rss_bytes, spawn_model
from bench.report import Row

SHARDS = 16
POOL = 4096
"""Connections each client may open (all concurrent calls at once: the library is measured, not a cap)."""
MEASURE_TIMEOUT = 180.0
"""Seconds one measurement subprocess may take before it is killed and named as overrun."""
PATH = "/v1/chat/completions"
ROOT = Path(__file__).resolve().parent.parent
STREAM_PATH = "/v1/stream/chat/completions"


class Client(Protocol):
    async def post(self, url: str, body: dict[str, Any]) -> None: ...
    async def stream(self, url: str, body: dict[str, Any]) -> int: ...
    async def aclose(self) -> None: ...


class _Httpx2:
    def __init__(self, shards: int) -> None:
        import httpx2

        limits = httpx2.Limits(max_connections=POOL // shards, max_keepalive_connections=POOL // shards)
        tls = httpx2.create_ssl_context()  # one CA bundle for every shard, as the providers did
        self._clients = [httpx2.AsyncClient(limits=limits, timeout=120, verify=tls) for _ in range(shards)]
        self._turn = 0

    def _next(self) -> Any:
        self._turn += 1
        return self._clients[self._turn % len(self._clients)]

    async def post(self, url: str, body: dict[str, Any]) -> None:
        response = await self._next().post(url, json=body)
        response.raise_for_status()
        response.json()

    async def stream(self, url: str, body: dict[str, Any]) -> int:
        events = 0
        async with self._next().stream("POST", url, json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                events += line.startswith("data: ")
        return events

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()


class _Aiohttp:
    def __init__(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=POOL, limit_per_host=0),
                                              timeout=aiohttp.ClientTimeout(total=120))

    async def post(self, url: str, body: dict[str, Any]) -> None:
        async with self._session.post(url, json=body) as response:
            response.raise_for_status()
            await response.json()

    async def stream(self, url: str, body: dict[str, Any]) -> int:
        events = 0
        async with self._session.post(url, json=body) as response:
            response.raise_for_status()
            async for line in response.content:
                events += line.startswith(b"data: ")
        return events

    async def aclose(self) -> None:
        await self._session.close()


CLIENTS: dict[str, Callable[[], Client]] = {
    "httpx2": lambda: _Httpx2(1),
    "httpx2-sharded": lambda: _Httpx2(SHARDS),
    "aiohttp": _Aiohttp,
}


def available() -> list[str]:
    """The clients this interpreter can run (aiohttp only when it is installed)."""
    return [n for n in CLIENTS if n != "aiohttp" or importlib.util.find_spec("aiohttp") is not None]


# -- one measurement, in its own interpreter ---------------------------------------------------


async def _measure(name: str, url: str, n: int, sequential: bool, stream: bool) -> dict[str, float]:
    base = rss_bytes_self()
    client = CLIENTS[name]()
    imported = rss_bytes_self()
    bodies = [{"model": "bench", "messages": [{"role": "user", "content": f"job {i}"}], "stream": stream}
              for i in range(n)]
    call: Callable[[str, dict[str, Any]], Awaitable[Any]] = client.stream if stream else client.post
    try:
        await call(url, bodies[0])  # warm: one connection, lazy imports
        cpu, wall = time.process_time(), time.perf_counter()
        if sequential:
            for body in bodies:
                await call(url, body)
        else:
            await asyncio.gather(*(call(url, body) for body in bodies))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        end = rss_bytes_self()
    finally:
        await client.aclose()
    return {"wall": wall, "cpu": cpu, "rss_base": base, "rss_client": imported, "rss_end": end}


def rss_bytes_self() -> float:
    return float(rss_bytes(os.getpid()))


async def measure(name: str, url: str, n: int, *, sequential: bool = False, stream: bool = False,
                  within: float = MEASURE_TIMEOUT) -> dict[str, float]:
    """One measurement in a fresh interpreter; ``BenchError`` naming it if it fails or overruns."""
    args = [sys.executable, "-m", "bench.transport", "--client", name, "--url", url, "--n", str(n),
            *(["--sequential"] if sequential else []), *(["--stream"] if stream else [])]
    what = f"bench: transport: {name} × {n}{' sequential' if sequential else ''}{' streamed' if stream else ''}"
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE,
                                                cwd=ROOT)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), within)
    except TimeoutError:
        raise BenchError(f"{what} overran its {within:g}s deadline") from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise BenchError(f"{what} failed:\n{err.decode(errors='replace')[-2000:]}")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


async def floor(base_url: str, n: int) -> tuple[float, str, dict[str, float]]:
    """The HTTP floor: ``n`` concurrent POSTs to ``base_url`` through every available client.

    Returns the fastest wall time, the client that made it, and every client's time."""
    walls = {}
    for name in available():
        walls[name] = (await measure(name, base_url + PATH, n))["wall"]
    best = min(walls, key=walls.__getitem__)
    return walls[best], best, walls


class _Stepper(Protocol):
    async def step(self, what: str, within: float, action: Awaitable[Any]) -> Any: ...


async def floor_step(b: _Stepper, run: str, base_url: str, n: int, winners: list[str]) -> float:
    """One run's HTTP floor as a bench step (its deadline covers every client); notes the winner."""
    best, name, _ = await b.step(f"{run}: HTTP floor ({n} raw calls per client)",
                                 MEASURE_TIMEOUT * len(available()), floor(base_url, n))
    winners.append(name)
    return float(best)


def floor_row(key: str, n: int, latency: float, floors: list[float], winners: list[str]) -> Row:
    """The HTTP-floor row: the fastest raw client's wall time per run, against the model latency."""
    tally = ", ".join(f"{w} in {winners.count(w)}" for w in dict.fromkeys(winners))
    return Row(key, f"HTTP floor: `asyncio.gather` of {n} POSTs at {latency:g} s, fastest raw client", "s",
               floors, "ideal (the model latency)", [latency] * len(floors), [f / latency for f in floors],
               note=f"fastest of {', '.join(available())} per run, each in a fresh process: {tally} run(s)")


# -- the matrix --------------------------------------------------------------------------------


CASES = (
    # (title, model, n, sequential, stream)
    ("1 call at a time, instant model: ms per call (200 calls)", "instant", 200, True, False),
    ("50 concurrent calls at 1 s: s", "slow", 50, False, False),
    ("500 concurrent calls at 1 s: s", "slow", 500, False, False),
    ("2,000 concurrent calls at 1 s: s", "slow", 2000, False, False),
    ("streamed (20 events), 1 at a time, instant model: ms per call (100 calls)", "instant", 100, True, True),
    ("streamed (20 events), 500 concurrent at 1 s: s", "slow", 500, False, True),
)


def _cell(values: list[float], scale: float = 1.0) -> str:
    v = [x * scale for x in values]
    return f"{statistics.median(v):.3g} ({min(v):.3g}–{max(v):.3g})" if len(v) > 1 else f"{v[0]:.3g}"


async def matrix(runs: int) -> str:
    procs: list[Any] = []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        urls = {"instant": spawn_model("instant", 0.0, env, procs)[1], "slow": spawn_model("slow", 1.0, env, procs)[1]}
        names = available()
        lines = [f"| case | {' | '.join(names)} |", f"|---|{'---|' * len(names)}"]
        cpu_lines = list(lines)
        rss: dict[str, list[dict[str, float]]] = {n: [] for n in names}
        for title, model, n, sequential, stream in CASES:
            results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
            for run in range(runs):
                for name in names[run % len(names):] + names[:run % len(names)]:
                    url = urls[model] + (STREAM_PATH if stream else PATH)
                    print(f"bench.transport: {title} · {name} · run {run + 1}", file=sys.stderr, flush=True)
                    results[name].append(await measure(name, url, n, sequential=sequential, stream=stream))
            scale = 1000 / n if sequential else 1.0
            lines.append(f"| {title} | {' | '.join(_cell([r['wall'] for r in results[m]], scale) for m in names)} |")
            cpu_lines.append(f"| {title.split(':')[0]}: client CPU ms per call | "
                             f"{' | '.join(_cell([r['cpu'] for r in results[m]], 1000 / n) for m in names)} |")
            if n == 500 and not stream:
                rss = results
        rss_line = ("| RSS of the client process, MB: interpreter → client created → 500 calls done | "
                    + " | ".join(f"{statistics.median(r['rss_base'] for r in rss[m]) / 2**20:.1f} → "
                                 f"{statistics.median(r['rss_client'] for r in rss[m]) / 2**20:.1f} → "
                                 f"{statistics.median(r['rss_end'] for r in rss[m]) / 2**20:.1f}" for m in names)
                    + " |")
        return "\n".join([*lines, *cpu_lines[2:], rss_line])
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transport", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (default 3)")
    parser.add_argument("--client", choices=list(CLIENTS), help="one measurement with this client (internal)")
    parser.add_argument("--url")
    parser.add_argument("--n", type=int, default=1)
    parser.add_argument("--sequential", action="store_true")
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args(argv)
    if args.client:
        print(json.dumps(asyncio.run(_measure(args.client, args.url, args.n, args.sequential, args.stream))))
        return 0
    try:
        table = asyncio.run(matrix(args.runs))
    except BenchError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(f"Medians over {args.runs} run(s), min–max in brackets; each figure from a fresh process.\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
