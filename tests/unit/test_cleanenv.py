"""The re-execution that keeps secrets out of the initial environment block (``/proc/<pid>/environ``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from shelly_dist.cleanenv import MARK, kept, reexec_without_secrets

PROBE = """
import json, os, sys
from shelly_dist.cleanenv import reexec_without_secrets
print("started", file=sys.stderr, flush=True)
reexec_without_secrets()
block = open(f"/proc/{os.getpid()}/environ", "rb").read().decode()
print(json.dumps({"block": block, "token": os.environ.get("MY_TOKEN"), "argv": sys.argv[1:],
                  "mark": os.environ.get("SHELLY_ENV_MOVED"), "path": "PATH" in os.environ}))
"""


def probe(env: dict[str, str]) -> tuple[dict[str, object], str]:
    out = subprocess.run([sys.executable, "-c", PROBE, "a1", "a2"], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout), out.stderr


def test_secrets_leave_the_initial_block_but_stay_in_os_environ() -> None:
    seen, stderr = probe({"PATH": os.environ["PATH"], "MY_TOKEN": "tok-123"})
    assert "tok-123" not in seen["block"] and "PATH=" in seen["block"]
    assert seen["token"] == "tok-123" and seen["path"] is True
    assert seen["argv"] == ["a1", "a2"]  # the same command line, run again
    assert seen["mark"] is None
    assert stderr.count("started") == 2  # re-executed once, not in a loop


def test_nothing_to_move_means_no_re_execution() -> None:
    _, stderr = probe({"PATH": os.environ["PATH"], "LANG": "C.UTF-8"})
    assert stderr.count("started") == 1


def test_a_mark_meant_for_another_process_is_not_read(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(MARK, "1:0")  # pid 1's: inherited from the shelly that started this process
    monkeypatch.setattr(os, "execve", lambda *a: (_ for _ in ()).throw(OSError("no exec in a test")))
    reexec_without_secrets()  # tries to re-execute itself (refused here) instead of reading fd 0
    assert os.environ[MARK] == "1:0"


def test_credentials_are_not_kept_whatever_their_name() -> None:
    assert kept("PATH") and kept("LC_ALL") and kept("PYTHONPATH")
    assert not any(kept(n) for n in ("ANTHROPIC_API_KEY", "SHELLY_REDIS_URL", "AWS_SECRET_ACCESS_KEY", "X"))
