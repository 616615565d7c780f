"""``shelly run`` through CliRunner (the subprocess tests are in tests/integration)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.cli.conftest import write_config


def test_run_prints_the_answer_on_stdout(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    result = invoke("run", "--quiet", "do it")
    assert result.exit_code == 0
    assert result.stdout.strip() == "scripted answer"


def test_run_reads_the_task_from_stdin(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, {"*": ["you said {task}"]})
    result = invoke("run", "--quiet", input="from stdin\n")
    assert result.exit_code == 0
    assert result.stdout.strip() == "you said from stdin"


def test_run_without_a_task_exits_2(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    assert invoke("run", "--quiet", input="").exit_code == 2


def test_run_json_prints_one_object_with_the_documented_keys(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    result = invoke("run", "--json", "--quiet", "do it")
    data = json.loads(result.stdout)
    assert set(data) == {"session", "agent", "reply", "usage", "tree_usage", "warnings", "elapsed"}
    assert (data["agent"], data["reply"]) == ("solo", "scripted answer")
    assert data["usage"]["output_tokens"] > 0


def test_run_json_gives_the_delegation_trees_usage_beside_the_top_level_runs(  # type: ignore[no-untyped-def]
    invoke, workdir: Path
) -> None:
    tasks = [{"agent": "worker", "task": f"part {i}", "context": ""} for i in range(2)]
    done = {"tool_calls": [{"name": "task_complete", "arguments": {"status": "completed", "summary": "did"}}]}
    write_config(
        workdir,
        {"lead": [{"tool_calls": [{"name": "delegate", "arguments": {"tasks": tasks}}]}, "all done"],
         "worker": [done]},
        agents=[{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "worker"}],
        entry_agent="lead",
    )
    data = json.loads(invoke("run", "--json", "--quiet", "split it").stdout)
    own, tree = data["usage"], data["tree_usage"]
    assert data["reply"] == "all done" and own["model_requests"] == 2
    assert tree["model_requests"] == 4  # the lead's two calls and one per worker
    assert tree["output_tokens"] > own["output_tokens"]


def test_run_offers_to_continue_the_session_once_it_is_saved(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    result = invoke("run", "do it")
    session = result.stderr.split("session ", 1)[1].split()[0]
    assert f"continue with --session {session}" in result.stderr
    assert (workdir / ".shelly" / "local" / "sessions" / session / "meta.json").exists()


def test_a_session_whose_first_turn_failed_is_not_offered(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, {"*": [{"error": "provider exploded"}]})
    result = invoke("run", "do it")
    assert result.exit_code == 1 and "--session" not in result.stderr


def test_run_unknown_agent_exits_2(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    result = invoke("run", "--agent", "ghost", "do it")
    assert result.exit_code == 2
    assert 'unknown agent "ghost"' in result.stderr


def test_run_failing_provider_exits_1_with_its_message(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, {"*": [{"error": "provider exploded"}]})
    result = invoke("run", "do it")
    assert result.exit_code == 1
    assert "provider exploded" in result.stderr and "Traceback" not in result.output


def test_run_config_error_exits_2_naming_the_field(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, agents=[{"name": "solo", "provider": "missing"}])
    result = invoke("run", "do it")
    assert result.exit_code == 2
    assert "agents[0].provider" in result.stderr


def test_run_prints_the_session_id_and_progress_on_stderr(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    result = invoke("run", "do it")
    assert "--session" in result.stderr and "solo" in result.stderr
    assert "session" not in result.stdout


def test_run_session_continues_a_saved_conversation(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, {"*": ["first", "second: {task}"]})
    first = json.loads(invoke("run", "--json", "--quiet", "one").stdout)
    second = invoke("run", "--json", "--quiet", "--session", first["session"], "two")
    assert json.loads(second.stdout)["reply"] == "second: two"
    assert json.loads(second.stdout)["session"] == first["session"]


def test_run_unknown_session_exits_1(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    result = invoke("run", "--session", "0123456789abcdef", "x")
    assert result.exit_code == 1
    assert "not found" in result.stderr
