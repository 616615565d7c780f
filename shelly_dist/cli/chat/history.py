"""The chat's input history, as Shelly keeps it: ``<state dir>/history``, entries separated by a
NUL byte (so a message of several lines needs no escaping), the newest 500 kept, the file 0600.

Up and Down walk it as a shell does; what was typed before walking away is the draft, given back
when Down walks past the newest entry.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

MAX_ENTRIES = 500


class InputHistory:
    """Shell-like input history, saved on every entry (a crash keeps what was typed)."""

    def __init__(self, path: Path | None, max_entries: int = MAX_ENTRIES) -> None:
        self.path = path
        self.max_entries = max_entries
        self.entries: list[str] = []
        self._index = 0
        self._draft = ""
        if path is not None:
            with contextlib.suppress(OSError):
                raw = path.read_bytes().decode("utf-8", errors="replace")
                self.entries = [e for e in raw.split("\0") if e][-max_entries:]
        self._index = len(self.entries)

    def add(self, entry: str) -> None:
        """Remember ``entry`` (not an empty one) and save the history."""
        if not entry:
            return
        self.entries = [*self.entries, entry][-self.max_entries:]
        self._index, self._draft = len(self.entries), ""
        self._save()

    def up(self, current: str) -> str | None:
        """The entry before; ``None`` at the oldest. The first step keeps ``current`` as the draft."""
        if self._index <= 0:
            return None
        if self._index == len(self.entries):
            self._draft = current
        self._index -= 1
        return self.entries[self._index]

    def down(self) -> str | None:
        """The entry after, then the draft; ``None`` past it."""
        if self._index >= len(self.entries):
            return None
        self._index += 1
        return self._draft if self._index == len(self.entries) else self.entries[self._index]

    def _save(self) -> None:
        if self.path is None:
            return
        with contextlib.suppress(OSError):  # a history that cannot be kept never stops the chat
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write("\0".join(self.entries).encode())
