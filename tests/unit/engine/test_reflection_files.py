"""Reflection notes as files (embedded runs): newest first, and two notes of the same second kept."""

from __future__ import annotations

import os
from pathlib import Path

from shelly_dist.engine.reflections import DirectoryReflectionStore


async def test_notes_are_read_newest_first_and_a_same_second_name_keeps_both(tmp_path: Path):
    store = DirectoryReflectionStore(tmp_path / "reflections")
    assert await store.newest(5) == []
    await store.add("a-20260101-000000.md", "old")
    await store.add("a-20260101-000000.md", "same second")
    await store.add("b-20260101-000001.md", "new")
    files = sorted((tmp_path / "reflections").iterdir())
    for age, name in enumerate(["a-20260101-000000.md", "a-20260101-000000-1.md", "b-20260101-000001.md"]):
        os.utime(tmp_path / "reflections" / name, (1000 + age, 1000 + age))
    assert len(files) == 3
    assert await store.newest(2) == ["new", "same second"]
