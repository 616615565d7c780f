"""File operations on a checked path that a symlink swapped in later cannot redirect, and writes
that a failure midway cannot tear (DESIGN §3 rule 16).

The filesystem tools check a path's symlink-resolved form (:meth:`Permissions.check_real`), then
operate on that form through :func:`open_dir`: a walk from ``/`` that opens each component with
``O_NOFOLLOW``, so every component must still be the real directory that was checked. A symlink
swapped in between the check and the operation makes the walk fail (:class:`PathSwapped`)
instead of leading outside the approved directory; the final name is then used relative to the
walked directory's descriptor (``openat``, ``renameat``, ``unlinkat``), never as a path again.

Writes go to a temporary file in the same directory, are flushed to disk, and replace the target
with one ``rename``: a reader sees the old content or the new, never a half; a write that fails
(disk full, quota, a kill) leaves the old file whole. Reads open with ``O_NONBLOCK`` and refuse
anything that is not a regular file, so a FIFO or a device cannot hold a thread forever.

All functions block: call them in a thread.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW


class PathSwapped(OSError):
    """A component of a checked path is no longer the directory that was checked (a symlink or a
    file was put in its place)."""


class NotRegular(OSError):
    """The path is a FIFO, a device or a socket: reading it could block or never end."""


def _open_child(parent: int, name: str, path: Path, *, create: bool) -> int:
    try:
        return os.open(name, _DIR, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(name, 0o777, dir_fd=parent)
    except FileExistsError:
        pass
    return _open_child(parent, name, path, create=False)


@contextmanager
def open_dir(path: Path, *, create: bool = False) -> Iterator[int]:
    """A descriptor of directory ``path`` (absolute, symlink-free), reached without following any
    symlink; missing directories are created when ``create``. Raises :class:`PathSwapped` when a
    component is a symlink or not a directory."""
    fd = os.open("/", _DIR)
    try:
        for name in path.parts[1:]:
            try:
                child = _open_child(fd, name, path, create=create)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    st = _lstat(fd, name)
                    if st is not None and not stat.S_ISLNK(st.st_mode):
                        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path)) from exc
                    raise PathSwapped(exc.errno, "path changed while in use (a symlink replaced a "
                                      "directory)", str(path)) from exc
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _lstat(parent: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def read_bytes(path: Path, limit: int) -> bytes:
    """The content of regular file ``path``; ``IsADirectoryError``, :class:`NotRegular`, or
    ``EFBIG`` (an ``OSError``) when larger than ``limit`` bytes."""
    with open_dir(path.parent) as parent:
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise PathSwapped(exc.errno, "path changed while in use (a symlink replaced the file)",
                                  str(path)) from exc
            raise
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(errno.EINVAL, "not a regular file (a FIFO, device or socket)", str(path))
        if st.st_size > limit:
            raise OSError(errno.EFBIG, "file too large", str(path))
        chunks = bytearray()
        while len(chunks) <= limit and (chunk := f.read(min(1 << 20, limit + 1 - len(chunks)))):
            chunks += chunk
        data = bytes(chunks)
    if len(data) > limit:
        raise OSError(errno.EFBIG, "file too large", str(path))
    return data


def write_atomic(path: Path, data: bytes, *, create_parents: bool = True) -> None:
    """Replace ``path`` with ``data`` through a temporary file and a rename in the same directory.

    The mode is the existing file's, else 0600. The target's directory is reached without
    following symlinks; a symlink at the final name is replaced, not followed.
    """
    with open_dir(path.parent, create=create_parents) as parent:
        old = _lstat(parent, path.name)
        if old is not None and stat.S_ISDIR(old.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        mode = stat.S_IMODE(old.st_mode) if old is not None and stat.S_ISREG(old.st_mode) else 0o600
        _replace(parent, path.name, mode, lambda f: f.write(data))


def _replace(parent: int, name: str, mode: int, fill: Callable[[BinaryIO], object]) -> None:
    """Write a temporary file beside ``name`` with ``fill``, flush it to disk, set ``mode`` and
    rename it over ``name``; on any failure the temporary file is removed and ``name`` untouched."""
    tmp = f".{name[:200]}.{secrets.token_hex(4)}.shelly-tmp"  # within NAME_MAX whatever the name
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=parent)
        except FileNotFoundError:
            pass
        raise


def make_dirs(path: Path) -> None:
    """Create directory ``path`` and its parents, following no symlink."""
    with open_dir(path, create=True):
        pass


def list_dir(path: Path) -> list[tuple[str, bool, int]]:
    """(name, is_dir, size) of each entry of directory ``path``, sorted by name; entries that
    vanish while listed are skipped."""
    out = []
    with open_dir(path) as fd:
        for entry in os.scandir(fd):
            try:
                st = os.stat(entry.name, dir_fd=fd)
            except OSError:
                continue
            out.append((entry.name, stat.S_ISDIR(st.st_mode), st.st_size))
    return sorted(out)


def stat_entry(path: Path) -> os.stat_result:
    """``lstat`` of ``path`` through its walked parent."""
    with open_dir(path.parent) as parent:
        st = _lstat(parent, path.name)
    if st is None:
        raise FileNotFoundError(errno.ENOENT, "no such file or directory", str(path))
    return st


def delete(path: Path, *, recursive: bool) -> None:
    """Delete the file, symlink or (empty unless ``recursive``) directory ``path``, following no
    symlink; ``OSError(ENOTEMPTY)`` for a non-empty directory without ``recursive``."""
    import shutil

    with open_dir(path.parent) as parent:
        st = _lstat(parent, path.name)
        if st is None:
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", str(path))
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path.name, dir_fd=parent)
        elif recursive:
            for _, dirs, files, _ in os.fwalk(path.name, dir_fd=parent):
                if ".git" in dirs or ".git" in files:
                    raise PermissionError(errno.EPERM, "refused: the tree holds a .git entry (repository "
                                          "internals are off limits to tools)", str(path))
            shutil.rmtree(path.name, dir_fd=parent)
        else:
            os.rmdir(path.name, dir_fd=parent)


def move(source: Path, destination: Path) -> None:
    """Rename ``source`` to ``destination`` (both walked; the destination's parents created).
    Across file systems the entry is copied then deleted."""
    with open_dir(source.parent) as src, open_dir(destination.parent, create=True) as dst:
        try:
            os.rename(source.name, destination.name, src_dir_fd=src, dst_dir_fd=dst)
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
    copy(source, destination)
    delete(source, recursive=True)


def _copy_file(src: int, name: str, dst: int, new: str) -> None:
    """Copy regular file ``name`` (in directory ``src``) to ``new`` (in ``dst``) through a
    temporary file and a rename, keeping its mode and times."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(errno.EINVAL, "not a regular file (a FIFO, device or socket)", name)

        def fill(g: BinaryIO) -> None:
            while chunk := f.read(1 << 20):
                g.write(chunk)
            g.flush()
            os.utime(g.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))

        _replace(dst, new, stat.S_IMODE(st.st_mode), fill)


def _copy_tree(src: int, dst: int) -> None:
    for entry in os.scandir(src):
        st = os.stat(entry.name, dir_fd=src, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            if entry.name == ".git":
                raise PermissionError(errno.EPERM, "refused: the tree holds a .git directory (repository "
                                      "internals are off limits to tools)", entry.path)
            os.mkdir(entry.name, stat.S_IMODE(st.st_mode) | 0o700, dir_fd=dst)
            with _child(src, entry.name) as s, _child(dst, entry.name) as d:
                _copy_tree(s, d)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(entry.name, dir_fd=src), entry.name, dir_fd=dst)
        elif stat.S_ISREG(st.st_mode):
            _copy_file(src, entry.name, dst, entry.name)
        # FIFOs, devices and sockets are not copied.


@contextmanager
def _child(parent: int, name: str) -> Iterator[int]:
    fd = os.open(name, _DIR, dir_fd=parent)
    try:
        yield fd
    finally:
        os.close(fd)


def copy(source: Path, destination: Path) -> None:
    """Copy file or directory ``source`` to ``destination`` (which must not exist for a
    directory); symlinks are copied as links, FIFOs and devices skipped, nothing followed."""
    with open_dir(source.parent) as src, open_dir(destination.parent, create=True) as dst:
        st = _lstat(src, source.name)
        if st is None:
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", str(source))
        if stat.S_ISDIR(st.st_mode):
            os.mkdir(destination.name, stat.S_IMODE(st.st_mode) | 0o700, dir_fd=dst)
            with _child(src, source.name) as s, _child(dst, destination.name) as d:
                _copy_tree(s, d)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(source.name, dir_fd=src), destination.name, dir_fd=dst)
        else:
            _copy_file(src, source.name, dst, destination.name)
