"""``python -m bench --profile DIR``: a sampling profiler in pure Python, for every bench process.

py-spy cannot attach on every machine (in a sandbox without ptrace it finds no Python in the
target), and cProfile sees only the thread that started it, while a worker runs its event loop and
Celery's consumer in threads of their own. So a daemon thread samples ``sys._current_frames()``
every :data:`INTERVAL` seconds and counts each thread's stack; at exit the counts are written as
collapsed stacks (``outer;…;inner COUNT`` a line, the input of flamegraph.pl and speedscope).

Samples are wall-clock: a thread blocked in a wait is sampled too. Stacks whose innermost frame
is a known wait (:data:`WAITS`: selectors, locks, queues, sleeps, socket reads) are counted
apart as idle, so the file holds where the threads were busy. A worker runs under it as::

    python -m bench.sampler OUT.collapsed -m shelly_dist.cli.main worker …
"""

from __future__ import annotations

import atexit
import runpy
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType

INTERVAL = 0.005
WAITS = frozenset({
    ("selectors.py", "select"), ("threading.py", "wait"), ("threading.py", "_wait_for_tstate_lock"),
    ("queue.py", "get"), ("socket.py", "readinto"), ("ssl.py", "read"), ("subprocess.py", "_wait"),
    ("connection.py", "_read_from_socket"), ("connection.py", "read_response"), ("threading.py", "acquire"),
    ("thread.py", "_worker"), ("eventio.py", "poll"), ("hiredis.py", "read_from_socket"),
})
"""(file name, function) of innermost frames that mean the thread is waiting, not working."""


def _stack(frame: FrameType | None) -> tuple[str, tuple[str, str]]:
    names: list[str] = []
    leaf = ("", "")
    while frame is not None:
        code = frame.f_code
        file = code.co_filename.rsplit("/", 1)[-1]
        if not names:
            leaf = (file, code.co_name)
        names.append(f"{file}:{code.co_name}")
        frame = frame.f_back
    return ";".join(reversed(names)), leaf


class Sampler:
    """Counts the stacks of every other thread until the process exits, then writes them."""

    def __init__(self, out: Path, interval: float = INTERVAL) -> None:
        self.out, self.interval = out, interval
        self.busy: Counter[str] = Counter()
        self.idle = 0
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()
        atexit.register(self.write)

    def _run(self) -> None:
        me = threading.get_ident()
        while True:
            time.sleep(self.interval)
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                stack, leaf = _stack(frame)
                if leaf in WAITS:
                    self.idle += 1
                else:
                    self.busy[stack] += 1

    def write(self) -> None:
        busy = dict(self.busy)  # a snapshot: the sampling thread may still be adding
        lines = [f"{stack} {n}" for stack, n in sorted(busy.items(), key=lambda kv: -kv[1])]
        self.out.write_text("\n".join(lines) + "\n")


def top(path: Path, n: int = 8) -> str:
    """The ``n`` innermost frames with the most busy samples in a collapsed-stacks file."""
    leaves: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            leaves[stack.rsplit(";", 1)[-1]] += int(count)
    total = leaves.total() or 1
    return "\n".join(f"  {100 * c / total:5.1f} %  {leaf}" for leaf, c in leaves.most_common(n))


def main() -> None:
    """``python -m bench.sampler OUT -m MODULE ARGS…``: run MODULE as ``__main__`` under the sampler."""
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        raise SystemExit("usage: python -m bench.sampler OUT -m MODULE [ARGS…]")
    out, module = Path(sys.argv[1]), sys.argv[3]
    Sampler(out).start()
    sys.argv = [module, *sys.argv[4:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
