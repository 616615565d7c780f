"""``shelly run`` on a terminal asks the user for permissions and ``ask_user`` questions (as Shelly
does); elsewhere it never asks. Driven through a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration


def project(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "project", tmp_path / "outside"
    (root / ".shelly").mkdir(parents=True)
    outside.mkdir()
    secret = outside / "notes.txt"
    secret.write_text("the outside note")
    (root / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
        "providers": [{"name": "s", "kind": "scripted", "model": "s", "script": {"reader": [
            {"tool_calls": [{"name": "fs_read", "arguments": {"path": str(secret)}}]}, "finished"]}}],
        "agents": [{"name": "reader", "toolboxes": ["filesystem"]}],
    }))
    return root, outside


def tool_result(root: Path, session: str) -> str:
    """The first tool result of the saved session."""
    messages = json.loads((root / ".shelly" / "local" / "sessions" / session / "messages.json").read_text())
    return next(p["content"] for m in messages for p in m["parts"] if p["kind"] == "tool_result")


def run_on_a_terminal(root: Path, answer: str, question: bytes = b"Allow filesystem access") -> tuple[int, str, str]:
    """Run ``shelly run`` with stdin and stderr on a pty; answer ``question`` with ``answer``."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "shelly_dist.cli.main", "run", "read the note", "--json"],
                            cwd=root, stdin=slave, stderr=slave, stdout=subprocess.PIPE, env=dict(os.environ))
    os.close(slave)
    seen, answered = b"", False
    deadline = time.monotonic() + 60
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
            if not answered and question in seen:
                os.write(master, answer.encode() + b"\r")
                answered = True
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return proc.returncode, out.decode(), seen.decode(errors="replace")


def test_run_on_a_terminal_asks_and_a_yes_is_remembered(tmp_path: Path):
    root, outside = project(tmp_path)
    code, out, terminal = run_on_a_terminal(root, "yes")
    assert code == 0, terminal
    assert "Allow filesystem access to" in terminal and str(outside) in terminal
    assert json.loads(out)["reply"] == "finished"
    assert tool_result(root, json.loads(out)["session"]) == "the outside note"
    granted = json.loads((root / ".shelly" / "local" / "permissions.json").read_text())
    assert str(outside) in granted["fs_directories"]


def test_run_on_a_terminal_refused_gives_the_model_an_error_and_remembers_nothing(tmp_path: Path):
    root, outside = project(tmp_path)
    code, out, terminal = run_on_a_terminal(root, "no")
    assert code == 0, terminal
    assert "Allow filesystem access to" in terminal
    assert "path outside allowed directories" in tool_result(root, json.loads(out)["session"])
    stored = root / ".shelly" / "local" / "permissions.json"
    assert not stored.exists() or str(outside) not in stored.read_text()


def test_run_without_a_terminal_never_asks_and_refuses(tmp_path: Path):
    root, _ = project(tmp_path)
    out = subprocess.run([sys.executable, "-m", "shelly_dist.cli.main", "run", "read the note", "--json"], cwd=root,
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    assert "Allow filesystem access" not in out.stderr
    assert json.loads(out.stdout)["reply"] == "finished"


def asking_project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".shelly").mkdir(parents=True)
    question = {"question": "Which colour?", "header": "Style", "options": ["red", "blue"]}
    ask = {"name": "ask_user", "arguments": question}
    (root / ".shelly" / "config.yaml").write_text(yaml.safe_dump({
        "providers": [{"name": "s", "kind": "scripted", "model": "s", "script": {"asker": [
            {"tool_calls": [ask]}, "finished"]}}],
        "agents": [{"name": "asker"}],
    }))
    return root


def test_ask_user_on_a_terminal_shows_the_question_and_a_number_picks_the_option(tmp_path: Path):
    root = asking_project(tmp_path)
    code, out, terminal = run_on_a_terminal(root, "2", question=b"answer (a number")
    assert code == 0, terminal
    assert "[Style] Which colour?" in terminal and "1) red" in terminal and "2) blue" in terminal
    assert json.loads(out)["reply"] == "finished"
    assert tool_result(root, json.loads(out)["session"]) == "blue"


def test_ask_user_on_a_terminal_takes_the_users_own_words(tmp_path: Path):
    root = asking_project(tmp_path)
    code, out, terminal = run_on_a_terminal(root, "green, please", question=b"answer (a number")
    assert code == 0, terminal
    assert tool_result(root, json.loads(out)["session"]) == "green, please"


def test_ask_user_without_a_terminal_is_an_error_result_and_the_run_finishes(tmp_path: Path):
    root = asking_project(tmp_path)
    out = subprocess.run([sys.executable, "-m", "shelly_dist.cli.main", "run", "pick", "--json"], cwd=root,
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    assert "Which colour?" not in out.stderr
    assert json.loads(out.stdout)["reply"] == "finished"
    assert tool_result(root, json.loads(out.stdout)["session"]).startswith("ask_user: nobody can answer")
