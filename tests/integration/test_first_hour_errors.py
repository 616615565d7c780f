"""First-hour failures through the real ``shelly`` command: a refused Redis port, a Redis with
``requirepass`` given the wrong password (our own redis-server), an unreachable amqp broker, and a
dependency that cannot be imported. Each is one ``shelly:`` line on stderr naming the cause and
the fix, with the documented exit code, and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .cluster import complete, delegate, scripted
from .own_redis import own_redis

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SHELLY = [sys.executable, "-m", "shelly_dist.cli.main"]
REFUSED_PORT = 6421
"""Nothing listens here (the suite's own servers take ports the kernel hands out, above 32767)."""


def project(root: Path, distributed: dict[str, Any]) -> Path:
    """A lead that delegates once to a helper, with ``distributed`` as given."""
    (root / ".shelly").mkdir(parents=True, exist_ok=True)
    (root / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
        "providers": [scripted(lead=[delegate(("helper", "x")), "lead done"], helper=[complete("ok")])],
        "agents": [{"name": "lead", "description": "d", "options": {"max_delegation_depth": 1}},
                   {"name": "helper", "description": "h"}],
        "distributed": {"queue": "inst-first-hour", "key_prefix": "inst-first-hour:", **distributed},
    }))
    return root


def shelly(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SHELLY_")}
    return subprocess.run([*SHELLY, *args], cwd=root, env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=90)


def the_line(out: subprocess.CompletedProcess[str]) -> str:
    """The one ``shelly:`` line on stderr (asserting there is exactly one and no traceback)."""
    assert "Traceback" not in out.stderr, out.stderr
    lines = [x for x in out.stderr.splitlines() if x.startswith("shelly:")]
    assert len(lines) == 1, out.stderr
    return lines[0]


@pytest.fixture
def password_redis(tmp_path: Path) -> Iterator[int]:
    """Our own redis-server with ``requirepass right`` on a free port; reaped after."""
    with own_redis(tmp_path, "--requirepass", "right") as port:
        yield port


def test_refused_redis_port_is_one_line_exit_1(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{REFUSED_PORT}/0"
    out = shelly(project(tmp_path, {"broker_url": url}), "run", "go")
    assert out.returncode == 1
    assert the_line(out) == (f"shelly: Redis at 127.0.0.1:{REFUSED_PORT} refused the connection: start Redis, or "
                             "fix distributed.redis_url (or SHELLY_REDIS_URL)")


def test_wrong_redis_password_is_one_line_exit_2(tmp_path: Path, password_redis: int) -> None:
    url = f"redis://:wrong@127.0.0.1:{password_redis}/0"
    out = shelly(project(tmp_path, {"broker_url": url}), "run", "go")
    assert out.returncode == 2
    assert the_line(out).startswith("shelly: Redis refused the password: put the password in the Redis URL")


def test_unreachable_amqp_broker_is_one_line_exit_1(tmp_path: Path, redis_url: str, key_prefix: str) -> None:
    broker = f"amqp://guest:guest@127.0.0.1:{REFUSED_PORT}//"
    out = shelly(project(tmp_path, {"broker_url": broker, "redis_url": redis_url, "key_prefix": key_prefix}),
                 "run", "go")
    assert out.returncode == 1
    assert the_line(out).startswith("shelly: the broker cannot be reached")
    assert "distributed.broker_url" in the_line(out)


def test_a_dependency_that_cannot_be_imported_stops_the_worker_with_one_line_exit_2(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "packaging"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ModuleNotFoundError("No module named packaging", name="packaging")\n')
    root = project(tmp_path / "p", {"broker_url": f"redis://127.0.0.1:{REFUSED_PORT}/0"})
    out = shelly(root, "worker", env={"PYTHONPATH": str(tmp_path / "shadow")})
    assert out.returncode == 2
    assert the_line(out).startswith('shelly: missing Python module "packaging"')


def test_a_worker_whose_broker_refuses_stops_with_one_line_exit_1(tmp_path: Path) -> None:
    out = shelly(project(tmp_path, {"broker_url": f"redis://127.0.0.1:{REFUSED_PORT}/0"}), "worker")
    assert out.returncode == 1
    assert the_line(out).startswith("shelly: the broker cannot be reached (Error 111 connecting to 127.0.0.1:6421")


def test_a_worker_given_the_wrong_redis_password_stops_with_one_line_exit_2(
    tmp_path: Path, password_redis: int
) -> None:
    out = shelly(project(tmp_path, {"broker_url": f"redis://:wrong@127.0.0.1:{password_redis}/0"}), "worker")
    assert out.returncode == 2
    assert the_line(out).startswith("shelly: Redis refused the password")


def batch_items(root: Path) -> None:
    (root / "in.jsonl").write_text('{"id": "a", "task": "x"}\n{"id": "b", "task": "y"}\n')


def test_a_batch_whose_redis_refuses_is_one_line_and_records_nothing(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{REFUSED_PORT}/0"
    root = project(tmp_path, {"broker_url": url, "redis_url": url})
    batch_items(root)
    out = shelly(root, "batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet")
    assert out.returncode == 1, out.stderr
    assert the_line(out).startswith(f"shelly: Redis at 127.0.0.1:{REFUSED_PORT} refused the connection")
    assert not (root / "out.jsonl").exists() or (root / "out.jsonl").read_text() == ""


def test_a_batch_whose_broker_cannot_be_reached_is_one_line_and_records_nothing(
    tmp_path: Path, redis_url: str, key_prefix: str
) -> None:
    root = project(tmp_path, {"broker_url": "amqp://guest:guest@127.0.0.1:6423//", "redis_url": redis_url,
                              "key_prefix": key_prefix})
    batch_items(root)
    out = shelly(root, "batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet")
    assert out.returncode == 1, out.stderr
    assert the_line(out).startswith("shelly: the broker cannot be reached")
    assert not (root / "out.jsonl").exists() or (root / "out.jsonl").read_text() == ""


def test_a_redis_that_needs_a_password_given_none_is_named_within_seconds(tmp_path: Path, password_redis: int) -> None:
    url = f"redis://127.0.0.1:{password_redis}/0"
    root = project(tmp_path, {"broker_url": url, "redis_url": url})
    batch_items(root)
    for args in (("run", "go"), ("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet")):
        # "within seconds" of trying Redis, not of a fast interpreter: the bound adds the machine's
        # start-up, measured now (a loaded CI host takes seconds to start Python); an auth error
        # waited out as an outage would take a minute (SUBMIT_OUTAGE) and still fail here.
        started = time.monotonic()
        assert shelly(root, "--version").returncode == 0
        start_up = time.monotonic() - started
        started = time.monotonic()
        out = shelly(root, *args)
        elapsed = time.monotonic() - started
        assert out.returncode == 2, out.stderr
        assert the_line(out).startswith("shelly: Redis requires a password and none was given"), args
        assert elapsed < 2 * start_up + 10, f"{args}: {elapsed:.1f}s (start-up {start_up:.1f}s)"
    assert not (root / "out.jsonl").exists()


def test_shelly_flower_without_a_broker_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / ".shelly").mkdir()
    (tmp_path / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
        "providers": [scripted(lead=["hi"])], "agents": [{"name": "lead"}]}))
    out = shelly(tmp_path, "flower", "--port", "1", env={"SHELLY_FLOWER_BASIC_AUTH": "ops:pw"})
    assert out.returncode == 2, out.stderr
    assert the_line(out).startswith("shelly: config: distributed.broker_url: a broker is required")


def test_shelly_flower_whose_broker_is_down_is_one_line_exit_1_before_flower_starts(tmp_path: Path) -> None:
    out = shelly(project(tmp_path, {"broker_url": f"redis://127.0.0.1:{REFUSED_PORT}/0"}), "flower", "--port", "1",
                 env={"SHELLY_FLOWER_BASIC_AUTH": "ops:pw"})
    assert out.returncode == 1, out.stderr
    assert the_line(out).startswith("shelly: the broker cannot be reached (Error 111 connecting to 127.0.0.1:6421")


def test_the_celery_app_outside_a_project_is_one_line_that_names_no_celery_option(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SHELLY_")}
    out = subprocess.run([sys.executable, "-m", "celery", "-A", "shelly_dist.runtime.celery_app", "worker"],
                         cwd=tmp_path, env=base, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert the_line(out).startswith("shelly: config: no config file")
    assert "SHELLY_CONFIG" in out.stderr and "--config" not in out.stderr
