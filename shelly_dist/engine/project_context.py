"""The project context put into every agent's system prompt: external rules plus ``.shelly/*.md``.

Assembled exactly as Shelly does (§1.11) so prompts match: first the *external* files at the
project root (``CLAUDE.md``, ``.cursorrules``, ``.cursor/rules/*.mdc`` alphabetically with their
frontmatter stripped), each read up to ``max_external_file_size`` bytes; then every
``.shelly/*.md`` sorted by name. Each text is trimmed and empty ones are skipped; they are joined
by a blank line, and the whole is cut at 32,000 characters with a visible marker. Blocking I/O:
the engine calls it through ``asyncio.to_thread`` at start-up.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from shelly_dist.skills import split_frontmatter

MAX_CONTEXT_CHARS = 32_000
TRUNCATION_MARKER = "\n\n[truncated — context exceeds limit]"
DEFAULT_MAX_EXTERNAL_FILE_SIZE = 512 * 1024


def _read_capped(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(limit)
    except OSError:
        return ""
    return data.decode("utf-8", errors="ignore")


def _external_files(project_root: Path) -> list[Path]:
    rules = project_root / ".cursor" / "rules"
    mdc = sorted(rules.glob("*.mdc")) if rules.is_dir() else []
    return [project_root / "CLAUDE.md", project_root / ".cursorrules", *mdc]


def load_project_context(
    shelly_dir: str | os.PathLike[str], max_external_file_size: int = DEFAULT_MAX_EXTERNAL_FILE_SIZE
) -> str:
    """The context text for the project owning ``shelly_dir`` ("" when there is none)."""
    root = Path(shelly_dir)
    parts: list[str] = []
    for path in _external_files(root.resolve().parent):
        if not path.is_file():
            continue
        text = _read_capped(path, max_external_file_size)
        if path.suffix == ".mdc":
            text = split_frontmatter(text)[1]
        parts.append(text)
    curated = sorted(p for p in root.glob("*.md") if p.is_file()) if root.is_dir() else []
    parts += (p.read_text(encoding="utf-8", errors="replace") for p in curated)
    text = "\n\n".join(t.strip() for t in parts if t.strip())
    if len(text) > MAX_CONTEXT_CHARS:
        text = text[:MAX_CONTEXT_CHARS] + TRUNCATION_MARKER
    return text


def is_knowledge_stale(project_root: str | os.PathLike[str], shelly_dir: str | os.PathLike[str]) -> bool:
    """Whether ``context.md`` is older than the last commit (missing → stale).

    Git errors or a repository without commits count as fresh (fails open, like Shelly).
    """
    context = Path(shelly_dir) / "context.md"
    if not context.is_file():
        return True
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%ct"],
            cwd=project_root,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
        committed = int(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return False
    return context.stat().st_mtime < committed
