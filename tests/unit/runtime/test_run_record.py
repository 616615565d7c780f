"""A run's record has one writer: :meth:`RunRecord.new` chooses a new run's fields and
:meth:`RunRecord.fields` writes them; no module spells the record's fields by hand, and the Lua
asks whether a run ended through one fragment."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import shelly_dist
from shelly_dist.agent.records import ChildRequest
from shelly_dist.runtime.celery.journal import control_scripts, scripts
from shelly_dist.runtime.celery.journal.record import RunEnd, RunRecord, RunStatus

CREATION_FIELDS = {"id", "agent", "depth", "parent", "parent_key", "root", "session", "mode", "status", "task",
                   "fingerprint", "created", "updated", "pending", "attempts", "msg_count"}
RECORD_ONLY = {"parent_key", "msg_count", "instance_n", "attempts", "fingerprint", "created", "status"}
"""Field names a dict literal spelling a run record gives itself away by (``id``, ``agent`` or
``session`` are every event's too)."""
ROOT = Path(shelly_dist.__file__).parent
RECORD = ROOT / "runtime" / "celery" / "journal" / "record.py"


def test_a_new_child_record_has_every_creation_field_and_its_request():
    request = ChildRequest(agent="coder", task="fix " * 1000, depth=2, key="call_1:0", tool_call_id="call_1",
                           index=0, visited=["lead"], parent_run_id="p", parent_agent="lead")
    fields = RunRecord.new("c1", agent="coder", root="r", session="s", depth=2, parent="p", parent_key="1:call_1:0",
                           request=request, task=request.task, fingerprint="fp", now=5.0).fields()
    assert set(fields) == CREATION_FIELDS | {"request"}
    assert fields["status"] == "queued" and fields["mode"] == "worker"
    assert fields["created"] == fields["updated"] == "5.0"
    assert len(fields["task"]) == RunRecord.TASK_LIMIT
    assert RunRecord.parse(fields).request == request.model_dump_json()


def test_a_coordinators_root_record_is_running_with_its_owner_and_a_spawned_child_says_so():
    root = RunRecord.new("r", agent="lead", root="r", session="s", mode="coordinator", status=RunStatus.RUNNING,
                         task="t", fingerprint="fp", owner="owner:x").fields()
    assert root["status"] == "running" and root["owner"] == "owner:x" and "spawned" not in root
    spawned = RunRecord.new("c", agent="w", root="r", session="s", parent="r", spawned=True, task="t",
                            fingerprint="fp").fields()
    assert spawned["spawned"] == "1" and spawned["parent_key"] == ""


def record_spellings(path: Path) -> list[str]:
    """Where ``path`` spells a run record by hand: a dict literal with two of the record's own
    field names as keys, or a ``RunRecord(...)`` built field by field."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if len(keys & RECORD_ONLY) >= 2:
                out.append(f"{path.relative_to(ROOT)}:{node.lineno} {sorted(keys & RECORD_ONLY)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "RunRecord":
            out.append(f"{path.relative_to(ROOT)}:{node.lineno} RunRecord(...)")
    return out


def test_no_module_but_the_records_own_spells_a_run_record_by_hand():
    """Among the modules that write Redis (``runtime/``, ``state/``); the console's API rows are a
    view of records already read, not a record."""
    paths = [*(ROOT / "runtime").rglob("*.py"), *(ROOT / "state").rglob("*.py")]
    found = [hit for path in sorted(paths) if path != RECORD for hit in record_spellings(path)]
    assert found == []


def test_the_scan_sees_a_hand_written_record(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text('fields = {"id": "r", "status": "queued", "attempts": "0"}\nr = RunRecord(id="r")\n')
    assert record_spellings(bad) == ["bad.py:1 ['attempts', 'status']", "bad.py:2 RunRecord(...)"]


def script_texts() -> dict[str, str]:
    return {f"{m.__name__}.{name}": text for m in (scripts, control_scripts) for name, text in vars(m).items()
            if name.isupper() and isinstance(text, str) and "redis.call" in text}


def test_every_script_asks_whether_a_run_ended_through_the_one_fragment():
    """``ended(status)`` is spelled once (``scripts._ENDED``, from the endings); a script comparing
    a status with an ending itself would drift when an ending is added."""
    spelled = re.compile(r"[=~]= '(done|failed|canceled)'")
    own = {name: spelled.findall(text.replace(scripts._ENDED, "")) for name, text in script_texts().items()}
    allowed = {"shelly_dist.runtime.celery.journal.scripts.SPAWN_SUSPEND",  # a spawns hash's own 'done'
               "shelly_dist.runtime.celery.journal.control_scripts.BATCH_DROP",  # a desk state, not a run's
               "shelly_dist.runtime.celery.journal.control_scripts.BATCH_SAVE"}
    assert {name: hits for name, hits in own.items() if hits and name not in allowed} == {}
    users = [name for name, text in script_texts().items() if "ended(" in text.replace(scripts._ENDED, "")]
    assert all(scripts._ENDED in script_texts()[name] for name in users)


def test_no_script_reads_a_variable_argv_tail_by_position():
    """A script's variable part (children, extra fields, state changes) is one ``cjson`` table, not
    ``ARGV[i]``… decoded by position; what may trail ``ARGV`` is a homogeneous payload (messages,
    ``chunked('RPUSH', …)``) and the due index's hint suffix (``control_scripts.HINT``)."""
    loop = re.compile(r"for \w+ = [^,]+, #ARGV")
    assert [name for name, text in script_texts().items() if loop.search(text)] == []


def test_a_run_end_writes_only_the_fields_it_has():
    assert json.loads(RunEnd(usage='{"input_tokens": 1}', error="boom").to_json()) == {
        "usage": '{"input_tokens": 1}', "error": "boom"}
    assert RunEnd().to_json() == "{}"
