"""Questions to the person at the terminal during ``shelly run``: permissions, ``ask_user`` and
approvals of gated tool calls.

One :class:`TerminalPrompt` serves all three, so they behave alike: the live view pauses while the
question is on screen, one question is on screen at a time (concurrent agents queue), and the
answer is one line read from stdin through the event loop rather than a thread, so a question
that times out (``options.question_timeout``) or is cancelled leaves no reader behind to swallow
the answer to the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Sequence

from rich.console import Console

from shelly_dist.cli.live import LiveView
from shelly_dist.tools.builtin.ask import Question, Request
from shelly_dist.tools.decisions import Approval, Verdict
from shelly_dist.tools.permissions import InteractiveApprover

TERMINAL = "terminal"
"""Who decided, when it was the person at ``shelly run``'s terminal (``approval_decided``'s ``by``)."""

ASK_AGAIN = 3
"""Times an approval is asked again for an answer that is neither yes nor no, before it is rejected."""


async def read_line(fd: int) -> str:
    """One line from ``fd`` (a terminal), without blocking the loop; "" at end of input."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()
    buf = bytearray()

    def readable() -> None:
        chunk = os.read(fd, 4096)
        buf.extend(chunk)
        if (not chunk or b"\n" in buf or b"\r" in buf) and not done.done():
            done.set_result(bytes(buf).decode(errors="replace").splitlines()[0] if buf.strip() else "")

    loop.add_reader(fd, readable)
    try:
        return await done
    finally:
        loop.remove_reader(fd)


class TerminalPrompt:
    """Writes a question on ``console`` and returns the line typed; ``views`` are paused."""

    def __init__(self, console: Console, views: list[LiveView], fd: int | None = None) -> None:
        self.console = console
        self.views = views
        self.fd = sys.stdin.fileno() if fd is None else fd
        self._lock = asyncio.Lock()

    async def __call__(self, text: str) -> str:
        async with self._lock:
            with self.views[-1].paused() if self.views else contextlib.nullcontext():
                self.console.print(text, markup=False, highlight=False, soft_wrap=True, end="")
                return (await read_line(self.fd)).strip()

    def approver(self) -> InteractiveApprover:
        """Permission questions as Shelly asks them: ``<question> [yes/no]``."""

        async def ask(question: str, options: Sequence[str]) -> str:
            return await self(f"{question} [{'/'.join(options)}] ")

        return InteractiveApprover(ask)


def render(question: Question) -> str:
    """``ask_user`` on the terminal: header, text, numbered options, then the answer prompt."""
    lines = [f"[{question.header}] {question.text}" if question.header else question.text]
    lines += [f"  {i}) {option}" for i, option in enumerate(question.options, 1)]
    if question.options:
        pick = "numbers separated by commas" if question.multi_select else "a number"
        lines.append(f"answer ({pick}, or your own words): ")
    else:
        lines.append("answer: ")
    return "\n".join(lines)


def choose(question: Question, typed: str) -> str:
    """The answer for ``typed``: option numbers become the options' texts (joined with ", " for
    several, as Shelly's TUI does); anything else is the user's own answer, verbatim."""
    picks = [p.strip() for p in typed.split(",")] if question.multi_select else [typed.strip()]
    if question.options and picks and all(p.isdigit() and 1 <= int(p) <= len(question.options) for p in picks):
        chosen = [question.options[int(p) - 1] for p in picks]
        if not question.max_selections or len(chosen) <= question.max_selections:
            return ", ".join(chosen)
    return typed


def render_approval(approval: Approval) -> str:
    """An approval on the terminal, as Shelly asks a permission: who wants to run what, then the
    choices (``always``: for the rest of the session)."""
    return f"{approval.prompt()}\nApprove? [yes/no/always, or no <reason>] "


async def ask_approval(prompt: TerminalPrompt, approval: Approval) -> Verdict:
    """The verdict typed at the terminal on ``approval`` (asked again for anything but yes or no)."""
    for _ in range(ASK_AGAIN):
        typed = await prompt(render_approval(approval))
        try:
            return Verdict.parse(typed, by=TERMINAL)
        except ValueError:
            continue
    return Verdict.reject(f"no answer among yes, no or always (typed {typed!r})", by=TERMINAL)


class TerminalAnswerer:
    """The :class:`~shelly_dist.tools.builtin.ask.Answerer` of ``shelly run`` on a terminal."""

    def __init__(self, prompt: TerminalPrompt) -> None:
        self.prompt = prompt

    async def answer(self, question: Request) -> str:
        if isinstance(question, Approval):
            return (await ask_approval(self.prompt, question)).to_text()
        return choose(question, await self.prompt(render(question)))
