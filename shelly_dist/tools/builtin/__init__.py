"""Shelly's built-in toolboxes, by the names a config lists: filesystem, exec, search, git, http, notes.

Every factory takes the shared :class:`~shelly_dist.tools.permissions.Permissions` (headless in
workers) and the project root; :func:`builtin_toolbox` is the lookup the engine calls.
"""

from __future__ import annotations

from pathlib import Path

from shelly_dist.errors import ConfigError
from shelly_dist.tools.builtin.exec import exec_toolbox
from shelly_dist.tools.builtin.filesystem import filesystem_toolbox
from shelly_dist.tools.builtin.git import git_toolbox
from shelly_dist.tools.builtin.http import http_toolbox
from shelly_dist.tools.builtin.notes import notes_toolbox
from shelly_dist.tools.builtin.search import search_toolbox
from shelly_dist.tools.permissions import Permissions
from shelly_dist.tools.toolbox import ToolBox

BUILTIN_NAMES = ("filesystem", "exec", "search", "git", "http", "notes")


def builtin_toolbox(name: str, perms: Permissions, *, root: Path, notes_dir: Path | None = None) -> ToolBox:
    """The built-in toolbox called ``name``; an unknown name is a ``ConfigError``.

    ``notes_dir`` defaults to ``<root>/.shelly/local/notes``.
    """
    root = Path(root)
    if name == "filesystem":
        return filesystem_toolbox(perms, root=root)
    if name == "exec":
        return exec_toolbox(perms, root=root)
    if name == "search":
        return search_toolbox(perms, root=root)
    if name == "git":
        return git_toolbox(perms, root=root)
    if name == "http":
        return http_toolbox(perms, root=root)
    if name == "notes":
        return notes_toolbox(notes_dir or root / ".shelly" / "local" / "notes")
    raise ConfigError(
        f"toolboxes: unknown built-in toolbox {name!r} (known: {', '.join(BUILTIN_NAMES)})", field="toolboxes"
    )


__all__ = [
    "BUILTIN_NAMES",
    "builtin_toolbox",
    "exec_toolbox",
    "filesystem_toolbox",
    "git_toolbox",
    "http_toolbox",
    "notes_toolbox",
    "search_toolbox",
]
