"""The files the docs send a reader to exist: a module moved (``runtime/celery/`` into its four
rooms, ``runtime_settings`` beside the config models) must take the docs that name it along."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATH = re.compile(r"(?<![\w./-])((?:shelly_dist|tests|bench)/[\w./-]*?\.py)\b")
"""A repository path the docs name: ``shelly_dist/…py``, ``tests/…py`` or ``bench/…py`` (a line
number or a ``::test`` may follow it)."""


def documents() -> list[Path]:
    return sorted([*ROOT.joinpath("docs").rglob("*.md"), ROOT / "README.md",
                   *ROOT.joinpath("shelly_dist").rglob("*.md")])


def missing_paths(text: str) -> list[str]:
    """The repository paths named in ``text`` that are not files of the repository."""
    return sorted({p for p in PATH.findall(text) if not (ROOT / p).is_file()})


def test_every_repository_path_named_in_the_docs_exists():
    missing = [f"{doc.relative_to(ROOT)}: {p}" for doc in documents() if doc.is_file()
               for p in missing_paths(doc.read_text(encoding="utf-8"))]
    assert missing == []


def test_the_check_sees_a_moved_module():
    assert missing_paths("see `shelly_dist/runtime/celery/executor.py:60` and `shelly_dist/errors.py`") == [
        "shelly_dist/runtime/celery/executor.py"]
