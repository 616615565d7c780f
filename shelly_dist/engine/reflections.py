"""Reflection notes as files, for embedded runs: one markdown file per note in the state
directory's ``reflections/`` (never in ``.shelly/``, which may be read-only), newest by
modification time, as Go reads its ``ReflectionDir``."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path


class DirectoryReflectionStore:
    """The ``ReflectionStore`` (:mod:`shelly_dist.agent.reflections`) of one project, in ``root``
    (created on first write)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def add(self, name: str, text: str) -> None:
        def write() -> None:
            self.root.mkdir(parents=True, exist_ok=True)
            path = self.root / name
            stem, n = path.stem, 1
            while path.exists():  # two failures in the same second: keep both
                path, n = self.root / f"{stem}-{n}.md", n + 1
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)

        await asyncio.to_thread(write)

    async def newest(self, limit: int) -> list[str]:
        def read() -> list[str]:
            if not self.root.is_dir():
                return []
            files = [p for p in self.root.iterdir() if p.suffix == ".md" and p.is_file()]
            files.sort(key=lambda p: p.stat().st_mtime_ns, reverse=True)
            out = []
            for p in files[:limit]:
                try:
                    out.append(p.read_text(encoding="utf-8"))
                except OSError:
                    continue
            return out

        return await asyncio.to_thread(read)
