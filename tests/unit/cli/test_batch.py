"""``shelly batch``: JSONL in, one JSONL line per item out, done ids skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.cli.conftest import write_config


def write_tasks(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def records(path: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_batch_writes_one_record_per_item(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, {"*": ["done: {task}"]})
    tasks = write_tasks(workdir / "in.jsonl", *(json.dumps({"id": f"t{i}", "task": f"job {i}"}) for i in range(5)))
    result = invoke("batch", "--tasks", str(tasks), "--output", "out.jsonl", "--concurrency", "2", "--quiet")
    assert result.exit_code == 0
    out = records(workdir / "out.jsonl")
    assert set(out) == {f"t{i}" for i in range(5)}
    assert out["t3"]["status"] == "completed" and out["t3"]["reply"] == "done: job 3"
    assert out["t3"]["agent"] == "solo" and out["t3"]["elapsed"] >= 0


def test_batch_skips_ids_already_in_the_output(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    tasks = write_tasks(workdir / "in.jsonl", '{"id": "a", "task": "x"}', '{"id": "b", "task": "y"}')
    (workdir / "out.jsonl").write_text('{"id": "a", "status": "completed"}\n')
    assert invoke("batch", "--tasks", str(tasks), "--output", "out.jsonl", "--quiet").exit_code == 0
    lines = (workdir / "out.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", "b"]


def test_batch_failing_item_is_an_error_line_and_the_rest_still_run(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    tasks = write_tasks(
        workdir / "in.jsonl", '{"id": "bad", "agent": "ghost", "task": "x"}', '{"id": "ok", "task": "y"}'
    )
    result = invoke("batch", "--tasks", str(tasks), "--output", "out.jsonl", "--quiet")
    assert result.exit_code == 1
    out = records(workdir / "out.jsonl")
    assert out["bad"]["status"] == "error" and "ghost" in out["bad"]["error"]
    assert out["ok"]["status"] == "completed"


def test_batch_reports_bad_input_lines_by_number(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    tasks = write_tasks(workdir / "in.jsonl", '{"id": "ok", "task": "y"}', "not json", '{"id": "no-task"}')
    result = invoke("batch", "--tasks", str(tasks), "--output", "out.jsonl", "--quiet")
    assert result.exit_code == 1
    assert "line 2" in result.stderr and "line 3" in result.stderr
    assert set(records(workdir / "out.jsonl")) == {"ok"}


def test_batch_context_reaches_the_agent_before_the_task(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    from shelly_dist.cli.batch import BatchItem, item_messages

    messages = item_messages(BatchItem(id="1", task="the task", context="some context"))
    assert [m.text_content() for m in messages] == ["<context>\nsome context\n</context>", "the task"]


async def test_an_in_process_batch_keeps_nothing_of_its_finished_items(workdir: Path) -> None:
    from shelly_dist.cli.batch import BatchItem, run_batch
    from shelly_dist.engine import Engine

    config = write_config(workdir, {"*": ["done: {task}"]})
    items = [BatchItem(id=f"t{i}", task=f"job {i}") for i in range(5)]
    async with await Engine.open(config, shelly_dir=workdir / ".shelly") as engine:
        assert await run_batch(engine, items, workdir / "out.jsonl", concurrency=2) == 0
        assert engine.cached_sessions() == {"registries": 0, "stores": 0, "boards": 0}


def test_two_lines_of_one_id_are_an_error_naming_the_lines(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir)
    tasks = write_tasks(workdir / "in.jsonl", '{"id": "a", "task": "x"}', '{"id": "b", "task": "y"}',
                        '{"id": "a", "task": "z"}')
    result = invoke("batch", "--tasks", str(tasks), "--output", "out.jsonl", "--quiet")
    assert result.exit_code == 2
    assert "id 'a' on lines 1, 3" in result.stderr
    assert not (workdir / "out.jsonl").exists()


def test_a_line_with_a_bad_utf8_byte_is_one_skipped_line(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, {"*": ["done: {task}"]})
    (workdir / "in.jsonl").write_bytes(
        b'{"id": "a", "task": "x"}\n{"id": "b", "task": "\xff"}\n{"id": "c", "task": "z"}\n')
    result = invoke("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet")
    assert result.exit_code == 1
    assert "line 2: not UTF-8 (byte 0xff" in result.stderr
    assert set(records(workdir / "out.jsonl")) == {"a", "c"}


def test_a_torn_last_output_line_is_cut_reported_and_its_item_run_again(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, {"*": ["done: {task}"]})
    tasks = write_tasks(workdir / "in.jsonl", '{"id": "a", "task": "x"}', '{"id": "b", "task": "y"}')
    (workdir / "out.jsonl").write_text('{"id": "a", "status": "completed"}\n{"id": "b", "stat')
    result = invoke("batch", "--tasks", str(tasks), "--output", "out.jsonl", "--quiet")
    assert result.exit_code == 0
    assert "line 2 was cut short" in result.stderr
    assert records(workdir / "out.jsonl")["b"]["reply"] == "done: y"


def test_a_last_output_record_without_its_newline_gets_one_and_is_kept(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, {"*": ["done: {task}"]})
    tasks = write_tasks(workdir / "in.jsonl", '{"id": "a", "task": "x"}', '{"id": "b", "task": "y"}')
    (workdir / "out.jsonl").write_text('{"id": "a", "status": "completed"}')
    assert invoke("batch", "--tasks", str(tasks), "--output", "out.jsonl", "--quiet").exit_code == 0
    assert [r["id"] for r in map(json.loads, (workdir / "out.jsonl").read_text().splitlines())] == ["a", "b"]


async def test_an_item_that_meets_a_store_failure_is_not_recorded_and_the_batch_names_it(workdir: Path) -> None:
    import pytest

    from shelly_dist.cli.batch import BatchItem, run_batch
    from shelly_dist.engine import Engine
    from shelly_dist.errors import RunError, StoreError

    class BrokenPool:
        async def run(self, agent: str, item_id: str, messages: object) -> dict[str, str]:
            raise StoreError("coordinator: redis error: ConnectionError: Connection refused")

        async def cancel_all(self) -> None: ...

    write_config(workdir)
    output = workdir / "out.jsonl"
    async with await Engine.open(None, shelly_dir=str(workdir / ".shelly")) as engine:
        with pytest.raises(RunError, match=r"2 of 2 items not run: .*a rerun runs them"):
            await run_batch(engine, [BatchItem(id="a", task="x"), BatchItem(id="b", task="y")], output,
                            concurrency=2, pool=BrokenPool())  # type: ignore[arg-type]
    assert not output.exists()


def test_a_batch_item_may_name_a_team(invoke, workdir: Path) -> None:  # type: ignore[no-untyped-def]
    write_config(workdir, {"solo": ["solo did it"]}, teams=[{"name": "pair", "members": ["solo"]}])
    tasks = write_tasks(workdir / "in.jsonl", '{"id": "t", "agent": "pair", "task": "x"}')
    assert invoke("batch", "--tasks", str(tasks), "--output", "out.jsonl", "--quiet").exit_code == 0
    out = records(workdir / "out.jsonl")["t"]
    assert out["agent"] == "pair" and out["reply"] == "solo did it"


def test_each_output_line_carries_its_trees_usage_and_cost_and_the_batch_ends_with_the_total(
    invoke, workdir: Path  # type: ignore[no-untyped-def]
) -> None:
    import yaml

    from shelly_dist.testing.model_server import ModelServer, Reply

    with ModelServer(format="openai", default=Reply(text="priced", usage={"input": 1000, "output": 200})) as server:
        config = {"providers": [{"name": "p", "kind": "openai", "model": "gpt-5.4", "base_url": server.url,
                                 "api_key": "k"}],
                  "agents": [{"name": "solo", "description": "answers"}]}
        (workdir / ".shelly").mkdir(exist_ok=True)
        (workdir / ".shelly" / "config.yaml").write_text(yaml.safe_dump(config))
        tasks = write_tasks(workdir / "in.jsonl", *(json.dumps({"id": f"t{i}", "task": f"job {i}"}) for i in range(3)))
        result = invoke("batch", "--tasks", str(tasks), "--output", "out.jsonl", "--quiet")
    assert result.exit_code == 0, result.output
    usage = records(workdir / "out.jsonl")["t1"]["usage"]
    cost = (1000 * 2.50 + 200 * 15.0) / 1_000_000
    assert (usage["input_tokens"], usage["output_tokens"], usage["model_requests"]) == (1000, 200, 1)
    assert abs(usage["cost_usd"] - cost) < 1e-9
    summary = result.stderr.strip().splitlines()[-1]
    assert summary == (f"batch: 3 items, 3,600 tokens (3,000 in, 600 out, 0 cache), ${3 * cost:.4f}, "
                       "3 model requests")


def test_a_line_that_is_not_json_is_named_with_its_number_and_the_parsers_words(  # type: ignore[no-untyped-def]
    invoke, workdir: Path
) -> None:
    write_config(workdir, {"*": ["done: {task}"]})
    (workdir / "in.jsonl").write_text('{"id": "a", "task": "x"}\n{"id": "b", "task": }\n')
    result = invoke("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet")
    assert result.exit_code == 1
    assert "batch: in.jsonl: line 2: invalid JSON (expected value at column 21)" in result.stderr
    assert "line: Invalid JSON" not in result.stderr
    assert "batch: 1 items, 1 input line not read (see above)," in result.stderr  # the summary counts it


async def test_an_item_whose_run_keeps_vanishing_from_redis_is_not_recorded_so_a_rerun_runs_it(
    workdir: Path,
) -> None:
    from shelly_dist.cli.batch import ItemNotRun, run_item
    from shelly_dist.cli.batch_files import BatchItem
    from shelly_dist.engine import Engine
    from shelly_dist.errors import RunNotFound

    class Vanishing:  # PoolItems whose every submission Redis loses
        async def run(self, agent: str, item_id: str, messages: object) -> dict[str, object]:
            raise RunNotFound(f"run b{item_id}: not found", run_id=f"b{item_id}")

    write_config(workdir, {"*": ["done"]})
    async with await Engine.open(None, shelly_dir=str(workdir / ".shelly")) as engine:
        with pytest.raises(ItemNotRun) as info:
            await run_item(engine, BatchItem(id="a", task="x"), Vanishing())  # type: ignore[arg-type]
    assert "gone from Redis" in info.value.cause
