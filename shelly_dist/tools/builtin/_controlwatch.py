"""What a program ``exec_run`` started did to the control files, and putting it back.

``exec_run`` runs a trusted program, which may write anything its arguments tell it to
(``sed -i``, ``cp``, ``python -c``): what it writes cannot be checked before it runs. What can be
checked is the control files (:mod:`~shelly_dist.tools.control_files`) before and after: every
control file and everything under a control directory is snapshot (its kind, bytes and mode, or
a symlink's target) before the program starts; afterwards a change that the person does not
allow (headless: always refused) is undone, new files removed, old bytes put back, and the call
fails naming the file. Blocking I/O: the caller runs these functions in a thread.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

MAX_FILES = 5_000
"""Entries snapshot per call at most; a control directory holding more is compared by what was
read (the rest cannot be put back, and the call says so)."""

MAX_BYTES = 16 * 1024 * 1024
"""Bytes kept per call at most (control files are small: a ``.env``, prompt files, modules)."""


@dataclass(frozen=True)
class Entry:
    """One path's state: ``kind`` is "absent", "file", "dir", "link" or "other"."""

    kind: str
    data: bytes | None = None
    """A file's bytes (``None`` once :data:`MAX_BYTES` is spent: compared by size and mtime)."""
    mode: int = 0
    target: str = ""
    """A symlink's target."""
    size: int = 0
    mtime_ns: int = 0

    def same(self, other: Entry) -> bool:
        if self.kind != other.kind or self.target != other.target:
            return False
        if self.kind != "file":
            return True
        if self.data is not None and other.data is not None:
            return self.data == other.data and stat.S_IMODE(self.mode) == stat.S_IMODE(other.mode)
        return (self.size, self.mtime_ns) == (other.size, other.mtime_ns)


class Snapshot(dict[str, dict[str, Entry]]):
    """Control path → (the path itself or a path under it → its state); the directories in
    :attr:`skip` are not looked into (what shelly itself writes meanwhile: the state directory)."""

    skip: frozenset[str] = frozenset()


class _Budget:
    def __init__(self) -> None:
        self.files = MAX_FILES
        self.bytes = MAX_BYTES


def _entry(path: str, budget: _Budget, keep: bool) -> Entry:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Entry("absent")
    except OSError:
        return Entry("other")
    if stat.S_ISLNK(st.st_mode):
        return Entry("link", target=os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return Entry("dir", mode=st.st_mode)
    if not stat.S_ISREG(st.st_mode):
        return Entry("other")
    data = None
    if keep and st.st_size <= budget.bytes:
        try:
            with open(path, "rb", buffering=0) as f:  # O_NOFOLLOW not needed: lstat said regular file
                data = f.read()
            budget.bytes -= len(data)
        except OSError:
            data = None
    return Entry("file", data=data, mode=st.st_mode, size=st.st_size, mtime_ns=st.st_mtime_ns)


def _walk(root: str, budget: _Budget, keep: bool, skip: frozenset[str] = frozenset()) -> dict[str, Entry]:
    out = {root: _entry(root, budget, keep)}
    if out[root].kind != "dir":
        return out
    for folder, dirs, files in os.walk(root, followlinks=False):
        names = [*dirs, *files]
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in skip]
        for name in names:
            if budget.files <= 0:
                return out
            budget.files -= 1
            path = os.path.join(folder, name)
            if path not in skip:
                out[path] = _entry(path, budget, keep)
    return out


def snapshot(paths: Iterable[str], skip: Iterable[str] = ()) -> Snapshot:
    """The state of each control path (files and whole directories, but not the folders of
    ``skip``), bytes kept for putting back."""
    budget = _Budget()
    out = Snapshot()
    out.skip = frozenset(_resolved(p) for p in skip)
    for root in _outermost(paths):
        out[root] = _walk(root, budget, keep=True, skip=out.skip)
    return out


def _bytecode(path: str) -> bool:
    return "__pycache__" in path.split(os.sep)


def changed(before: Snapshot) -> list[str]:
    """The control paths (as :func:`snapshot` was given them) whose state differs now, bytecode
    caches aside (:func:`drop_new_bytecode`)."""
    budget = _Budget()
    out = []
    for root, entries in before.items():
        now = _walk(root, budget, keep=True, skip=before.skip)
        old = {p: e for p, e in entries.items() if not _bytecode(p)}
        new = {p: e for p, e in now.items() if not _bytecode(p)}
        if old.keys() != new.keys() or any(not e.same(new[p]) for p, e in old.items()):
            out.append(root)
    return out


def drop_new_bytecode(before: Snapshot) -> None:
    """Remove the ``__pycache__`` files a program wrote or changed in a control directory: a
    program importing a ``python:`` package (a test run) writes them as a matter of course, but
    a forged ``.pyc`` whose header matches the source would run instead of it; Python writes
    them again from the source."""
    for root, entries in before.items():
        for path, now in _walk(root, _Budget(), keep=False, skip=before.skip).items():
            if not _bytecode(path) or now.kind == "dir":
                continue
            old = entries.get(path)
            if old is None or (old.kind, old.size, old.mtime_ns) != (now.kind, now.size, now.mtime_ns):
                _remove(path)


def restore(before: Snapshot, root: str) -> list[str]:
    """Put ``root`` back as :func:`snapshot` saw it: remove what is new (deepest first), rewrite
    what changed (shallowest first). The paths that could not be put back (their bytes were not
    kept, or an error), empty when all were."""
    failed: list[str] = []
    entries = before[root]
    now = _walk(root, _Budget(), keep=False, skip=before.skip)
    for path in sorted(now.keys() - entries.keys(), key=len, reverse=True):
        _remove(path)
    for path in sorted(entries, key=len):
        old = entries[path]
        current = _entry(path, _Budget(), keep=True)
        if old.same(current):
            continue
        try:
            _put(path, old, current)
        except OSError:
            failed.append(path)
        if old.kind == "file" and old.data is None:
            failed.append(path)
    return failed


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _put(path: str, old: Entry, current: Entry) -> None:
    if old.kind == "absent":
        _remove(path)
    elif old.kind == "dir":
        if current.kind != "dir":
            _remove(path)
            os.makedirs(path, exist_ok=True)
        os.chmod(path, stat.S_IMODE(old.mode))
    elif old.kind == "link":
        _remove(path)
        os.symlink(old.target, path)
    elif old.kind == "file" and old.data is not None:
        if current.kind == "dir":
            _remove(path)
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".shelly-restore-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(old.data)
            os.chmod(tmp, stat.S_IMODE(old.mode))
            os.replace(tmp, path)  # replaces a symlink put there instead of writing through it
        except BaseException:
            _remove(tmp)
            raise


def _outermost(paths: Iterable[str]) -> list[str]:
    """``paths`` with their folders resolved (a lexical and a resolved form of one path are
    snapshot once; a control file that is itself a symlink stays one), without those inside
    another one."""
    norm = sorted({_resolved(p) for p in paths}, key=len)
    out: list[str] = []
    for p in norm:
        if not any(p == q or p.startswith(q.rstrip(os.sep) + os.sep) for q in out):
            out.append(p)
    return out


def _resolved(path: str) -> str:
    """``path`` absolute, its folder's symlinks resolved (not its own: a symlink stays one)."""
    return os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))
