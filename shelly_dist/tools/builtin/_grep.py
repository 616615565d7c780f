"""The searches' walk, run as a program of its own: ``python -I -S _grep.py REQUEST``.

Python's ``re`` holds the GIL for a whole match and cannot be interrupted, so a pattern that
backtracks catastrophically (``(a+)+$`` on 28 characters: 13 s, doubling per character) would
freeze the worker's event loop and its lease renewer if it ran in a thread. Here it runs in a
process the caller kills at its deadline (:func:`shelly_dist.tools.builtin.search`), under an
address-space limit (:data:`MEMORY_LIMIT`), and starts in ~25 ms because it imports only the
standard library (importing the package would cost ~0.8 s of CPU per call). The same module
gives the caller :func:`files`, so both sides walk alike.

Files are read line by line, never whole; ``context`` lines come from a sliding window. The
result (a JSON list of ``{path, line, content, context?}``) stops growing once its encoded size
passes ``cap``, and every line in it is cut at :data:`MAX_LINE` characters, so its size is bounded
whatever the files hold. Only regular files are read; every open is non-blocking (a FIFO is
skipped). The walk goes by descriptors and checks each file where it was opened
(:func:`files`), so a symlink swapped in after any check cannot make it read outside the
directory.

The REQUEST argument is a JSON object: directory, max_results, cap, and either pattern and
context (``search_content``) or glob (``search_files``, whose regex can backtrack as badly:
:func:`glob_regex`). The result goes to stdout; an error goes to stderr as one line and the
exit status is 2.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})
MAX_LINE = 2000
"""Characters kept of one line in a result; the rest is replaced by ``…``."""
MEMORY_LIMIT = 1 << 30
"""Address space of the search process (1 GB): a gigantic line fails the call, not the host."""


def _within(path: str, directory: str) -> bool:
    """``path`` is ``directory`` or below it (both real paths); permissions.path_within's rule,
    restated because this module may import nothing from the package."""
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def _open_root(directory: str) -> int:
    """A descriptor of ``directory`` (absolute, symlink-free: the caller's checked real path),
    reached from ``/`` one component at a time with ``O_NOFOLLOW``: the fs tools' walk
    (``_safefs.open_dir``), restated here for the same reason as :func:`_within`. A symlink put in
    place of a component after the check makes it fail (ELOOP) instead of leading elsewhere."""
    fd = os.open("/", _DIR)
    try:
        for name in Path(directory).parts[1:]:
            child = os.open(name, _DIR, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _real(fd: int) -> str | None:
    """Where the open ``fd`` really is (``/proc/self/fd``), or None when that cannot be told."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def files(directory: Path) -> Iterator[tuple[int, str]]:
    """(open descriptor, relative path) of every regular file below ``directory`` that is inside it.

    Open, then verify — never a path looked up again after a check: the walk holds each
    directory's descriptor and opens what it lists relative to it (``dir_fd``), a subdirectory with
    ``O_NOFOLLOW`` (a symlinked directory is not followed, nor one swapped in after the listing); a
    file is opened first and then checked by where the open descriptor really is
    (``/proc/self/fd``), so a symlink swapped in at any moment leads to a descriptor outside
    ``directory``, which is closed unread. Without ``/proc`` a symlink is not followed at all.
    The caller closes each descriptor it is given. At most one descriptor per level is open."""
    real_dir = str(directory)
    proc = os.path.isdir("/proc/self/fd")
    yield from _walk(_open_root(real_dir), "", real_dir, proc)


def _walk(dir_fd: int, prefix: str, real_dir: str, proc: bool) -> Iterator[tuple[int, str]]:
    """:func:`files` below the open ``dir_fd`` (closed here)."""
    try:
        try:
            with os.scandir(dir_fd) as it:
                listed = [(e.is_dir(follow_symlinks=False), e.name) for e in it]
        except OSError:
            return
        # A directory's files come before its subdirectories', each in name order (as os.walk).
        for is_dir, name in sorted(listed):
            if is_dir:
                if name in SKIPPED_DIRS:
                    continue
                try:
                    child = os.open(name, _DIR, dir_fd=dir_fd)
                except OSError:  # swapped for a symlink or a file since the listing
                    continue
                yield from _walk(child, prefix + name + "/", real_dir, proc)
                continue
            try:
                # A device is never opened (opening one can act on it); FIFOs are skipped too.
                if not stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=proc).st_mode):
                    continue
                fd = os.open(name, _FILE if proc else _FILE | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError:
                continue
            where = _real(fd) if proc else real_dir
            if where is None or not _within(where, real_dir) or not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                continue
            yield fd, prefix + name
    finally:
        os.close(dir_fd)


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + "…"


def _open_text(fd: int) -> TextIO | None:
    """The open file as text lines, or None for a non-regular file (FIFO, device, socket: opened
    non-blocking, never read) or a binary one (a NUL byte in its first 8 KB). Takes ``fd`` over:
    it is closed when None is returned, else with the text."""
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode) and b"\0" not in os.pread(fd, 8192, 0):
            text = open(fd, encoding="utf-8", errors="replace")  # the caller closes it
            fd = -1
            return text
        return None
    finally:
        if fd >= 0:
            os.close(fd)


class _Collector:
    """Results with their context, within ``max_results`` entries and ``cap`` encoded characters."""

    def __init__(self, max_results: int, context: int, cap: int) -> None:
        self.results: list[dict[str, object]] = []
        self.max_results, self.context, self.budget = max_results, context, cap
        self.open: list[tuple[list[str], int]] = []  # (an entry's context, lines it still lacks)

    def full(self) -> bool:
        return self.budget <= 0 or (len(self.results) >= self.max_results and not self.open)

    def _spend(self, text: str) -> str:
        self.budget -= len(json.dumps(text)) + 2
        return text

    def line(self, rel: str, number: int, text: str, before: deque[str], matched: bool) -> None:
        """Feed one line: it extends the open entries' context, and starts an entry if matched."""
        for ctx, _ in self.open:
            ctx.append(self._spend(_cut(text)))
        self.open = [(ctx, lacking - 1) for ctx, lacking in self.open if lacking > 1]
        if not matched or len(self.results) >= self.max_results or self.budget <= 0:
            return
        entry: dict[str, object] = {"path": rel, "line": number, "content": self._spend(_cut(text))}
        self.budget -= len(rel) + 40
        if self.context:
            ctx = [self._spend(_cut(b)) for b in (*before, text)]
            entry["context"] = ctx
            self.open.append((ctx, self.context))
        self.results.append(entry)

    def end_of_file(self) -> None:
        self.open = []


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a glob where ``**`` spans directories, ``*``/``?`` stay within one segment."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def find_files(glob: str, directory: str, max_results: int, cap: int) -> list[str]:
    """Relative paths matching ``glob`` (by name alone when it has no ``/``), at most
    ``max_results`` of them and about ``cap`` characters of JSON."""
    regex = glob_regex(glob)
    by_name = "/" not in glob
    found: list[str] = []
    for fd, rel in files(Path(directory)):
        os.close(fd)
        if regex.match(rel) or (by_name and regex.match(rel.rsplit("/", 1)[-1])):
            found.append(rel)
            cap -= len(json.dumps(rel)) + 2
            if len(found) >= max_results or cap <= 0:
                break
    return found


def search(pattern: str, directory: str, max_results: int, context: int, cap: int) -> list[dict[str, object]]:
    regex = re.compile(pattern)
    found = _Collector(max_results, context, cap)
    for fd, rel in files(Path(directory)):
        try:
            text = _open_text(fd)
        except OSError:
            continue
        if text is None:
            continue
        with text:
            before: deque[str] = deque(maxlen=context)
            try:
                for number, raw in enumerate(text, 1):
                    line = raw.rstrip("\r\n")
                    found.line(rel, number, line, before, regex.search(line) is not None)
                    if found.full():
                        return found.results
                    before.append(line)
            except OSError:
                pass
        found.end_of_file()
        if found.full():
            break
    return found.results


def main(argv: list[str]) -> int:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ImportError, ValueError, OSError):  # no limit here; the caller's deadline still holds
        pass
    request = json.loads(argv[1])
    try:
        if "glob" in request:
            results: list[object] = [*find_files(request["glob"], request["directory"], request["max_results"],
                                                request["cap"])]
        else:
            results = [*search(request["pattern"], request["directory"], request["max_results"],
                               request["context"], request["cap"])]
    except MemoryError:
        tool = "search_files" if "glob" in request else "search_content"
        print(f"{tool}: out of memory (over {MEMORY_LIMIT >> 20} MB): a line too long?", file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
