"""No program a tool starts can read the process's secrets, not even in the initial environment
block of its parent or any ancestor (``/proc/<pid>/environ``), embedded or on the pool; ``${VAR}``
expansion still sees them (DESIGN §3 rule 16)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .cluster import DEFAULT_TIMING, Cluster, complete, delegate, scripted

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-planted-4242",
    "MY_SECRET_TOKEN": "tok-planted-4242",
    "SOME_REDIS_URL": "redis://:hunter2-planted@127.0.0.1:6379/0",
}

WALK_UP = """\
# Every ancestor's initial environment block, from the tool's parent up to pid 1, NUL-separated.
p=$PPID
: > ancestors.cmd
: > ancestors.env
while [ "$p" -gt 1 ]; do
  cat /proc/$p/cmdline >> ancestors.cmd 2>/dev/null
  cat /proc/$p/environ >> ancestors.env 2>/dev/null
  p=$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f2)
done
"""
"""A file, not an argument: the config would expand ``$PPID`` as a variable of its own."""


WALK_CALL = {"tool_calls": [{"name": "exec_run", "arguments": {"command": "sh", "args": ["walk-up.sh"]}}]}


def assert_no_secret_reached(project: Path, process: str) -> None:
    seen = (project / "ancestors.env").read_bytes()
    assert b"PATH=" in seen, "the walk read no environment at all"
    # the walk passed the process under test (the tool's parent is the exec launcher, then it)
    assert process.encode() in (project / "ancestors.cmd").read_bytes()
    leaked = [name for name, value in SECRETS.items() if value.encode() in seen]
    assert leaked == [], f"{leaked} readable in an ancestor's /proc/<pid>/environ"


def test_a_tool_under_shelly_run_cannot_read_its_secrets(tmp_path: Path) -> None:
    config = {
        "providers": [{"name": "p", "kind": "scripted", "model": "m",
                       "script": {"*": [WALK_CALL, "token ${MY_SECRET_TOKEN}"]}}],
        "agents": [{"name": "solo", "toolboxes": ["exec"]}],
        "permissions": {"trusted_commands": ["sh"]},
    }
    (tmp_path / ".shelly").mkdir()
    (tmp_path / ".shelly" / "config.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "walk-up.sh").write_text(WALK_UP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLY_")} | SECRETS
    out = subprocess.run([sys.executable, "-m", "shelly_dist.cli.main", "run", "go"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"token {SECRETS['MY_SECRET_TOKEN']}"  # ${VAR} expansion still works
    assert_no_secret_reached(tmp_path, "shelly_dist.cli.main")


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_a_tool_on_a_worker_cannot_read_the_workers_secrets(cluster: Cluster, pool: str) -> None:
    # The top-level agent runs in the coordinator; its child runs on the worker.
    cluster.write_config(
        [scripted(lead=[delegate(("helper", "walk up")), "done"], helper=[WALK_CALL, complete("walked")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "helper", "toolboxes": ["exec"]}],
        distributed=DEFAULT_TIMING, permissions={"trusted_commands": ["sh"]}, entry_agent="lead",
    )
    (cluster.root / "walk-up.sh").write_text(WALK_UP)
    cluster.start_worker("w1", pool=pool, concurrency=2, env=SECRETS)
    out = cluster.shelly("run", "go", timeout=90)
    assert out.returncode == 0, f"{out.stderr}\n{cluster.worker_log()}"
    assert_no_secret_reached(cluster.root, "worker")
