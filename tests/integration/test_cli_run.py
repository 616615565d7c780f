"""The real ``shelly`` command in subprocesses: init → run, JSON, exit codes, sessions, batch, Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.timeout(120)

SHELLY = [sys.executable, "-m", "shelly_dist.cli.main"]


def shelly(cwd: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLY_")}
    return subprocess.run(
        [*SHELLY, *args], cwd=cwd, input=input, capture_output=True, text=True, env=env, timeout=60, check=False
    )


def scripted(cwd: Path, script: dict[str, list[Any]], **extra: Any) -> None:
    data = {
        "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": script}],
        "agents": [{"name": "solo"}],
        **extra,
    }
    (cwd / ".shelly").mkdir(exist_ok=True)
    (cwd / ".shelly" / "config.yaml").write_text(yaml.safe_dump(data))


def test_init_demo_then_run_answers_on_stdout_with_progress_on_stderr(tmp_path: Path) -> None:
    assert shelly(tmp_path, "init", "--template", "demo").returncode == 0
    result = shelly(tmp_path, "run", "Why is the sky blue?")
    assert result.returncode == 0, result.stderr
    assert 'the key facts about "Why is the sky blue?"' in result.stdout
    assert "researcher" in result.stderr and "writer" in result.stderr and "--session" in result.stderr
    assert "researcher" not in result.stdout.split("\n")[0]


def test_run_json_prints_exactly_one_object(tmp_path: Path) -> None:
    shelly(tmp_path, "init", "--template", "demo")
    result = shelly(tmp_path, "run", "--json", "hello")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    assert set(data) == {"session", "agent", "reply", "usage", "tree_usage", "warnings", "elapsed"}
    assert data["agent"] == "orchestrator" and len(data["session"]) == 16


BAD_CONFIGS = [
    ({"agents": [{"name": "solo", "provider": "ghost"}]}, "agents[0].provider"),
    ({"agents": [{"name": "solo", "toolboxes": ["nope"]}]}, "agents[0].toolboxes"),
    ({"agents": [{"name": "solo"}, {"name": "solo"}]}, "agents[1].name"),
    ({"agents": [{"name": "solo", "options": {"question_timeout": "soon"}}]}, "agents[0].options.question_timeout"),
    ({"entry_agent": "ghost"}, "entry_agent"),
]


@pytest.mark.parametrize(("override", "field"), BAD_CONFIGS)
def test_each_config_error_exits_2_naming_the_field(tmp_path: Path, override: dict[str, Any], field: str) -> None:
    scripted(tmp_path, {"*": ["x"]}, **override)
    result = shelly(tmp_path, "run", "task")
    assert result.returncode == 2, result.stderr
    assert field in result.stderr and "Traceback" not in result.stderr


def test_yaml_syntax_error_exits_2(tmp_path: Path) -> None:
    (tmp_path / ".shelly").mkdir()
    (tmp_path / ".shelly" / "config.yaml").write_text("providers: [\n")
    result = shelly(tmp_path, "run", "task")
    assert result.returncode == 2 and "config" in result.stderr


def test_unknown_agent_exits_2(tmp_path: Path) -> None:
    scripted(tmp_path, {"*": ["x"]})
    result = shelly(tmp_path, "run", "--agent", "ghost", "task")
    assert result.returncode == 2 and 'unknown agent "ghost"' in result.stderr


def test_failing_provider_exits_1_with_its_message(tmp_path: Path) -> None:
    scripted(tmp_path, {"*": [{"error": "upstream is down"}]})
    result = shelly(tmp_path, "run", "task")
    assert result.returncode == 1
    assert "upstream is down" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_session_continues_with_the_session_option(tmp_path: Path) -> None:
    scripted(tmp_path, {"*": ["first", "second saw {task}"]})
    first = json.loads(shelly(tmp_path, "run", "--json", "one").stdout)
    second = shelly(tmp_path, "run", "--json", "--session", first["session"], "two")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) | {"elapsed": 0, "usage": {}, "tree_usage": {}} == {
        "session": first["session"], "agent": "solo", "reply": "second saw two", "elapsed": 0, "usage": {},
        "tree_usage": {}, "warnings": [],
    }


def test_batch_writes_lines_and_skips_done_ids_on_rerun(tmp_path: Path) -> None:
    scripted(tmp_path, {"*": ["did {task}"]})
    tasks = tmp_path / "in.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "task": f"job{i}"}) + "\n" for i in range(3)))
    assert shelly(tmp_path, "batch", "--tasks", "in.jsonl", "--output", "out.jsonl").returncode == 0
    with tasks.open("a") as f:
        f.write(json.dumps({"id": "t3", "task": "job3"}) + "\n")
    assert shelly(tmp_path, "batch", "--tasks", "in.jsonl", "--output", "out.jsonl").returncode == 0
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == ["t0", "t1", "t2", "t3"]
    assert {r["reply"] for r in lines if r["id"] == "t3"} == {"did job3"}


def _start_a_run(tmp_path: Path) -> subprocess.Popen[str]:
    """``shelly run task`` in ``tmp_path``, returned once its agent runs (its stderr read so far)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLY_")}
    proc = subprocess.Popen(
        [*SHELLY, "run", "task"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # wait until the agent is running (bounded by the test timeout)
        if "solo started" in line:
            break
    return proc


def _interrupt_a_running_agent(tmp_path: Path, sig: signal.Signals) -> tuple[int, str, float]:
    """Start a run whose model never answers in time, send ``sig`` once the agent runs; the exit
    code, stderr and the seconds from the signal to the exit."""

    scripted(tmp_path, {"*": [{"text": "too slow", "delay": 300}]})
    proc = _start_a_run(tmp_path)
    try:
        sent = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        return proc.returncode, err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_embedded_failed_child_is_shown_failed_with_its_reason_and_the_run_not_as_a_success(
    tmp_path: Path,
) -> None:
    lead = [{"tool_calls": [{"name": "delegate", "arguments": {"tasks": [
        {"agent": "helper", "task": "fix the parser", "context": ""}]}}]}, "all done"]
    scripted(tmp_path, {"lead": lead, "helper": [{"error": "simulated outage"}]},
             agents=[{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "helper"}],
             entry_agent="lead")
    result = shelly(tmp_path, "run", "go")
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert re.search(r"^  ✗ helper-fix-1 failed: .*simulated outage.* \(0 tokens\)$", err, re.M), err
    assert re.search(r"^! lead finished \(\d+ tokens\); 1 child failed: helper-fix-1 \(", err, re.M), err
    assert "✔ helper" not in err and not re.search(r"^✔ lead", err, re.M), err


def test_ctrl_c_stops_the_run_and_exits_130(tmp_path: Path) -> None:
    code, err, _ = _interrupt_a_running_agent(tmp_path, signal.SIGINT)
    assert code == 130, err
    assert "interrupted" in err and "Traceback" not in err


def test_sigterm_stops_the_run_and_exits_143_promptly(tmp_path: Path) -> None:
    code, err, seconds = _interrupt_a_running_agent(tmp_path, signal.SIGTERM)
    assert code == 143, err
    assert "shelly: terminated" in err and "Traceback" not in err
    assert seconds < 10


def _replace_with_a_file(folder: Path) -> None:
    """Put a file where ``folder`` is, so every save into it fails (as root, a chmod would not).

    The running process keeps appending its events under ``folder`` (``<session>/events.jsonl``)
    and re-creates what it appends to, so one ``rmtree`` can race it: the directory is moved
    aside in one step and the file renamed into its place, again until no append came between."""
    stand_in = folder.with_name("stand-in")
    stand_in.write_text("not a directory: every save fails")
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(FileNotFoundError):
            folder.rename(folder.with_name(f"moved-{time.monotonic_ns()}"))
        try:
            stand_in.rename(folder)
            return
        except (IsADirectoryError, OSError):
            if time.monotonic() > deadline:
                raise


def test_an_answer_whose_session_cannot_be_saved_is_printed_and_the_failure_named(tmp_path: Path) -> None:
    answer_now = tmp_path / "answer-now"
    scripted(tmp_path, {"*": [{"text": "the answer", "until": str(answer_now)}]})
    proc = _start_a_run(tmp_path)
    try:
        _replace_with_a_file(tmp_path / ".shelly" / "local" / "sessions")
        answer_now.touch()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out == "the answer\n"
    assert proc.returncode == 1, err
    assert "not saved" in err and "Traceback" not in err
