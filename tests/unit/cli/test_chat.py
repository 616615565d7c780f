"""The chat (``shelly`` on a terminal), driven through Textual's pilot against the demo team and
small scripted teams: what a person types, what the conversation and the panels then show."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from textual.widgets import Input, Markdown, OptionList

from shelly_dist.chats import Image
from shelly_dist.cli.chat.app import ChatApp
from shelly_dist.cli.chat.panels import SubAgentPanel, TaskPanel
from shelly_dist.engine import Engine, bootstrap
from shelly_dist.testing.model_server import ModelServer, Reply

DEADLINE = 60.0


def demo(tmp_path: Path) -> Path:
    shelly_dir = tmp_path / ".shelly"
    bootstrap(shelly_dir, template="demo")
    return shelly_dir


def team(tmp_path: Path, scripts: dict[str, list[Any]], agents: list[dict[str, Any]]) -> Path:
    shelly_dir = tmp_path / ".shelly"
    shelly_dir.mkdir()
    config = {"providers": [{"name": "s", "kind": "scripted", "model": "m", "script": scripts}], "agents": agents}
    (shelly_dir / "config.yaml").write_text(yaml.safe_dump(config))
    return shelly_dir


def chat(shelly_dir: Path, **kwargs: Any) -> ChatApp:
    async def opener(approver: Any) -> Engine:
        return await Engine.open(None, shelly_dir=shelly_dir, approver=approver)

    return ChatApp(opener, **kwargs)


async def until(pilot: Any, condition: Callable[[], Any], what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + DEADLINE
    while not (value := condition()):
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.05)
    return value


async def type_line(pilot: Any, text: str) -> None:
    pilot.app.query_one(Input).value = text
    await pilot.press("enter")


def said(app: ChatApp) -> str:
    """Everything the conversation shows, as text."""
    out = []
    for widget in app.query("#conversation > *"):
        out.append(widget.source if isinstance(widget, Markdown) else str(widget.render()))
    return "\n".join(out)


async def test_a_question_to_the_demo_team_is_answered_and_subagents_lists_both_workers(tmp_path: Path) -> None:
    app = chat(demo(tmp_path))
    async with app.run_test(size=(140, 50)) as pilot:
        await until(pilot, lambda: app.session is not None, "the engine")
        await type_line(pilot, "Why is the sky blue?")
        await until(pilot, lambda: "Here is what the team put together" in said(app) and not app.busy, "the answer")
        await type_line(pilot, "/subagents")
        panel = app.query_one(SubAgentPanel)
        assert panel.display
        rows = {name.split("-")[0]: row for name, row in app.board.rows.items()}
        assert {"researcher", "writer"} <= set(rows) and rows["writer"].status == "done"
        await type_line(pilot, "/quit")
    assert app.return_code == 0


async def test_help_lists_the_slash_commands(tmp_path: Path) -> None:
    app = chat(demo(tmp_path))
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.session is not None, "the engine")
        await type_line(pilot, "/help")
        text = await until(pilot, lambda: said(app) if "/sessions" in said(app) else "", "the help")
    for command in ("/quit", "/exit", "/clear", "/compact", "/sessions", "/settings", "/subagents", "/tasks"):
        assert command in text


async def test_escape_cancels_the_send_in_flight(tmp_path: Path) -> None:
    app = chat(team(tmp_path, {"a": [{"text": "never", "delay": 300}]}, [{"name": "a", "provider": "s"}]))
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.session is not None, "the engine")
        await type_line(pilot, "hello")
        await until(pilot, lambda: app.busy, "the send to start")
        await pilot.press("escape")
        await until(pilot, lambda: not app.busy and "canceled" in said(app), "the cancel")


async def test_an_ask_user_question_is_answered_in_place(tmp_path: Path) -> None:
    ask = {"tool_calls": [{"name": "ask_user", "arguments": {"question": "Which file?",
                                                             "options": ["parser.py", "lexer.py"]}}]}
    app = chat(team(tmp_path, {"a": [ask, "fixing {result}"]}, [{"name": "a", "provider": "s"}]))
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.session is not None, "the engine")
        await type_line(pilot, "fix the bug")
        await until(pilot, lambda: app.pending and "Which file?" in said(app), "the question")
        await type_line(pilot, "2")
        await until(pilot, lambda: "fixing lexer.py" in said(app), "the answer to reach the agent")


async def test_input_history_is_kept_in_the_state_directory_and_walked_with_up(tmp_path: Path) -> None:
    shelly_dir = team(tmp_path, {"a": ["one", "two"]}, [{"name": "a", "provider": "s"}])
    app = chat(shelly_dir)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.session is not None, "the engine")
        await type_line(pilot, "first question")
        await until(pilot, lambda: "one" in said(app) and not app.busy, "the reply")
    assert (shelly_dir / "local" / "history").read_bytes() == b"first question"
    again = chat(shelly_dir)
    async with again.run_test() as pilot:
        await until(pilot, lambda: again.session is not None, "the engine")
        await pilot.press("up")
        assert again.query_one(Input).value == "first question"


async def test_sessions_continues_an_earlier_session(tmp_path: Path) -> None:
    app = chat(team(tmp_path, {"a": ["the first answer", "the second answer"]}, [{"name": "a", "provider": "s"}]))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.session is not None, "the engine")
        await type_line(pilot, "remember this")
        await until(pilot, lambda: "the first answer" in said(app) and not app.busy, "the reply")
        first = app.session.id
        await type_line(pilot, "/clear")
        await until(pilot, lambda: app.session.id != first and "the first answer" not in said(app), "a new session")
        await type_line(pilot, "/sessions")
        picker = await until(pilot, lambda: app.query(OptionList), "the picker")
        picker.first().highlighted = 0
        await pilot.press("enter")
        await until(pilot, lambda: app.session.id == first and "the first answer" in said(app), "the resumed one")
        assert "remember this" in said(app)


async def test_attach_sends_the_image_with_the_next_message(tmp_path: Path) -> None:
    png = tmp_path / "picture.png"
    png.write_bytes(base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="))
    app = chat(team(tmp_path, {"a": ["a red dot"]}, [{"name": "a", "provider": "s"}]))
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.session is not None, "the engine")
        await type_line(pilot, f"/attach {png}")
        await until(pilot, lambda: "image (image/png" in said(app), "the attachment note")
        await type_line(pilot, "what is this?")
        await until(pilot, lambda: "a red dot" in said(app), "the reply")
        sent = [m for m in app.session.agent.chat.messages() if m.sender == "user"][-1]
    assert [p.kind for p in sent.parts] == ["text", "image"]
    assert isinstance(sent.parts[1], Image) and sent.parts[1].media_type == "image/png"


async def test_a_config_that_cannot_be_opened_ends_the_chat_with_its_error(tmp_path: Path) -> None:
    shelly_dir = tmp_path / ".shelly"
    shelly_dir.mkdir()
    (shelly_dir / "config.yaml").write_text("providers: []\nagents: []\n")
    app = chat(shelly_dir)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.error is not None, "the error")
    assert app.return_code == 2 and app.error is not None and "config" in str(app.error)


@pytest.mark.parametrize("line", ["/tasks"])
async def test_the_task_panel_shows_the_sessions_board(tmp_path: Path, line: str) -> None:
    create = {"tool_calls": [{"name": "shared_tasks_create", "arguments": {"title": "write the docs"}}]}
    app = chat(team(tmp_path, {"a": [create, "made a task"]}, [{"name": "a", "provider": "s", "toolboxes": ["tasks"]}]))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.session is not None, "the engine")
        await type_line(pilot, "plan it")
        await until(pilot, lambda: "made a task" in said(app), "the reply")
        await type_line(pilot, line)
        panel = app.query_one(TaskPanel)
        await until(pilot, lambda: [t.title for t in panel.tasks] == ["write the docs"], "the task on the panel")


async def test_the_reply_streams_into_the_conversation_while_it_is_written(tmp_path: Path) -> None:
    gate = threading.Event()
    text = "Blue light scatters the most, so the sky looks blue."
    with ModelServer(format="openai", default=Reply(text=text, stream_gate=gate)) as server:
        shelly_dir = tmp_path / ".shelly"
        shelly_dir.mkdir()
        (shelly_dir / "config.yaml").write_text(yaml.safe_dump({
            "providers": [{"name": "v", "kind": "openai", "model": "m", "base_url": server.url, "api_key": "k"}],
            "agents": [{"name": "a", "provider": "v"}]}))
        app = chat(shelly_dir)
        try:
            async with app.run_test() as pilot:
                await until(pilot, lambda: app.session is not None, "the engine")
                await type_line(pilot, "why?")
                live = await until(pilot, lambda: [m for m in app.query(Markdown) if m.source], "streamed text")
                assert live[-1].source == "Blue " and app.busy  # the model is still writing the rest
                gate.set()
                await until(pilot, lambda: not app.busy, "the reply's end")
                assert [m.source for m in app.query(Markdown)] == [text]  # streamed into one block, whole once
        finally:
            gate.set()


SET_ENV = {"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "env", "value": "prod"}}]}


def gated(tmp_path: Path) -> Path:
    return team(tmp_path, {"keeper": [SET_ENV, "set said: {result}"]},
                [{"name": "keeper", "provider": "s", "toolboxes": ["state"],
                  "approval": {"tools": ["shared_state_set"]}}])


async def test_an_approval_is_approved_in_place_and_the_gated_call_runs_once(tmp_path: Path) -> None:
    app = chat(gated(tmp_path))
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: app.session is not None, "the engine")
        await type_line(pilot, "set the env")
        await until(pilot, lambda: app.pending and 'wants to run shared_state_set {"key": "env"' in said(app),
                    "the approval")
        await type_line(pilot, "y")
        await until(pilot, lambda: "set said:" in said(app) and not app.busy, "the reply")
        assert app.session is not None
        store = app.session.engine.stores.store(app.session.id)
        assert (await store.get("env")).value == "prod"  # type: ignore[union-attr]
        assert "rejected" not in said(app).split("set said:", 1)[1]


async def test_an_approval_rejected_in_place_never_runs_and_the_model_gets_the_reason(tmp_path: Path) -> None:
    app = chat(gated(tmp_path))
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: app.session is not None, "the engine")
        await type_line(pilot, "set the env")
        await until(pilot, lambda: app.pending and "wants to run shared_state_set" in said(app), "the approval")
        await type_line(pilot, "n not on a Friday")
        await until(pilot, lambda: "set said:" in said(app) and not app.busy, "the reply")
        assert app.session is not None
        assert await app.session.engine.stores.store(app.session.id).get("env") is None
        assert "not on a Friday" in said(app).split("set said:", 1)[1]


async def test_the_chat_opens_its_engine_for_its_agent_so_a_pool_starts_only_its_mcp_servers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from shelly_dist.cli.chat.command import engine_opener

    opened: list[dict[str, Any]] = []

    async def fake_open(config: Any, **kwargs: Any) -> Any:
        opened.append(kwargs)
        return None

    monkeypatch.setattr(Engine, "open", fake_open)
    await engine_opener(None, ".shelly", "helper")(None)  # type: ignore[arg-type]
    await engine_opener(None, ".shelly", None)(None)  # type: ignore[arg-type]
    assert [o["root"] for o in opened] == ["helper", True]
