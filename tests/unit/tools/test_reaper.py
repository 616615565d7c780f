"""The launcher under every tool program: the program's tree dies with the launcher's parent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from shelly_dist.tools.builtin._process import LAUNCHER
from tests.integration.cluster import wait_until
from tests.unit.tools.test_exec import gone


def test_the_tree_dies_with_the_process_that_started_the_launcher(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    script = f"setsid sleep 1000 & echo $! > {pidfile}; wait"
    starter = subprocess.Popen([  # stands for the worker
        sys.executable, "-c",
        "import os, subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-I', '-S', {str(LAUNCHER)!r}, str(os.getpid()), '/bin/sh', 'sh', '-c', "
        f"{script!r}]); time.sleep(1000)",
    ])
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 30, "the program to start its sleep")
    finally:
        starter.kill()
        starter.wait()
    sleep = int(pidfile.read_text())
    wait_until(lambda: gone(sleep), 10, f"sleep {sleep} to be killed with the worker")
