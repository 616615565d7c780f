"""The one mapping from exceptions to the ``shelly`` exit codes (DESIGN.md §4).

0 success; 1 the run failed (a model, tool, agent or store error — the message, never a
traceback); 2 bad usage or an invalid config (the message names the field); 130 interrupted
(Ctrl-C: ``interrupted``), or a run canceled from elsewhere (``run …: canceled (by `shelly
cancel`…``). Every command runs its coroutine through :func:`run_async`, so no command decides
an exit code on its own. First-hour failures from below (a missing module, Redis refusing the
connection or the password, an unreachable broker, a read-only or missing directory) become one
line naming the cause and the fix (:mod:`shelly_dist.cli.explain`): exit 2 for what the user
must set up or configure, 1 for a service that could not be reached. Never a traceback on
stderr; ``-v`` logs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Coroutine
from typing import Any, NoReturn, TypeVar

import click

from shelly_dist.cli.explain import EXIT_FAILED, EXIT_USAGE, explain
from shelly_dist.errors import ConfigError, RunCancelled, UsageError

EXIT_OK = 0
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, the code a shell reports for a process SIGTERM ended

__all__ = [
    "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_TERMINATED", "EXIT_USAGE", "Terminated", "describe",
    "exit_code", "fail", "run_async",
]

T = TypeVar("T")
log = logging.getLogger(__name__)


class Terminated(Exception):
    """The command was stopped by SIGTERM after its coroutine was cancelled (exit 143)."""

    def __init__(self) -> None:
        super().__init__("terminated")


def exit_code(exc: BaseException) -> int:
    """The exit code for ``exc``."""
    if isinstance(exc, Terminated):
        return EXIT_TERMINATED
    if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError | RunCancelled):
        return EXIT_INTERRUPTED
    if isinstance(exc, ConfigError | UsageError | click.UsageError):
        return EXIT_USAGE
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else EXIT_FAILED
    return EXIT_FAILED


def describe(exc: BaseException) -> tuple[int, str]:
    """The exit code and the one-line message for ``exc``."""
    code = exit_code(exc)
    if isinstance(exc, RunCancelled):  # someone canceled the run (`shelly cancel`, the console): not Ctrl-C
        return code, f"{exc} (by `shelly cancel`, the console or the API)"
    if code == EXIT_INTERRUPTED:
        return code, "interrupted"
    if code == EXIT_TERMINATED:
        return code, "terminated"
    if not isinstance(exc, ConfigError | UsageError | click.UsageError):
        explained = explain(exc)
        if explained is not None:
            return explained
    return code, str(exc) or type(exc).__name__


def fail(exc: BaseException) -> NoReturn:
    """Print ``exc`` as ``shelly: <message>`` (one line) on stderr and exit with its code."""
    code, message = describe(exc)
    log.info("exiting with %d", code, exc_info=exc)
    click.echo(f"shelly: {message}", err=True)
    sys.exit(code)


async def _until_terminated(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro``; SIGTERM cancels it as Ctrl-C does (the run and its tree are canceled on the
    way out, through the same ``CancelledError`` path), then raises :class:`Terminated`.

    Without this, SIGTERM's default action ends the process on the spot: on the pool the tree kept
    running and spending, and the root stayed ``running`` for good. A second SIGTERM while the
    first is being handled ends the process at once.
    """
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    terminated: list[bool] = []

    def on_sigterm() -> None:
        if terminated:
            os._exit(EXIT_TERMINATED)
        terminated.append(True)
        main.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals
        return await coro
    try:
        result = await coro
    except (asyncio.CancelledError, RunCancelled) as exc:
        if terminated:
            raise Terminated() from exc
        raise
    finally:
        with contextlib.suppress(Exception):
            loop.remove_signal_handler(signal.SIGTERM)
    if terminated:  # the command caught the cancellation and ended on its own: still a SIGTERM exit
        raise Terminated()
    return result


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, with every failure turned into a message and an exit code; SIGTERM
    cancels ``coro`` and exits 143 (see :func:`_until_terminated`)."""
    try:
        return asyncio.run(_until_terminated(coro))
    except (click.exceptions.Exit, click.Abort):
        raise
    except BrokenPipeError:  # the reader went away (`shelly events | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(EXIT_OK)
    except BaseException as exc:  # the boundary that maps everything
        if isinstance(exc, SystemExit):
            raise
        fail(exc)
