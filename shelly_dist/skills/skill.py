"""A skill: a folder holding ``SKILL.md``, whose frontmatter names and describes it.

The frontmatter rules are Shelly's, byte for byte, because users' existing skills must load
unchanged: CRLF is normalised first; the block opens with ``---\\n`` and closes with ``\\n---\\n``
or with a final ``\\n---``; with no closing delimiter the whole text is the body; YAML that does
not parse (or is not a mapping) is an ``invalid frontmatter`` error. A skill is a setup
problem when it fails to load, so errors are :class:`~shelly_dist.errors.ConfigError` (exit 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from shelly_dist.errors import ConfigError

SKILL_FILE = "SKILL.md"


@dataclass(frozen=True)
class Skill:
    """One loaded skill. ``dir`` is absolute ("" for a skill built in code)."""

    name: str
    description: str = ""
    content: str = ""
    dir: str = ""

    @property
    def has_description(self) -> bool:
        """Skills with a description are loaded on demand; the others are inlined in the prompt."""
        return bool(self.description)


def split_frontmatter(text: str) -> tuple[str | None, str]:
    """Split ``text`` into (frontmatter YAML or ``None``, body), after normalising CRLF."""
    text = text.replace("\r\n", "\n")
    if not text.startswith("---\n"):
        return None, text
    end = text.find("\n---\n", 3)
    if end != -1:
        return text[4:end], text[end + 5 :]
    if text.endswith("\n---") and len(text) >= 7:
        return text[4:-4], ""
    return None, text


def parse_skill(text: str, *, folder_name: str, dir: str = "") -> Skill:
    """Build a skill from the text of a ``SKILL.md``; the name defaults to ``folder_name``."""
    front, body = split_frontmatter(text)
    meta: dict[str, Any] = {}
    if front is not None and front.strip():
        try:
            loaded = yaml.safe_load(front)
        except yaml.YAMLError as exc:
            raise ConfigError(f"skill {folder_name}: invalid frontmatter: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"skill {folder_name}: invalid frontmatter: expected a mapping")
        meta = loaded or {}
    name = meta.get("name")
    description = meta.get("description")
    return Skill(
        name=str(name) if name else folder_name,
        description=str(description) if description else "",
        content=body,
        dir=dir,
    )


def load_skill_dir(dir: str | os.PathLike[str]) -> Skill:
    """Load the skill in folder ``dir`` (which must hold ``SKILL.md``). Blocking I/O."""
    path = Path(dir).resolve()
    try:
        text = (path / SKILL_FILE).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"skill: load {path / SKILL_FILE}: {exc.strerror or exc}") from exc
    return parse_skill(text, folder_name=path.name, dir=str(path))


def load_skills(root: str | os.PathLike[str]) -> list[Skill]:
    """Every skill under ``root``, by folder name; folders without ``SKILL.md`` are skipped.

    A missing or unreadable ``root`` is an error (``skill: load dir <root>: …``); callers that
    treat "no skills folder" as "no skills" check for it first. Blocking I/O.
    """
    base = Path(root)
    try:
        entries = sorted(base.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise ConfigError(f"skill: load dir {base}: {exc.strerror or exc}") from exc
    return [load_skill_dir(e) for e in entries if e.is_dir() and (e / SKILL_FILE).is_file()]
