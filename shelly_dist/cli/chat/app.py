"""The chat: a conversation with the entry agent (Shelly's TUI), as a Textual app.

The app holds one engine and one session. What it shows comes from the engine's event bus, which
carries the session's events from both runtimes (on the pool the coordinator replays the
session's Redis stream into it, so children on other machines appear): the top-level agent's
reply streams into the conversation as Markdown while it is written, the sub-agent panel is the
live view's board, ``ask_user`` questions and approvals of gated tool calls (of any run of the
tree) and permission prompts are answered in place, with the next line typed. A send runs as an
asyncio task: Escape cancels it, and with it the whole tree (on the pool the coordinator cancels
the tree in Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Input, Markdown, OptionList, Static
from textual.widgets.option_list import Option

from shelly_dist import events
from shelly_dist.chats import Message, Role
from shelly_dist.chats import Text as TextPart
from shelly_dist.chats.attachments import attachment, describe
from shelly_dist.chats.parts import Part
from shelly_dist.cli.chat.commands import help_text, parse
from shelly_dist.cli.chat.history import InputHistory
from shelly_dist.cli.chat.panels import SubAgentPanel, TaskPanel
from shelly_dist.cli.live import Board
from shelly_dist.cli.prompt import choose, render
from shelly_dist.engine import Engine, Session
from shelly_dist.errors import ShellyError
from shelly_dist.events import Event
from shelly_dist.models import streaming
from shelly_dist.tools.builtin.ask import Question
from shelly_dist.tools.permissions import InteractiveApprover

Opener = Callable[[InteractiveApprover], Awaitable[Engine]]
"""Opens the chat's engine with the app's approver (permission prompts answered in place)."""

STREAM_REFRESH = 0.05
"""Seconds between two redraws of a reply being written."""

APPROVE = frozenset({"y", "yes", "approve"})
REJECT = frozenset({"n", "no", "reject"})
ARGUMENTS_SHOWN = 300
"""Characters of a gated call's arguments shown in the chat (the model wrote them: a long or
hostile text is cut, and said to be)."""


@dataclass
class Pending:
    """A question on screen waiting for the next line typed: ``answer`` takes it."""

    text: str
    answer: Callable[[str], Awaitable[None]]


class Note(Static):
    """A line of the conversation that is not a reply: the user's message, a command, an error."""

    DEFAULT_CSS = """
    Note { margin: 1 0 0 0; }
    Note.user { color: $text; background: $boost; padding: 0 1; }
    Note.dim { color: $text-muted; }
    Note.error { color: $error; }
    Note.question { color: $warning; border-left: thick $warning; padding: 0 1; }
    """


class ChatApp(App[int]):
    """``shelly``'s chat. ``opener`` opens the engine (in the app's loop); ``agent`` and
    ``session_id`` pick the conversation (default: the entry agent, a new session)."""

    TITLE = "shelly"
    CSS = """
    #conversation { height: 1fr; padding: 0 1; }
    #side { height: auto; }
    #status { height: 1; color: $text-muted; padding: 0 1; }
    #picker { height: auto; max-height: 12; border: round $accent; }
    Markdown { margin: 1 0 0 0; }
    """
    BINDINGS = [
        Binding("escape", "escape", "Cancel", show=False),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("up", "history(-1)", show=False),
        Binding("down", "history(1)", show=False),
    ]

    def __init__(self, opener: Opener, *, agent: str | None = None, session_id: str | None = None) -> None:
        super().__init__()
        self.opener = opener
        self.agent_name = agent
        self.session_id = session_id
        self.engine: Engine | None = None
        self.session: Session | None = None
        self.board = Board()
        self.error: BaseException | None = None
        """What stopped the chat from opening (a config error): ``shelly`` prints it after."""
        self.history = InputHistory(None)
        self.pending: deque[Pending] = deque()
        self.attached: list[Part] = []
        self.sending: asyncio.Task[None] | None = None
        self._feed: Any = None
        self._live: Markdown | None = None
        self._live_text = ""
        self._redraw: Any = None
        self._tasks_timer: Any = None

    # -- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="conversation")
        with Vertical(id="side"):
            yield SubAgentPanel(self.board)
            yield TaskPanel()
        yield Static(id="status")
        yield Input(placeholder="Ask anything — /help for commands", id="prompt")

    async def on_mount(self) -> None:
        self.query_one(SubAgentPanel).display = False
        self.query_one(TaskPanel).display = False
        try:
            self.engine = await self.opener(InteractiveApprover(self._ask_permission))
            self.history = InputHistory(self.engine.shelly_dir.history)
            if self.session_id:
                self.session = await self.engine.resume_session(self.session_id)
            else:
                self.session = self.engine.session(agent=self.agent_name)
        except (ShellyError, OSError) as exc:
            self.error = exc
            self.exit(return_code=2)
            return
        self._feed = self.engine.bus.subscribe(buffer=100_000)
        self.run_worker(self._consume(), exclusive=False, group="feed")
        if self.session_id:
            await self._show_history()
        self._status()
        self.query_one(Input).focus()

    async def on_unmount(self) -> None:
        if self.sending is not None and not self.sending.done():
            self.sending.cancel()
            with contextlib.suppress(BaseException):
                await self.sending
        if self._feed is not None:
            self._feed.close()
        if self.engine is not None:
            await self.engine.aclose()

    # -- the conversation ---------------------------------------------------------------------

    async def say(self, text: str, kind: str = "dim") -> None:
        """A line in the conversation (``user``, ``dim``, ``error`` or ``question``)."""
        await self._conversation().mount(Note(Text(text), classes=kind))
        self._conversation().scroll_end(animate=False)

    async def reply(self, markdown: str) -> Markdown:
        widget = Markdown(markdown)
        await self._conversation().mount(widget)
        self._conversation().scroll_end(animate=False)
        return widget

    def _conversation(self) -> VerticalScroll:
        return self.query_one("#conversation", VerticalScroll)

    def _status(self, state: str | None = None) -> None:
        if self.session is None or self.engine is None:
            return
        state = state or ("working… (Esc cancels)" if self.busy else "ready")
        attached = f" · {len(self.attached)} attached" if self.attached else ""
        self.query_one("#status", Static).update(
            f"{self.session.agent.name} · session {self.session.id} · {self.engine.runtime.name} · {state}{attached}")

    @property
    def busy(self) -> bool:
        return self.sending is not None and not self.sending.done()

    async def _show_history(self) -> None:
        """A resumed session's exchanges: what the user said, and the replies (not tool calls)."""
        assert self.session is not None
        for m in self.session.agent.chat.messages():
            if m.role == Role.USER and m.sender == "user" and m.text_content():
                await self.say(m.text_content(), "user")
            elif m.role == Role.ASSISTANT and not m.tool_calls() and m.text_content():
                await self.reply(m.text_content())
        await self.say(f"⌘ resumed session {self.session.id}")

    # -- input --------------------------------------------------------------------------------

    async def on_input_submitted(self, submitted: Input.Submitted) -> None:
        text = submitted.value.strip()
        submitted.input.value = ""
        if not text or self.session is None:
            return
        self.history.add(text)
        if self.pending:  # the line answers the question on screen
            question = self.pending.popleft()
            await self.say(f"↳ {text}", "dim")
            await question.answer(text)
            self._placeholder()
            return
        command = parse(text)
        if command is not None:
            await self.run_command(*command)
            return
        if self.busy:
            await self.say("a reply is still being written: wait, or press Escape to cancel it", "error")
            return
        await self.send(text)

    def action_history(self, step: int) -> None:
        prompt = self.query_one(Input)
        entry = self.history.up(prompt.value) if step < 0 else self.history.down()
        if entry is not None:
            prompt.value = entry
            prompt.cursor_position = len(entry)

    async def action_escape(self) -> None:
        picker = self.query("#picker")
        if picker:
            await picker.remove()
            return
        if self.busy:
            assert self.sending is not None
            self.sending.cancel()

    def _placeholder(self) -> None:
        self.query_one(Input).placeholder = ("Answer the question above" if self.pending
                                             else "Ask anything — /help for commands")

    # -- sending ------------------------------------------------------------------------------

    async def send(self, text: str) -> None:
        """Send ``text`` (with the files attached so far) as the user's next message."""
        assert self.session is not None
        parts: list[Part] = [TextPart(text=text), *self.attached]
        self.attached = []
        await self.say(text, "user")
        self.sending = asyncio.create_task(self._send(self.session, Message(sender="user", role=Role.USER,
                                                                            parts=parts)))
        self.sending.add_done_callback(lambda _: self._status())  # "ready" once the task is done
        self._status()

    async def _send(self, session: Session, message: Message) -> None:
        try:
            with streaming.watching():  # a person reads the replies as they are written
                await session.send_messages([message])  # each reply is shown by its message_added event
        except asyncio.CancelledError:
            self._end_live()
            await self.say("⌘ canceled", "error")
        except Exception as exc:  # the run's error ends the send, not the chat
            self._end_live()
            await self.say(f"error: {exc}", "error")
        finally:
            if self.query_one(SubAgentPanel).display:
                self.query_one(SubAgentPanel).refresh_rows()

    # -- the session's events -----------------------------------------------------------------

    async def _consume(self) -> None:
        async for event in self._feed:
            if self.session is None or (event.session_id and event.session_id != self.session.id):
                continue
            self.board.apply(event)
            if self.query_one(SubAgentPanel).display:
                self.query_one(SubAgentPanel).refresh_rows()
            await self._show(event)

    async def _show(self, event: Event) -> None:
        assert self.session is not None
        top = event.agent == self.session.agent.name
        if event.kind == events.MESSAGE_DELTA and top:
            await self._stream(str(event.data.get("text") or ""), begin=bool(event.data.get("begin")))
        elif event.kind == events.MESSAGE_ADDED and top and event.data.get("role") == "assistant":
            await self._replied_with(str(event.data.get("text") or ""), event.data.get("tool_calls") or [])
        elif event.kind == events.ASK_USER:
            await self._question(Question.model_validate(event.data), event.agent)
        elif event.kind == events.APPROVAL_REQUESTED and event.data.get("id"):
            await self._approval(event.data, event.agent)

    async def _stream(self, text: str, *, begin: bool) -> None:
        if self._live is None:
            self._live, self._live_text = await self.reply(""), ""
        if begin:
            self._live_text = ""
        self._live_text += text
        if self._redraw is None:
            self._redraw = self.set_timer(STREAM_REFRESH, self._redraw_live)

    def _redraw_live(self) -> None:
        self._redraw = None
        if self._live is not None:
            self._live.update(self._live_text)
            self._conversation().scroll_end(animate=False)

    def _end_live(self) -> None:
        if self._redraw is not None:
            self._redraw.stop()
            self._redraw = None
        self._live = None

    async def _replied_with(self, text: str, tools: Sequence[str]) -> None:
        """The top-level agent's whole reply of one model call: it replaces what was streamed."""
        live = self._live
        self._end_live()
        if text:
            if live is not None:
                await live.update(text)
            else:
                await self.reply(text)
        elif live is not None:
            await live.remove()
        if tools:
            await self.say(f"⚙ {', '.join(tools)}")

    # -- questions ----------------------------------------------------------------------------

    async def _question(self, question: Question, asker: str) -> None:
        """An ``ask_user`` question of any run of the session, answered through ``Session.respond``
        (embedded and on the pool alike)."""
        session = self.session
        assert session is not None

        async def answer(typed: str) -> None:
            try:
                await session.respond(question.id, choose(question, typed))
            except ShellyError as exc:
                await self.say(f"error: {exc}", "error")

        self.pending.append(Pending(question.text, answer))
        await self.say(f"{asker} asks:\n{render(question)}", "question")
        self._placeholder()

    async def _approval(self, data: dict[str, Any], asker: str) -> None:
        """A gated tool call of any run of the session, decided in place through
        ``Session.approve``/``reject`` (the decisions ``shelly decisions`` and the console answer,
        embedded and on the pool alike): ``y`` runs it; anything else rejects it, the words after
        ``n`` (or the whole line) being the reason the model is given."""
        session = self.session
        assert session is not None
        decision = str(data["id"])

        async def answer(typed: str) -> None:
            verdict, _, rest = typed.strip().partition(" ")
            try:
                if verdict.lower() in APPROVE:
                    await session.approve(decision, by="chat")
                    await self.say(f"approved {decision}", "dim")
                else:
                    reason = rest.strip() if verdict.lower() in REJECT else typed.strip()
                    await session.reject(decision, reason=reason, by="chat")
                    await self.say(f"rejected {decision}" + (f": {reason}" if reason else ""), "dim")
            except ShellyError as exc:
                await self.say(f"error: {exc}", "error")

        who = " → ".join(str(p) for p in data.get("path") or []) or asker
        arguments = json.dumps(data.get("arguments"), ensure_ascii=False)
        if len(arguments) > ARGUMENTS_SHOWN:
            arguments = arguments[:ARGUMENTS_SHOWN] + f"… ({len(arguments):,} characters)"
        self.pending.append(Pending(f"approve {decision}?", answer))
        await self.say(f"{who} wants to run {data.get('tool')} {arguments}\n"
                       "y: approve · n REASON: reject (the model is told the reason)", "question")
        self._placeholder()

    async def _ask_permission(self, question: str, options: Sequence[str]) -> str:
        """A built-in tool's permission prompt, in place: the next line typed is the answer."""
        answered: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def answer(typed: str) -> None:
            if not answered.done():
                answered.set_result(typed)

        self.pending.append(Pending(question, answer))
        await self.say(f"{question} [{'/'.join(options)}]", "question")
        self._placeholder()
        return await answered

    # -- slash commands -----------------------------------------------------------------------

    async def run_command(self, name: str, argument: str) -> None:
        handler = {
            "/quit": self._quit, "/exit": self._quit, "/help": self._help, "/clear": self._clear,
            "/compact": self._compact, "/sessions": self._sessions, "/settings": self._settings,
            "/subagents": self._toggle_subagents, "/tasks": self._toggle_tasks, "/attach": self._attach,
        }[name]
        await handler(argument)

    async def _quit(self, _: str) -> None:
        self.exit(return_code=0)

    async def _help(self, _: str) -> None:
        await self.say("⌘ /help")
        await self.reply(help_text())

    async def _clear(self, _: str) -> None:
        if self.sending is not None and not self.sending.done():
            self.sending.cancel()
            with contextlib.suppress(BaseException):
                await self.sending
        assert self.engine is not None and self.session is not None
        self.session = self.engine.session(agent=self.session.info.agent)
        self.board.rows.clear()
        self.pending.clear()
        self.attached = []
        await self._conversation().remove_children()
        await self.say(f"⌘ /clear: new session {self.session.id}")
        self._status()

    async def _compact(self, _: str) -> None:
        assert self.session is not None
        if self.busy:
            await self.say("cannot compact while the agent is running", "error")
            return
        await self.say("⌘ /compact")
        self._status("compacting…")
        try:
            summary = await self.session.compact()
        except Exception as exc:
            await self.say(f"error: {exc}", "error")
        else:
            await self.reply(summary)
            await self.say(f"⌘ compacted: the conversation is now its summary ({len(summary):,} characters)")
        self._status()

    async def _sessions(self, _: str) -> None:
        assert self.engine is not None
        saved = await self.engine.sessions.list()
        if not saved:
            await self.say("no previous sessions found")
            return
        options = [Option(f"{s.updated_at:%Y-%m-%d %H:%M}  {s.agent}  {s.msg_count} msgs  {s.preview}", id=s.id)
                   for s in saved[:50]]
        picker = OptionList(*options, id="picker")
        await self.mount(picker, before=self.query_one("#status"))
        picker.focus()

    async def on_option_list_option_selected(self, selected: OptionList.OptionSelected) -> None:
        await selected.option_list.remove()
        self.query_one(Input).focus()
        if selected.option.id:
            await self.resume(selected.option.id)

    async def resume(self, session_id: str) -> None:
        """Continue saved session ``session_id`` (``/sessions``)."""
        assert self.engine is not None
        if self.busy:
            await self.say("a reply is still being written: wait, or press Escape to cancel it", "error")
            return
        try:
            session = await self.engine.resume_session(session_id)
        except ShellyError as exc:
            await self.say(f"error resuming session: {exc}", "error")
            return
        self.session, self.session_id = session, session_id
        self.board.rows.clear()
        await self._conversation().remove_children()
        await self._show_history()
        self._status()

    async def _settings(self, _: str) -> None:
        assert self.engine is not None
        cfg = self.engine.config
        lines = [f"**config** `{self.engine.shelly_dir.config}` · runtime **{self.engine.runtime.name}**", ""]
        lines += [f"- provider `{p.name}`: {p.kind} `{p.model}`" + ("" if p.stream else " (stream: false)")
                  for p in cfg.providers]
        lines += [f"- agent `{a.name}`" + (" (entry)" if a.name == self.engine.agent_name() else "")
                  for a in cfg.agents]
        lines += ["", "Edit it with `shelly config` (a wizard that validates what it writes)."]
        await self.say("⌘ /settings")
        await self.reply("\n".join(lines))

    async def _toggle_subagents(self, _: str) -> None:
        panel = self.query_one(SubAgentPanel)
        panel.display = not panel.display
        if panel.display:
            panel.refresh_rows()

    async def _toggle_tasks(self, _: str) -> None:
        panel = self.query_one(TaskPanel)
        panel.display = not panel.display
        if panel.display:
            await self._refresh_tasks()
            self._tasks_timer = self.set_interval(1.0, self._refresh_tasks)
        elif self._tasks_timer is not None:
            self._tasks_timer.stop()

    async def _refresh_tasks(self) -> None:
        assert self.engine is not None and self.session is not None
        try:
            tasks = await self.engine.stores.board(self.session.id).list_tasks()
        except ShellyError as exc:
            await self.say(f"tasks: {exc}", "error")
            return
        self.query_one(TaskPanel).show(list(tasks))

    async def _attach(self, argument: str) -> None:
        if not argument:
            await self.say("usage: /attach PATH", "error")
            return
        try:
            part = await asyncio.to_thread(lambda: attachment(Path(argument).expanduser()))
        except ShellyError as exc:
            await self.say(str(exc), "error")
            return
        self.attached.append(part)
        await self.say(f"📎 {describe(part)}: sent with your next message")
        self._status()
