"""The files of ``shelly batch``: the JSONL input it reads and the JSONL output that is its journal.

Input: one item per line, ``{"id", "task", "agent"?, "context"?, "attachments"?}`` (other keys are
ignored); ``attachments`` lists files sent with the task (:mod:`shelly_dist.chats.attachments`), a
relative path read from the JSONL file's folder. A
line that is not UTF-8 or not a valid item is reported by number and skipped, never the end of the
batch; two lines with one id are an error naming both lines (their results could not be told apart
in the output, and on a pool both would be one run).

Output: one record per finished item, appended with a single ``write`` of the whole line to a file
opened ``O_APPEND``, so concurrent appends never interleave, and a record is either whole or, when
the process died mid-write, a torn last line without its newline. Before a batch appends anything,
:func:`done_ids` repairs such a tail: a whole record missing only its newline gets it; a torn one is
cut off and reported, and its item runs again.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import click
from pydantic import BaseModel, ConfigDict, ValidationError


class BatchItem(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    agent: str = ""
    task: str
    context: str = ""
    attachments: list[str] = []
    """Files sent with the task; :func:`read_items` makes relative paths the input file's folder's."""


def read_items(path: Path) -> tuple[list[BatchItem], list[str]]:
    """The valid items and one ``line N: problem`` message per bad line (blocking). Raises
    ``click.UsageError`` naming the lines when an id occurs on more than one line."""
    items: list[BatchItem] = []
    problems: list[str] = []
    lines_of: dict[str, list[int]] = {}
    for n, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(f"line {n}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})")
            continue
        if not line.strip():
            continue
        try:
            item = BatchItem.model_validate_json(line)
        except ValidationError as exc:
            first = exc.errors()[0]
            if first["type"] == "json_invalid":  # pydantic's "Invalid JSON: …" has no field to name
                said = str(first.get("ctx", {}).get("error") or first["msg"].removeprefix("Invalid JSON: "))
                said = re.sub(r"at line 1 column (\d+)", r"at column \1", said)  # the line is one JSON line
                problems.append(f"line {n}: invalid JSON ({said})")
                continue
            where = ".".join(str(p) for p in first["loc"]) or "the line"
            problems.append(f"line {n}: {where}: {first['msg']}")
            continue
        lines_of.setdefault(item.id, []).append(n)
        item.attachments = [str(path.parent / a) for a in item.attachments]  # an absolute one is kept
        items.append(item)
    repeated = {i: ns for i, ns in lines_of.items() if len(ns) > 1}
    if repeated:
        named = "; ".join(f"id {i!r} on lines {', '.join(map(str, ns))}" for i, ns in repeated.items())
        raise click.UsageError(f"batch: {path}: duplicate ids ({named}): each item needs an id of its own")
    return items, problems


def done_ids(path: Path) -> tuple[set[str], str | None]:
    """Ids already in the output file, after repairing a torn last line (blocking); the second value
    says what was repaired (None when nothing was). Other unreadable lines are ignored."""
    if not path.is_file():
        return set(), None
    data = path.read_bytes()
    repaired = None
    if data and not data.endswith(b"\n"):
        start = data.rfind(b"\n") + 1
        number = data.count(b"\n") + 1
        if _record(data[start:]) is not None:
            _append_bytes(path, b"\n")
            data += b"\n"
            repaired = f"line {number} lacked its newline (an interrupted write); added"
        else:
            with path.open("r+b") as f:
                f.truncate(start)
            data = data[:start]
            repaired = f"line {number} was cut short (an interrupted write); removed, its item runs again"
    ids = set()
    for line in data.split(b"\n"):
        value = _record(line)
        if value is not None and isinstance(value.get("id"), str):
            ids.add(value["id"])
    return ids, repaired


def _record(line: bytes) -> dict[str, object] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def append_record(path: Path, record: dict[str, object]) -> None:
    """Append ``record`` as one line in one ``write`` (blocking): never interleaved with another."""
    _append_bytes(path, (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))


def _append_bytes(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, data)
        if written != len(data):  # a full disk, a quota: say so rather than leave a silent stub
            raise OSError(f"batch: wrote {written} of {len(data)} bytes of a record to {path}")
    finally:
        os.close(fd)
