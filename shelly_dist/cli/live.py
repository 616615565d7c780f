"""The live view of a run on stderr: which agents are working, at what depth, doing what.

It is fed only by the engine's event bus, so it shows the same thing whether children run as
asyncio tasks or on remote workers. On a terminal it is a rich ``Live`` table (name, depth,
status, last action, tokens) redrawn a few times a second; elsewhere (a pipe, CI, a test) it
prints one plain line per notable event, so logs stay readable. A team's posts, wakes and acks
are lines in both: under the table, the latest :data:`TEAM_LINES` of them. Reading the bus never slows the
run: the bus drops events for a slow reader instead of blocking.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from shelly_dist import events
from shelly_dist.engine import EventBus
from shelly_dist.events import Event

ACTION_LIMIT = 60

BATCH_KINDS = (events.BATCH_SUBMITTED, events.BATCH_POLLING, events.BATCH_COMPLETED, events.BATCH_FALLBACK)

TEAM_LINES = 8
"""The team's latest posts, wakes and acks the live table shows under its rows."""

WARNING_LINES = 4
"""The latest warnings (a reply cut at the output limit, a context overflow) shown under the rows."""


@dataclass
class AgentRow:
    name: str
    depth: int = 0
    status: str = "running"
    action: str = ""
    tokens: int = 0
    worker: str = ""
    writing: str = ""
    """The text of the reply being streamed (``message_delta``), until it is whole."""
    cost: float = 0.0
    """What the run's model calls cost (USD), from the usage its events carry."""
    speed: float = 0.0
    """The last reply's generation speed, tokens per second (the server's own figure when it gives one)."""
    top: bool = False
    """The send's own top-level agent (``agent_start`` seen): its ``run_started``/``run_finished``
    repeat what ``agent_start`` and ``agent_end``/``error`` print, so they print nothing more."""


def _on(worker: str) -> str:
    """`` on <worker>`` for a run on the pool; nothing for one in this process."""
    return f" on {worker}" if worker else ""


def _tokens(usage: object) -> int:
    """Input plus output tokens of a ``usage`` field (0 when absent)."""
    if not isinstance(usage, dict):
        return 0
    return int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)


def _tail(text: str, limit: int = ACTION_LIMIT) -> str:
    """The end of ``text`` on one line: what a reply being written says last."""
    text = " ".join(text.split())
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def _usd(usage: object) -> float:
    """The ``cost_usd`` of a ``usage`` field (0 when absent)."""
    return float(usage.get("cost_usd") or 0.0) if isinstance(usage, dict) else 0.0


def _cost(row: AgentRow) -> str:
    """``1234 tokens``, with the generation speed when a server said it: ``1234 tokens, 42 tok/s``."""
    return f"{row.tokens} tokens" + (f", {row.speed:g} tok/s" if row.speed else "")


def _short(text: str, limit: int = ACTION_LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


DECISION_KINDS = frozenset({events.ASK_USER, events.APPROVAL_REQUESTED})
SHOWN_WAIT = 2.0
"""Seconds a decision's hint waits for the live view to have shown the decision (see ``LiveView.shown``)."""


class Board:
    """What the view knows: one row per agent instance, in order of appearance."""

    def __init__(self) -> None:
        self.rows: dict[str, AgentRow] = {}
        self.team: deque[str] = deque(maxlen=TEAM_LINES)
        """The latest team lines (posts, wakes, acks), which the rows alone would not show."""
        self.warnings: deque[str] = deque(maxlen=WARNING_LINES)
        """The latest warnings, which a row's last action would soon hide."""

    def row(self, name: str) -> AgentRow:
        if name not in self.rows:
            self.rows[name] = AgentRow(name)
        return self.rows[name]

    def apply(self, event: Event) -> str | None:
        """Update the rows from ``event``; return a plain line worth printing, or ``None``.

        The kinds and their fields are docs/events.md's, the same from both runtimes."""
        row, data = self.row(event.agent), event.data
        pad = "  " * row.depth
        if event.kind == events.AGENT_START:
            row.depth, row.status, row.action, row.top = int(data.get("depth") or 0), "running", "started", True
            return f"{'  ' * row.depth}▶ {row.name} started (depth {row.depth})"
        if event.kind == events.MESSAGE_DELTA:  # a reply being written: its latest words
            row.writing = ("" if data.get("begin") else row.writing) + str(data.get("text") or "")
            row.action = "✎ " + _tail(row.writing)
            return None
        if event.kind == events.MESSAGE_ADDED and data.get("role") == "assistant":
            row.writing = ""
            row.tokens += _tokens(data.get("usage"))
            row.cost += _usd(data.get("usage"))
            speed = data.get("speed") if isinstance(data.get("speed"), dict) else {}
            row.speed = float((speed or {}).get("tokens_per_second") or row.speed)
            tools = data.get("tool_calls") or []
            row.action = f"calls {', '.join(tools)}" if tools else _short(str(data.get("text") or ""))
            return None
        if event.kind == events.TOOL_CALL_START:
            row.action = f"→ {data.get('tool')}"
            return f"{pad}  {row.name} → {data.get('tool')}"
        if event.kind == events.TOOL_CALL_END and data.get("is_error"):
            row.action = f"✗ {data.get('tool')}"
            return None
        if event.kind == events.AGENT_END:
            row.status, row.action = "done", "finished"
            row.tokens = max(row.tokens, _tokens(data.get("usage")))
            failed = [r for r in self.rows.values() if r.depth > row.depth and r.status == "failed"]
            if failed:  # the answer came, but not from every child: say so, not a plain success
                names = ", ".join(f"{r.name} ({r.action})" for r in failed)
                return (f"{pad}! {row.name} finished ({_cost(row)}); "
                        f"{len(failed)} child{'ren' if len(failed) > 1 else ''} failed: {names}")
            return f"{pad}✔ {row.name} finished ({_cost(row)})"
        if row.top and event.kind in (events.RUN_STARTED, events.RUN_FINISHED) and not data.get("parent"):
            row.worker = str(data.get("worker") or row.worker)
            return None
        if event.kind in (events.RUN_STARTED, events.RUN_RESUMED):
            row.worker = str(data.get("worker") or row.worker)
            if "depth" in data:
                row.depth = int(data.get("depth") or 0)
            row.status = "running"
            verb = "started" if event.kind == events.RUN_STARTED else "resumed"
            row.action = f"{verb}{_on(row.worker)}"
            return f"{'  ' * row.depth}▶ {row.name} {verb}{_on(row.worker)} (depth {row.depth})"
        if event.kind == events.RUN_WAITING:
            if not data.get("model"):  # a suspended model call said what it waits for (model_waiting)
                row.status, row.action = "waiting", f"waiting on {data.get('waiting_on', '?')} children"
            return None
        if event.kind == events.MODEL_WAITING:
            row.status, row.action = "waiting", f"waiting for {data.get('reason') or data.get('wait')}"
            due = data.get("due_at")
            left = f" ({max(0.0, float(due) - time.time()):.0f}s)" if isinstance(due, (int, float)) else ""
            return f"{pad}⏸ {row.name} {row.action}{left}"
        if event.kind == events.RUN_FINISHED:
            return self._finished(row, data)
        if event.kind in BATCH_KINDS:
            return self._batch(row, event.kind, data, pad)
        if event.kind == events.RUN_SPAWNED:
            row.action = f"spawned {data.get('child_agent')}"
            return f"{pad}  {row.name} ⇢ spawned {data.get('child_agent')} ({data.get('child_run')})"
        if event.kind == events.SPAWN_ANNOUNCED:
            row.action = f"heard {data.get('child_agent')} ({data.get('state')})"
            return f"{pad}  {row.name} ⇠ heard {data.get('child_agent')}: {data.get('state')}"
        line = self._people(row, event, pad)
        if line is not None:
            return line
        if event.kind == events.ERROR:
            row.status, row.action = "failed", _short(str(data.get("error") or ""))
            return f"{pad}✗ {row.name} failed: {data.get('error')}"
        if event.kind == events.PROVIDER_RETRY:
            why = str(data.get("error_kind") or "error")
            if data.get("status_code"):
                why += f" (HTTP {data['status_code']})"
            row.action = f"↻ {why}, retry {data.get('attempt')}/{data.get('max_retries')}"
            return (f"{pad}↻ {row.name}: provider {data.get('provider')} {why}, "
                    f"retry {data.get('attempt')}/{data.get('max_retries')} in {float(data.get('delay') or 0):.1f}s")
        if event.kind == events.WARNING:
            message = " ".join(str(data.get("message") or data.get("code") or "").split())
            row.action = _short(f"⚠ {message}")
            line = f"{pad}⚠ {row.name}: {message}"
            self.warnings.append(line)
            return line
        line = self._team(row, event)
        if line is not None:
            self.team.append(line)
        return line

    @staticmethod
    def _people(row: AgentRow, event: Event, pad: str) -> str | None:
        """People in the loop (docs/events.md): an approval asked and decided, a steering message."""
        data = event.data
        if event.kind == events.APPROVAL_REQUESTED:
            row.status, row.action = "waiting", f"awaits approval {data.get('id')} of {data.get('tool')}"
            path = " → ".join(str(p) for p in data.get("path") or [row.name])
            args = json.dumps(data.get("arguments"), ensure_ascii=False)
            return f"{pad}? {path} asks to run {data.get('tool')} {_short(args)} (approval {data.get('id')})"
        if event.kind == events.APPROVAL_DECIDED:
            verb = {"approve": "approved", "reject": "rejected", "skip": "skipped"}.get(str(data.get("decision")), "?")
            by = f" by {data['by']}" if data.get("by") else ""
            why = f": {data['reason']}" if data.get("reason") and verb != "approved" else ""
            row.action = f"{data.get('tool')} {verb}"
            return f"{pad}  {row.name}: {data.get('tool')} {verb}{by}{why}"
        if event.kind == events.STEERED:
            row.action = "steered"
            by = f" ({data['by']})" if data.get("by") else ""
            stop = " [interrupt]" if data.get("interrupt") else ""
            return f"{pad}» {row.name} heard{by}{stop}: {_short(str(data.get('text') or ''))}"
        return None

    @staticmethod
    def _batch(row: AgentRow, kind: str, data: dict[str, object], pad: str) -> str | None:
        """A run's model call in a provider batch: what it waits for, and when it falls back."""
        vendor = data.get("vendor") or data.get("provider")
        if kind == events.BATCH_SUBMITTED:
            row.status, row.action = "waiting", f"joining a {vendor} batch"
            return None
        if kind == events.BATCH_POLLING:
            row.status = "waiting"
            row.action = f"waiting for {vendor} batch {data.get('batch_id')} ({data.get('count')} requests)"
            return f"{pad}  {row.name} {row.action}"
        if kind == events.BATCH_COMPLETED:
            row.status, row.action = "running", f"{vendor} batch {data.get('batch_id')} ended"
            return None
        row.status, row.action = "running", f"calling directly ({data.get('reason')})"
        return f"{pad}  {row.name}: {vendor} batch fallback ({data.get('reason')}), calling directly"

    @staticmethod
    def _team(row: AgentRow, event: Event) -> str | None:
        """A team's posts, wakes and acks (docs/workflows.md): one line each."""
        data = event.data
        if event.kind == events.CHANNEL_POST:
            row.action = f"posted #{data.get('id')}"
            to = f" → @{data['to']}" if data.get("to") else ""
            return f"  #{data.get('id')} @{row.name}{to}: {_short(str(data.get('content') or ''))}"
        if event.kind == events.WAKE_STARTED:
            row.status, row.action = "running", f"woken for {data.get('messages')} message(s)"
            retry = f" (attempt {data.get('attempt')})" if int(data.get("attempt") or 1) > 1 else ""
            return f"⏰ {row.name} woken for {data.get('messages')} message(s){retry}"
        if event.kind == events.WAKE_FINISHED:
            outcome = str(data.get("outcome"))
            row.status = {"done": "idle", "retrying": "retrying"}.get(outcome, "failed")
            row.action = f"wake {outcome}"
            if outcome == "done":
                return f"✔ {row.name} wake done"
            return f"✗ {row.name} wake {outcome}: {data.get('error')}"
        if event.kind == events.WAKES_PAUSED:
            row.status, row.action = "paused", "wakes paused"
            return f"⏸ {data.get('message')}"
        if event.kind == events.INBOX_ACK:
            row.action = f"acked up to #{data.get('cursor')}"
            return f"✓ {row.name} acked up to #{data.get('cursor')}"
        return None

    @staticmethod
    def _finished(row: AgentRow, data: dict[str, object]) -> str:
        """A run's end: its status, where, why when it did not succeed, and what it cost."""
        row.status = {"done": "done", "canceled": "canceled"}.get(str(data.get("status")), "failed")
        row.worker = str(data.get("worker") or row.worker)
        row.tokens = max(row.tokens, _tokens(data.get("usage")))
        row.cost = max(row.cost, _usd(data.get("usage")))
        entry = data.get("entry") if isinstance(data.get("entry"), dict) else {}
        assert isinstance(entry, dict)
        pad, cost = "  " * row.depth, f"({_cost(row)})"
        if entry.get("handoff"):
            row.action = f"handed off to {entry['handoff']}"
            return f"{pad}↪ {row.name} handed off to {entry['handoff']}{_on(row.worker)} {cost}"
        completion = entry.get("completion") if isinstance(entry.get("completion"), dict) else {}
        reason = str(entry.get("error") or (completion or {}).get("summary") or "")  # or: out of a budget
        row.action = _short(reason or str(entry.get("result") or row.status))
        if row.status == "done":
            return f"{pad}✔ {row.name} done{_on(row.worker)} {cost}"
        return f"{pad}✗ {row.name} {row.status}{_on(row.worker)}: {reason or 'no reason given'} {cost}"

    def table(self) -> Table:
        table = Table(box=None, pad_edge=False, header_style="bold")
        speeds = any(r.speed for r in self.rows.values())  # a column only once a server said its speed
        columns = ("agent", "depth", "worker", "status", "last action", "tokens") + (("tok/s",) if speeds else ())
        for column in columns:
            table.add_column(column, justify="right" if column in ("depth", "tokens", "tok/s") else "left")
        style = {"running": "yellow", "waiting": "cyan", "done": "green", "failed": "red", "canceled": "magenta",
                 "retrying": "yellow"}
        for r in self.rows.values():  # Text, not markup: a team's status (idle) or an action may hold anything
            status = Text(r.status, style=style.get(r.status, ""))
            cells = [Text("  " * r.depth + r.name), str(r.depth), Text(r.worker or "-"), status, Text(r.action),
                     str(r.tokens)]
            table.add_row(*cells, *([f"{r.speed:g}" if r.speed else "-"] if speeds else []))
        return table

    def render(self) -> RenderableType:
        """What the live view draws: the rows, then the latest warnings and team lines when there
        are any."""
        parts: list[RenderableType] = [self.table()]
        if self.warnings:
            parts += [Text("warnings", style="bold"), *(Text(line) for line in self.warnings)]
        if self.team:
            parts += [Text("team", style="bold"), *(Text(line) for line in self.team)]
        return parts[0] if len(parts) == 1 else Group(*parts)


class LiveView:
    """``async with LiveView(bus, console):`` renders the bus's events until the block ends.

    ``mode`` is ``"live"`` (rich table), ``"plain"`` (lines) or ``"quiet"`` (nothing);
    ``"auto"`` picks live on a terminal and plain otherwise.
    """

    def __init__(self, bus: EventBus, console: Console, mode: str = "auto", subscription: Any = None) -> None:
        """``subscription``: a subscription of ``bus`` taken earlier, so the view also shows what
        was published before it opened (a workflow's kickoff post, made before its session's id is
        printed); closed with the view."""
        self._early = subscription
        if mode == "auto":
            mode = "live" if console.is_terminal else "plain"
        self.mode = mode
        self.bus = bus
        self.console = console
        self.board = Board()
        self._task: asyncio.Task[None] | None = None
        self._live: Live | None = None
        self._decisions: set[int] = set()
        """The decision events (questions, approvals) applied so far, by identity: another
        subscriber of the same bus prints how to answer one only after this view showed what led
        to it (:meth:`shown`)."""
        self._applied = asyncio.Condition()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Stop redrawing while a question is asked on the terminal, then carry on."""
        live = self._live
        if live is not None:
            live.stop()
        try:
            yield
        finally:
            if live is not None:
                live.start()

    async def __aenter__(self) -> LiveView:
        if self.mode == "quiet":
            if self._early is not None:
                self._early.close()
            return self
        sub = self._early if self._early is not None else self.bus.subscribe(buffer=4096)
        if self.mode == "live":
            self._live = Live(self.board.render(), console=self.console, refresh_per_second=8, transient=False)
            self._live.start()
        self._task = asyncio.create_task(self._consume(sub))
        self._sub = sub
        return self

    async def _consume(self, sub: object) -> None:
        async for event in sub:  # type: ignore[attr-defined]
            line = self.board.apply(event)
            if self._live is not None:
                self._live.update(self.board.render())
            elif line is not None:
                self.console.print(line, markup=False, highlight=False, soft_wrap=True)  # one line per event
            if event.kind in DECISION_KINDS:
                async with self._applied:
                    self._decisions.add(id(event))
                    self._applied.notify_all()

    async def shown(self, event: Event) -> None:
        """Return once this view has shown ``event`` (a decision published on its bus) and every
        event before it — at most :data:`SHOWN_WAIT` seconds: the hint printed after it (how to
        answer) then follows the asking run's lines instead of racing them (issue 38)."""
        if self._task is None or self._task.done():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SHOWN_WAIT), self._applied:
                await self._applied.wait_for(lambda: id(event) in self._decisions)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is None:
            return
        self._sub.close()  # iteration ends after the buffered events
        with contextlib.suppress(asyncio.CancelledError):
            if exc_type is None:
                await self._task
            else:
                self._task.cancel()
                await self._task
        if self._live is not None:
            self._live.update(self.board.render())
            self._live.stop()
