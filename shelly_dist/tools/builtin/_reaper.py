"""The launcher every tool program runs under: ``python -I -S _reaper.py PARENT PATH ARGV0 ARGS...``.

A process group does not hold a program's tree: ``sh -c 'setsid sleep 1000 &'`` puts the sleep
in a session of its own, out of reach of the group kill, and alive after the call. This launcher
makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux 3.4+), so every
process the program leaves behind, whatever session it moved to, is re-parented to the launcher
instead of to init. It runs the program, and when the program exits, or the launcher is sent
SIGTERM, SIGINT or SIGHUP (the caller's deadline), it SIGKILLs its children again and again,
reaping each, until none is left: each killed child's own children come back to it as orphans.
Then it exits with the program's status (or dies by the signal that ended the program or the
launcher itself), so the caller sees what it would have seen without it. Should its parent (the
worker, pid PARENT) die first, even by SIGKILL, the kernel sends the launcher SIGTERM
(``PR_SET_PDEATHSIG``) and the tree goes with it.

It imports only the standard library and starts in ~30 ms. Where ``prctl`` is missing (not
Linux) it still runs the program and kills what it can see as its children; the caller's group
kill remains the fallback.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
ROUNDS = 1000
"""Kill rounds before giving up on a tree that keeps forking (each round kills every child)."""


def _become_subreaper() -> None:
    """Orphans of the tree come to us; our parent's death is our SIGTERM."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the caller's group kill is what remains
        pass


def _children() -> list[int]:
    """This process's children, from ``/proc`` (``children`` files, else every ``stat``)."""
    me = os.getpid()
    try:
        tasks = os.listdir(f"/proc/{me}/task")
        return [int(pid) for tid in tasks for pid in open(f"/proc/{me}/task/{tid}/children").read().split()]
    except OSError:
        pass
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        try:
            with open(f"/proc/{entry}/stat") as f:
                if entry.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


def kill_tree() -> None:
    """SIGKILL and reap every child until none is left (orphans keep coming back to us)."""
    for _ in range(ROUNDS):
        children = _children()
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _end(status: int) -> None:
    """Exit as the program did: its exit code, or death by its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _on_signal(signum: int, frame: object) -> None:
    kill_tree()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def main(argv: list[str]) -> None:
    parent, path, program_argv = int(argv[1]), argv[2], argv[3:]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    _become_subreaper()
    if os.getppid() != parent:  # the parent died before PR_SET_PDEATHSIG was set: run nothing
        os._exit(128 + signal.SIGTERM)
    pid = os.fork()
    if pid == 0:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execv(path, program_argv)
        except OSError as exc:
            os.write(2, f"cannot start {program_argv[0]}: {exc.strerror}\n".encode())
            os._exit(127 if exc.errno == errno.ENOENT else 126)
    _, status = os.waitpid(pid, 0)
    kill_tree()
    _end(status)


if __name__ == "__main__":
    main(sys.argv)
