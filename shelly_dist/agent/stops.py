"""Why a delegated child is stopped before its end, and the board watch that stops it.

Two things stop a child other than the tree's cancel, and both must mean the same embedded and
on the pool (DESIGN §3 rule 12):

* ``delegate_fail_fast``: the first failed sibling stops the others; each stopped sibling's entry
  says ``canceled: sibling failed`` (:data:`SIBLING_FAILED`). The parent's option travels on each
  :class:`~shelly_dist.agent.records.ChildRequest` (``fail_fast``), so whichever process runs a
  child knows it without the parent's agent.
* the child's task canceled on the task board: the child stops and its entry says
  ``task canceled``. :class:`BoardCancelScope` is that watch, used by the in-process delegator
  around a child and by a worker around each stretch of a run it advances.
* its interactive delegation closed: the child neither asked nor ended within its parent's
  ``question_timeout``, or its parent's run ended while it waited for an answer. Its own entry
  says ``context canceled`` (:data:`DELEGATION_CLOSED`) and its task moves to ``failed``, not
  ``canceled``: in Shelly the cancel comes through the delegation's own context, which the
  "task canceled" branch of ``runChildWithHandoff`` excludes (``ctx.Err() == nil``), so the
  child lands in the generic error branch.

How the stop reaches the child (an asyncio cancel in-process, a flag in Redis plus a wake-up on
the pool) is the runtime's business; the decision and the texts are here.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

from shelly_dist.agent.board import TaskBoardHook
from shelly_dist.agent.records import ChildRequest, DelegateEntry
from shelly_dist.errors import RunCancelled

SIBLING_FAILED = "canceled: sibling failed"
TASK_CANCELED = "task canceled"
DELEGATION_CLOSED = "context canceled"
"""The entry error of an interactive child stopped by its delegation (Go's ``context.Canceled``)."""


class SiblingFailed(RunCancelled):
    """A child stopped because a sibling of the same ``delegate`` call failed (fail-fast)."""

    def __init__(self, message: str = SIBLING_FAILED, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]


class DelegationClosed(RunCancelled):
    """An interactive child stopped by its delegation: past ``question_timeout``, or its parent's
    run ended while it waited for an answer."""

    def __init__(self, message: str = DELEGATION_CLOSED, **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]


def stops_siblings(request: ChildRequest | None, entry: DelegateEntry) -> bool:
    """Whether this child's outcome must stop its siblings: it failed and the parent is fail-fast.
    A child that was itself stopped never stops others (its siblings' fate is already decided)."""
    return bool(request is not None and request.fail_fast and entry.error and entry.error != SIBLING_FAILED)


class BoardCancelScope:
    """``async with BoardCancelScope(board, task_id):`` — the block is cancelled when the task is
    canceled on the board, and leaves with ``RunCancelled("task canceled")`` instead.

    Like :func:`asyncio.timeout`: the watch cancels the task that entered the scope (the in-flight
    model call or tool is aborted), and the scope turns that cancellation into the error, so
    cancellation from outside still propagates as ``CancelledError``. With no board or no task id
    the scope does nothing. A task already canceled when the scope is entered stops it at once.
    """

    def __init__(self, board: TaskBoardHook | None, task_id: str | None) -> None:
        self._board = board if task_id else None
        self._task_id = task_id or ""
        self._owner: asyncio.Task[object] | None = None
        self._watch: asyncio.Task[None] | None = None
        self.fired = False

    async def __aenter__(self) -> BoardCancelScope:
        if self._board is not None:
            self._owner = asyncio.current_task()
            self._watch = asyncio.create_task(self._watch_board(self._board))
        return self

    async def _watch_board(self, board: TaskBoardHook) -> None:
        await board.wait_canceled(self._task_id)
        self.fired = True
        if self._owner is not None:
            self._owner.cancel()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._watch is not None and not self._watch.done():
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch
        if self.fired and self._owner is not None:
            if self._owner.uncancel() == 0 and kind is asyncio.CancelledError:
                raise RunCancelled(TASK_CANCELED) from exc
