"""What a person running a local model sees from the CLI (issue 40): warnings in the live view, in
``--json`` and in ``shelly events`` of an embedded session; a failed run's ``--json`` object; the
server's tokens per second."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from shelly_dist.testing.model_server import ModelServer, Reply


def project(tmp_path: Path, server: ModelServer, **agent: object) -> Path:
    shelly_dir = tmp_path / ".shelly"
    shelly_dir.mkdir(exist_ok=True)
    (shelly_dir / "config.yaml").write_text(yaml.safe_dump({
        "providers": [{"name": "local", "kind": "openai", "model": "smollm2", "base_url": server.url,
                       "api_key": "sk-local", "rate_limit": {"max_retries": 0}}],
        "agents": [{"name": "scribe", "description": "writes", **agent}],
    }))
    return tmp_path


def shelly(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shelly_dist.cli.main", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_a_cut_reply_is_a_warning_in_the_live_view_in_json_and_in_the_embedded_sessions_events(
    tmp_path: Path,
) -> None:
    with ModelServer(timings=True) as server:
        server.push(Reply(text="The answer is", finish_reason="length"))
        cwd = project(tmp_path, server)
        out = shelly(cwd, "run", "--json", "answer")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    [warning] = result["warnings"]
    assert warning["code"] == "reply_truncated" and warning["agent"] == "scribe"
    assert "cut at the output limit" in warning["message"]
    assert "⚠ scribe: the reply was cut at the output limit" in out.stderr
    assert "42 tok/s" in out.stderr, "the server's own speed, in the finish line"
    events = shelly(cwd, "events", "--session", result["session"])
    assert events.returncode == 0, events.stderr
    [line] = [x for x in events.stdout.splitlines() if " warning " in x]
    assert "reply_truncated: the reply was cut at the output limit" in line


def test_json_prints_a_result_object_with_the_error_and_the_usage_for_a_failed_run(tmp_path: Path) -> None:
    with ModelServer() as server:
        server.push(Reply(text="", tool_calls=[{"name": "no_such_tool", "arguments": {}}], usage={"input": 30,
                                                                                              "output": 4}),
                    Reply.error(400, '{"error": {"message": "boom"}}'))
        cwd = project(tmp_path, server)
        out = shelly(cwd, "run", "--json", "answer")
    assert out.returncode == 1, out.stderr
    result = json.loads(out.stdout)
    assert set(result) == {"session", "agent", "error", "usage", "tree_usage", "warnings", "elapsed"}
    assert "HTTP 400" in result["error"] and "boom" in result["error"]
    assert result["usage"]["input_tokens"] == 30 and result["tree_usage"]["output_tokens"] == 4


def test_events_of_an_unknown_embedded_session_fail_naming_where_they_were_looked_for(tmp_path: Path) -> None:
    with ModelServer() as server:
        cwd = project(tmp_path, server)
        out = shelly(cwd, "events", "--session", "0123456789abcdef")
    assert out.returncode == 2
    assert "session 0123456789abcdef has no recorded events in" in out.stderr


def test_doctor_says_the_window_a_local_server_runs_with(tmp_path: Path) -> None:
    with ModelServer(context_size=2048) as server:
        cwd = project(tmp_path, server)
        out = shelly(cwd, "doctor", "--json")
    assert out.returncode == 0, out.stderr
    [check] = [c for c in json.loads(out.stdout)["checks"] if c["name"] == "context window"]
    assert check["status"] == "ok" and '"local": 2048 tokens, read from the server' in check["detail"]


def test_doctor_warns_when_a_local_server_does_not_say_its_window(tmp_path: Path) -> None:
    with ModelServer() as server:
        cwd = project(tmp_path, server)
        out = shelly(cwd, "doctor", "--json")
    [check] = [c for c in json.loads(out.stdout)["checks"] if c["name"] == "context window"]
    assert check["status"] == "warn" and "128000 tokens are assumed" in check["detail"]
    assert "context_window" in check["fix"]
