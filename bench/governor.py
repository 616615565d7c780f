"""12. One key, a pool: N batch items through W worker processes against the strict stand-in vendor
(sliding-window rpm and input-tpm, 429 + ``retry-after``), every worker sharing the key's
``rate_limit`` (issue 33's bench row).

``python -m bench --governor [--workers W]`` (default 600 items, 4 workers, rpm 300, input-tpm
200,000, a model latency of 0.2 s: two minutes of the key's work). Runs on a redis-server of its
own. The figures: the share of the vendor's requests refused with a 429 (target ≤ 1 %, ideally
0), the items that failed, and the share of the allowed throughput used — requests accepted per
minute from the vendor's first accepted request to its last, over what the binding limit allows
(target ≥ 95 %; the governor paces batch work at one request per 61/rpm s, a second of margin
per minute for delivery skew, so its ceiling is 98.4 %).

``BENCH_WORKER_PYTHONPATH`` (a checkout's root) runs the batch and the workers with that
checkout's ``shelly_dist``: how the "before" figures were taken (a limiter per process then).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.idle import _env
from bench.procs import BenchError
from bench.report import Row
from bench.servers import start_redis_server
from shelly_dist.testing.model_server import ModelServer
from shelly_dist.testing.strict_limits import StrictLimits

NAME = "governor"
ITEMS, WORKERS, RPM, INPUT_TPM, LATENCY = 600, 4, 300, 200_000, 0.2
"""About 450 input tokens a request (the stand-in counts the request's JSON): at 300 rpm, 135,000 a
minute, so rpm is the limit that binds; ``--governor`` with a smaller ``INPUT_TPM`` binds tokens."""


def measure_governor(items: int = ITEMS, workers: int = WORKERS, rpm: int = RPM, input_tpm: int = INPUT_TPM,
                     latency: float = LATENCY) -> Row:
    """One row: 429s and throughput used for ``items`` batch items through ``workers`` processes."""
    root = Path(tempfile.mkdtemp(prefix="shelly-bench-governor-"))
    procs: list[subprocess.Popen[bytes]] = []
    env = _env()
    limits = StrictLimits(rpm=rpm, input_tpm=input_tpm)
    try:
        with ModelServer(format="openai", limits=limits, latency=latency) as vendor:
            port, server = start_redis_server(root)
            procs.append(server)
            url, broker = f"redis://127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/1"
            (root / ".shelly").mkdir()
            (root / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
                "providers": [{"name": "vendor", "kind": "openai", "model": "gpt-bench", "base_url": vendor.url,
                               "api_key": "k", "rate_limit": {"rpm": rpm, "input_tpm": input_tpm}}],
                "agents": [{"name": "solver", "provider": "vendor"}],
                "distributed": {"broker_url": broker, "redis_url": url, "queue": "governor",
                                "key_prefix": "shelly-governor:"},
            }))
            (root / "in.jsonl").write_text("".join(json.dumps({"id": f"i{i}", "task": f"question {i}"}) + "\n"
                                                   for i in range(items)))
            for i in range(workers):
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "shelly_dist.cli.main", "worker", "--concurrency", "32", "--hostname",
                     f"gov{i}@bench", "--heartbeat-file", str(root / f"w{i}.heartbeat"), "--loglevel", "WARNING"],
                    cwd=root, env=env, stdout=(root / f"w{i}.log").open("wb"), stderr=subprocess.STDOUT))
            deadline = time.monotonic() + 120
            while not all((root / f"w{i}.heartbeat").exists() for i in range(workers)):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise BenchError(f"bench: governor: the workers did not start:\n"
                                     f"{(root / 'w0.log').read_text()[-2000:]}")
                time.sleep(0.2)
            started = time.monotonic()
            out = subprocess.run(
                [sys.executable, "-m", "shelly_dist.cli.main", "batch", "--tasks", "in.jsonl", "--output",
                 "out.jsonl", "--quiet", "--concurrency", str(items)],
                cwd=root, env=env, capture_output=True, text=True, timeout=120 + 3 * items * 60 / rpm)
            elapsed = time.monotonic() - started
        lines = [json.loads(line) for line in (root / "out.jsonl").read_text().splitlines()] \
            if (root / "out.jsonl").exists() else []
        failed = sum(1 for line in lines if line.get("status") != "completed") + items - len(lines)
        why = f" ({out.stderr.strip().splitlines()[-1]})" if out.returncode and out.stderr.strip() else ""
        accepted, rejected = sorted(limits.accepted), limits.rejected
        refused = 100 * len(rejected) / max(1, len(accepted) + len(rejected))
        span = accepted[-1] - accepted[0] if len(accepted) > 1 else 0.0
        charged = limits.charged / max(1, len(accepted))  # input tokens the vendor counted per request
        allowed = min(rpm, input_tpm / charged) if charged else rpm  # requests a minute the limits allow
        used = 100 * (len(accepted) - 1) / span * 60 / allowed if span else 0.0
        return Row("12", f"governor: {items} batch items, {workers} worker processes, one key "
                         f"(strict vendor: rpm {rpm}, input-tpm {input_tpm:,})",
                   "% 429", [refused], target="≤ 1 % 429, ≥ 95 % of the rpm", limit=("<=", 1.0), on="value",
                   note=f"{len(rejected)} of {len(accepted) + len(rejected)} requests refused; {failed} items "
                        f"failed (exit {out.returncode}{why}); throughput used {used:.1f} % of what the limits allow "
                        f"({allowed:.0f} requests a minute at {charged:.0f} input tokens each) "
                        f"({len(accepted)} accepted in {span:.0f} s); the batch took {elapsed:.0f} s; the "
                        f"vendor's busiest minute held {limits.max_in_any_window()} requests")
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        shutil.rmtree(root, ignore_errors=True)
