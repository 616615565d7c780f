"""The composition root: registry from config, toolboxes by name, sessions, events, persistence."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from shelly_dist import events
from shelly_dist.chats import Message, Role
from shelly_dist.engine import Config, Engine, config_from_data
from shelly_dist.engine.agents import delegation_depth
from shelly_dist.errors import ConfigError, ModelError, UsageError
from shelly_dist.events import Event
from shelly_dist.tools.builtin.ask import NoAnswerer


def make_config(script: dict[str, list[Any]] | None = None, **agents: dict[str, Any]) -> Config:
    agent_list = [{"name": n, **spec} for n, spec in agents.items()] or [{"name": "solo"}]
    return config_from_data(
        {
            "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": script or {"*": ["hello back"]}}],
            "agents": agent_list,
        },
        {},
    )


async def open_engine(cfg: Config, tmp_path: Path) -> Engine:
    return await Engine.open(cfg, shelly_dir=tmp_path / ".shelly")


async def drain(sub: Any) -> list[Event]:
    out = []
    while True:
        try:
            out.append(await asyncio.wait_for(sub.get(), 0.05))
        except TimeoutError:
            return out


async def test_registry_has_every_configured_agent_with_its_entry_fields(tmp_path: Path) -> None:
    cfg = make_config(
        lead={"description": "leads"},
        coder={"description": "codes", "estimated_cost": "cheap", "max_concurrency": 2, "skills_tags": ["py"]},
    )
    async with await open_engine(cfg, tmp_path) as engine:
        entries = {e.name: e for e in engine.registry("s1").list()}
    assert set(entries) == {"lead", "coder"}
    assert (entries["coder"].estimated_cost, entries["coder"].max_concurrency) == ("cheap", 2)
    assert entries["coder"].skills == ["py"]
    assert entries["lead"].description == "leads"


async def test_registry_is_cached_per_session(tmp_path: Path) -> None:
    async with await open_engine(make_config(), tmp_path) as engine:
        assert engine.registry("a") is engine.registry("a")
        assert engine.registry("a") is not engine.registry("b")


async def test_each_spawn_builds_a_fresh_agent_with_its_own_completer(tmp_path: Path) -> None:
    async with await open_engine(make_config(), tmp_path) as engine:
        one, two = engine.registry("s").spawn("solo"), engine.registry("s").spawn("solo")
    assert one is not two and one.completer is not two.completer and one.chat is not two.chat


async def test_state_toolbox_is_shared_within_a_session_and_not_across(tmp_path: Path) -> None:
    cfg = make_config(a={"toolboxes": ["state"]}, b={"toolboxes": ["state"]})
    async with await open_engine(cfg, tmp_path) as engine:
        await engine.stores.store("s1").set("k", 1)
        assert await engine.stores.store("s1").get("k") is not None
        assert await engine.stores.store("s2").get("k") is None
        tools = [t.name for box in engine.registry("s1").spawn("b").toolboxes for t in box]
    assert "shared_state_get" in tools and "shared_state_watch" in tools


async def test_the_team_toolbox_posts_as_the_agent_it_was_built_for(tmp_path: Path) -> None:
    cfg = make_config(a={"toolboxes": ["team"]}, b={"toolboxes": ["team"]})
    async with await open_engine(cfg, tmp_path) as engine:
        workspace = engine.stores.workspace("s1")
        await workspace.join(["a", "b"])
        box = next(box for box in engine.registry("s1").spawn("b").toolboxes if box.name == "team")
        send = box.get("channel_send")
        assert send is not None
        await send.handler(json.dumps({"message": "@a hi"}))
        assert [e.message.sender for e in await workspace.inbox("a")] == ["b"]


async def test_the_team_toolbox_served_from_outside_posts_as_user(tmp_path: Path) -> None:
    """What ``shelly mcp serve --toolbox team --session S`` serves."""
    async with await open_engine(make_config(a={"toolboxes": ["team"]}), tmp_path) as engine:
        workspace = engine.stores.workspace("s1")
        await workspace.join(["a"])
        send = engine.toolboxes.named("team", "s1").get("channel_send")
        assert send is not None
        await send.handler(json.dumps({"message": "@a from outside"}))
        assert [e.message.sender for e in await workspace.inbox("a")] == ["user"]


async def test_stores_exist_only_when_an_agent_references_them(tmp_path: Path) -> None:
    async with await open_engine(make_config(), tmp_path) as engine:
        await engine.session().send("hi")
        assert not engine.stores.has(engine.session().id)
        assert engine.registry("x").spawn("solo").options.task_board is None


async def test_tasks_toolbox_gives_every_agent_the_board_hook(tmp_path: Path) -> None:
    cfg = make_config(lead={"toolboxes": ["tasks"]}, worker={})
    async with await open_engine(cfg, tmp_path) as engine:
        worker = engine.registry("s").spawn("worker")
        lead = engine.registry("s").spawn("lead")
    assert worker.options.task_board is not None
    assert "shared_tasks_claim" in [t.name for box in lead.toolboxes for t in box]


async def test_toolbox_ref_with_tools_keeps_only_those_tools(tmp_path: Path) -> None:
    cfg = make_config(a={"toolboxes": [{"name": "notes", "tools": ["write_note"]}, "state"]})
    async with await open_engine(cfg, tmp_path) as engine:
        boxes = engine.registry("s").spawn("a").toolboxes
    assert [b.names() for b in boxes][1] == ["write_note"]


async def test_every_agent_gets_ask_user_first_whether_it_lists_ask_or_not(tmp_path: Path) -> None:
    async with await open_engine(make_config(a={"toolboxes": ["ask", "notes"]}, b={}), tmp_path) as engine:
        a, b = engine.registry("s").spawn("a"), engine.registry("s").spawn("b")
    assert [box.names() for box in a.toolboxes][:2] == [["ask_user"], ["write_note", "read_note", "list_notes"]]
    assert [box.names() for box in b.toolboxes] == [["ask_user"]]


ASK = {"tool_calls": [{"name": "ask_user", "arguments": {"question": "Which colour?", "options": ["red", "blue"]}}]}
ASKS = {"*": [ASK, "done"]}


def ask_result(session: Any) -> tuple[str, bool]:
    part = next(p for m in session.agent.chat.messages() for p in m.parts if p.kind == "tool_result")
    return part.content, part.is_error


async def test_ask_user_with_no_answerer_in_the_process_is_an_error_result_saying_how_to_get_one(
        tmp_path: Path) -> None:
    async with await Engine.open(make_config(script=ASKS, a={}), shelly_dir=tmp_path / ".shelly",
                                 answerer=NoAnswerer()) as engine:
        sub = engine.bus.subscribe()
        session = engine.session()
        assert (await session.send("go")).reply.text_content() == "done"
        asked = [e for e in await drain(sub) if e.kind == events.ASK_USER]
    content, is_error = ask_result(session)
    assert is_error and content.startswith("ask_user: nobody can answer")
    assert "shelly run" in content and "answerer" in content
    assert [(e.agent, e.session_id, e.data) for e in asked] == [
        ("a", session.id, {"id": "q-1", "text": "Which colour?", "options": ["red", "blue"]})]


async def test_without_an_answerer_the_question_waits_for_session_respond_embedded(tmp_path: Path) -> None:
    async with await open_engine(make_config(script={"*": [ASK, "chose {result}"]}, a={}), tmp_path) as engine:
        session = engine.session()
        sending = asyncio.create_task(session.send("go"))
        while not (listed := await session.questions()):
            assert not sending.done(), "the run ended without waiting for an answer"
            await asyncio.sleep(0.01)  # polling the open questions: the condition (the test's timeout bounds it)
        with pytest.raises(UsageError, match="answer: no open question q-9 in session"):
            await session.respond("q-9", "red")
        await session.respond(listed[0]["id"], "blue")
        assert (await sending).reply.text_content() == "chose blue"
        assert await session.questions() == []
    assert [(q["id"], q["agent"], q["text"], q["options"]) for q in listed] == [
        ("q-1", "a", "Which colour?", ["red", "blue"])]


class Scripted:
    """An answerer that records the questions and answers from a list."""

    def __init__(self, *answers: str) -> None:
        self.answers, self.asked = list(answers), []

    async def answer(self, question: Any) -> str:
        self.asked.append(question)
        return self.answers.pop(0)


async def test_ask_user_returns_the_answerers_answer_with_q_n_ids(tmp_path: Path) -> None:
    script = {"*": [ASKS["*"][0], ASKS["*"][0], "done"]}
    answerer = Scripted("blue", "red")
    async with await Engine.open(make_config(script=script, a={}), shelly_dir=tmp_path / ".shelly",
                                 answerer=answerer) as engine:
        session = engine.session()
        await session.send("go")
    results = [p.content for m in session.agent.chat.messages() for p in m.parts if p.kind == "tool_result"]
    assert results == ["blue", "red"]
    assert [(q.id, q.text, q.options) for q in answerer.asked] == [
        ("q-1", "Which colour?", ["red", "blue"]), ("q-2", "Which colour?", ["red", "blue"])]


class Silent:
    async def answer(self, question: Any) -> str:
        await asyncio.Event().wait()
        return ""


async def test_question_timeout_ends_the_wait_with_an_error_result(tmp_path: Path) -> None:
    cfg = make_config(script=ASKS, a={"options": {"question_timeout": "50ms"}})
    async with await Engine.open(cfg, shelly_dir=tmp_path / ".shelly", answerer=Silent()) as engine:
        session = engine.session()
        assert (await session.send("go")).reply.text_content() == "done"
    content, is_error = ask_result(session)
    assert is_error and content == "ask_user: no answer to q-1 within 0.05s (options.question_timeout)"


async def test_an_empty_question_is_an_error_naming_the_field(tmp_path: Path) -> None:
    script = {"*": [{"tool_calls": [{"name": "ask_user", "arguments": {"question": ""}}]}, "done"]}
    async with await Engine.open(make_config(script=script, a={}), shelly_dir=tmp_path / ".shelly",
                                 answerer=Scripted("x")) as engine:
        session = engine.session()
        await session.send("go")
    assert ask_result(session) == ("ask_user: ask: question is required", True)


async def test_unknown_agent_is_a_usage_error(tmp_path: Path) -> None:
    async with await open_engine(make_config(), tmp_path) as engine:
        with pytest.raises(UsageError, match='unknown agent "ghost"'):
            engine.session(agent="ghost")


async def test_new_session_uses_entry_agent_else_first(tmp_path: Path) -> None:
    cfg = make_config(a={}, b={})
    async with await open_engine(cfg, tmp_path) as engine:
        assert engine.session().info.agent == "a"
    cfg = cfg.model_copy(update={"entry_agent": "b"})
    async with await open_engine(cfg, tmp_path) as engine:
        assert engine.session().info.agent == "b"


def test_entry_agent_of_a_team_may_delegate_one_level_by_default() -> None:
    cfg = make_config(lead={}, worker={}, deep={"options": {"max_delegation_depth": 3}})
    assert [delegation_depth(cfg, a) for a in cfg.agents] == [1, 0, 3]
    solo = make_config()
    assert delegation_depth(solo, solo.agents[0]) == 0


async def test_send_returns_the_reply_and_publishes_start_and_end_with_session_id(tmp_path: Path) -> None:
    async with await open_engine(make_config(), tmp_path) as engine:
        sub = engine.bus.subscribe()
        session = engine.session()
        outcome = await session.send("hello")
        got = await drain(sub)
    assert outcome.reply.text_content() == "hello back"
    kinds = [e.kind for e in got]
    assert kinds[0] == events.AGENT_START and kinds[-1] == events.AGENT_END
    assert {e.session_id for e in got} == {session.id}
    assert events.MESSAGE_ADDED in kinds


async def test_second_concurrent_send_is_rejected(tmp_path: Path) -> None:
    cfg = make_config({"*": [{"text": "slow", "delay": 30}]})
    async with await open_engine(cfg, tmp_path) as engine:
        session = engine.session()
        first = asyncio.create_task(session.send("one"))
        await asyncio.sleep(0)  # let the first send start (it marks itself active before any await)
        assert session.active
        with pytest.raises(UsageError, match="another send is already active"):
            await session.send("two")
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first


async def test_failed_send_publishes_error_and_is_not_saved(tmp_path: Path) -> None:
    cfg = make_config({"*": [{"error": "boom"}]})
    async with await open_engine(cfg, tmp_path) as engine:
        sub = engine.bus.subscribe()
        with pytest.raises(ModelError, match="boom"):
            await engine.session().send("hi")
        got = await drain(sub)
        assert await engine.sessions.list() == []
    assert got[-1].kind == events.ERROR and "boom" in got[-1].data["error"]


async def test_send_saves_the_session_with_agent_preview_and_provider(tmp_path: Path) -> None:
    async with await open_engine(make_config(), tmp_path) as engine:
        session = engine.session()
        await session.send("hello")
        (info,) = await engine.sessions.list()
    assert (info.id, info.agent, info.preview) == (session.id, "solo", "hello")
    assert (info.provider.kind, info.provider.model) == ("scripted", "m")
    assert (tmp_path / ".shelly" / "local" / "sessions" / session.id / "messages.json").is_file()


async def test_resume_session_restores_messages_and_keeps_the_persisted_record(tmp_path: Path) -> None:
    cfg = make_config({"*": ["first answer", "second answer"]})
    async with await open_engine(cfg, tmp_path) as engine:
        session = engine.session()
        await session.send("hello")
        created = session.info.created_at
    async with await open_engine(cfg, tmp_path) as engine:
        resumed = await engine.resume_session(session.id)
        assert resumed.id == session.id and resumed.name != "" and resumed.info.created_at == created
        assert len(resumed.agent.chat) >= 2
        outcome = await resumed.send("again")
        (info,) = await engine.sessions.list()
    assert outcome.reply.text_content() == "second answer"
    assert info.msg_count >= 5 and info.preview == "again"


async def test_blackboard_in_prompt_shows_the_session_blackboard(tmp_path: Path) -> None:
    cfg = make_config(a={"toolboxes": ["state"], "blackboard_in_prompt": True})
    async with await open_engine(cfg, tmp_path) as engine:
        session = engine.session()
        await engine.stores.store(session.id).set("plan", "ship it")
        await session.send("hi")
        system = session.agent.chat.at(0).text_content()
    assert "<blackboard>" in system and "ship it" in system


async def test_skills_are_loaded_from_the_shelly_dir_and_filtered_per_agent(tmp_path: Path) -> None:
    skills = tmp_path / ".shelly" / "skills"
    for name, desc in (("alpha", "an on-demand skill"), ("beta", "")):
        (skills / name).mkdir(parents=True)
        front = f"---\nname: {name}\ndescription: {desc}\n---\n" if desc else ""
        (skills / name / "SKILL.md").write_text(front + f"{name} body")
    cfg = make_config(a={"skills": ["alpha"]}, b={})
    async with await open_engine(cfg, tmp_path) as engine:
        a, b = engine.registry("s").spawn("a"), engine.registry("s").spawn("b")
    assert [s.name for s in a.options.skills] == ["alpha"]
    assert sorted(s.name for s in b.options.skills) == ["alpha", "beta"]
    assert "load_skill" in [t.name for box in a.toolboxes for t in box]


async def test_a_skill_with_no_folder_is_skipped_with_one_warning_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with await open_engine(make_config(a={"skills": ["nope"]}), tmp_path) as engine:
        agent = engine.registry("s1").spawn("a", depth=0)
        assert agent.options.skills == []
    err = capsys.readouterr().err
    assert err.count('skill "nope"') == 1 and "agents[0].skills[0]" in err


async def test_a_skill_with_no_folder_fails_start_up_under_strict_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r'agents\[0\]\.skills\[0\]: skill "nope"'):
        await Engine.open(make_config(a={"skills": ["nope"]}), shelly_dir=tmp_path / ".shelly",
                          env={"SHELLY_STRICT_CONFIG": "1"})


async def test_broker_url_selects_the_distributed_runtime(tmp_path: Path, redis_url: str, key_prefix: str) -> None:
    cfg = make_config().model_copy(deep=True)
    cfg.distributed.broker_url = redis_url
    cfg.distributed.key_prefix = key_prefix
    async with await open_engine(cfg, tmp_path) as engine:
        assert engine.runtime.name != "local"


async def test_no_broker_means_the_local_runtime(tmp_path: Path) -> None:
    async with await open_engine(make_config(), tmp_path) as engine:
        assert engine.runtime.name == "local"


async def test_redis_url_puts_the_session_blackboard_in_redis(tmp_path: Path, redis_url: str, key_prefix: str) -> None:
    cfg = make_config(a={"toolboxes": ["state"]}).model_copy(deep=True)
    cfg.distributed.redis_url = redis_url
    cfg.distributed.key_prefix = key_prefix
    async with await open_engine(cfg, tmp_path) as engine:
        assert engine.stores.shared
        await engine.stores.store("sess").set("k", {"v": 1})
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        assert client.exists(f"{key_prefix}s:{{sess}}:state")
    finally:
        client.close()


async def test_a_legacy_permissions_file_is_moved_into_local_and_its_grants_apply(tmp_path: Path) -> None:
    sd = tmp_path / ".shelly"
    sd.mkdir()
    granted = tmp_path / "granted"
    granted.mkdir()
    (granted / "f.txt").write_text("inside")
    (sd / "permissions.json").write_text(json.dumps([str(granted)]))  # Shelly's legacy flat array
    async with await Engine.open(make_config(a={"toolboxes": ["filesystem"]}), shelly_dir=sd) as engine:
        assert not (sd / "permissions.json").exists()
        assert json.loads((sd / "local" / "permissions.json").read_text()) == [str(granted)]
        agent = engine.registry("probe").spawn("a", depth=0)
        result = await next(t for box in agent.toolboxes for t in box if t.name == "fs_read").handler(
            json.dumps({"path": str(granted / "f.txt")}))
        assert result == "inside"


async def test_an_mcp_server_named_like_a_builtin_is_not_started_and_the_builtin_wins(tmp_path: Path) -> None:
    cfg = config_from_data({
        "providers": [{"name": "p", "kind": "scripted", "model": "m", "script": {"*": ["hi"]}}],
        "mcp_servers": [{"name": "search", "command": "no-such-mcp-server-binary", "url": ""}],
        "agents": [{"name": "a", "toolboxes": ["search"]}],
    }, {})
    async with await open_engine(cfg, tmp_path) as engine:
        agent = engine.registry("s").spawn("a", depth=0)
        assert {"search_content", "search_files"} <= {t.name for box in agent.toolboxes for t in box}


async def test_max_external_file_size_zero_reads_claude_md_as_go_does(tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_text("house rules: tabs")
    data = {"providers": [{"name": "p", "kind": "scripted", "model": "m"}], "agents": [{"name": "a"}],
            "context": {"max_external_file_size": 0}}
    async with await open_engine(config_from_data(data, {}), tmp_path) as engine:
        assert "house rules: tabs" in engine.context


async def test_opening_and_running_writes_nothing_into_the_shelly_dir(tmp_path: Path) -> None:
    shelly = tmp_path / ".shelly"
    shelly.mkdir()
    (shelly / "config.yaml").write_text("agents: []\n")
    before = sorted(p.relative_to(shelly) for p in shelly.rglob("*"))
    cfg = make_config()
    async with await Engine.open(cfg, shelly_dir=shelly, env={"SHELLY_STATE_DIR": str(tmp_path / "st")}) as engine:
        await engine.session().send("hello")
    assert sorted(p.relative_to(shelly) for p in shelly.rglob("*")) == before
    assert list((tmp_path / "st" / "sessions").iterdir())


async def test_sessions_continue_from_redis_when_the_engine_has_redis(
    tmp_path: Path, redis_url: str, key_prefix: str
) -> None:
    cfg = make_config({"*": ["first answer", "second answer"]}).model_copy(deep=True)
    cfg.distributed.redis_url = redis_url
    cfg.distributed.key_prefix = key_prefix
    async with await Engine.open(cfg, shelly_dir=tmp_path / "a" / ".shelly") as engine:
        session = engine.session()
        await session.send("hello")
    async with await Engine.open(cfg, shelly_dir=tmp_path / "b" / ".shelly") as engine:
        resumed = await engine.resume_session(session.id)
        outcome = await resumed.send("again")
        (info,) = await engine.sessions.list()
    assert outcome.reply.text_content() == "second answer"
    assert (info.id, info.preview) == (session.id, "again")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


async def test_a_legacy_permissions_file_is_moved_into_the_state_dir(tmp_path: Path) -> None:
    sd, state = tmp_path / ".shelly", tmp_path / "state"
    sd.mkdir()
    (sd / "permissions.json").write_text(json.dumps({"fs_directories": ["/srv/x"]}))
    async with await Engine.open(make_config(a={"toolboxes": ["filesystem"]}), shelly_dir=sd,
                                 env={"SHELLY_STATE_DIR": str(state)}):
        pass
    assert json.loads((state / "permissions.json").read_text()) == {"fs_directories": ["/srv/x"]}
    assert not (sd / "permissions.json").exists() and not (sd / "local").exists()


def test_a_legacy_permissions_file_on_a_read_only_shelly_dir_is_copied_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shelly_dist.engine import legacy
    from shelly_dist.engine.shellydir import ShellyDir

    sd = ShellyDir(tmp_path / ".shelly", state=tmp_path / "state")
    sd.root.mkdir()
    sd.legacy_permissions.write_text('["/srv/x"]')

    def read_only(*_: Any) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(legacy.os, "replace", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    assert legacy.permissions_file(sd) == sd.permissions
    assert sd.permissions.read_text() == '["/srv/x"]' and sd.legacy_permissions.read_text() == '["/srv/x"]'
    assert legacy.permissions_file(sd) == sd.permissions  # the next start finds the new file


async def test_a_canceled_send_is_saved_up_to_what_was_answered_and_listed(tmp_path: Path) -> None:
    cfg = make_config({"*": [{"text": "too late", "delay": 60}]})
    async with await open_engine(cfg, tmp_path) as engine:
        session = engine.session()
        send = asyncio.ensure_future(session.send("the question"))
        deadline = time.monotonic() + 30
        while not any(m.role == Role.USER for m in session.agent.chat.messages()):  # the run has begun
            assert time.monotonic() < deadline, "the send never started"
            await asyncio.sleep(0.01)
        send.cancel()
        with pytest.raises(asyncio.CancelledError):
            await send
        (info,) = await engine.sessions.list()
        _, saved = await engine.sessions.load(session.id)
    assert (info.id, info.preview) == (session.id, "the question")
    assert [m.text_content() for m in saved if m.role == Role.USER] == ["the question"]


def test_a_canceled_conversation_is_kept_up_to_its_last_answered_tool_call() -> None:
    from shelly_dist.chats import ToolCall, ToolResult
    from shelly_dist.engine.session import answered_prefix

    asked = Message.text("user", Role.USER, "q")
    answered = Message(sender="a", role=Role.ASSISTANT, parts=[ToolCall(id="c1", name="t", arguments="{}")])
    result = Message(sender="t", role=Role.TOOL, parts=[ToolResult(tool_call_id="c1", content="ok")])
    dangling = Message(sender="a", role=Role.ASSISTANT, parts=[ToolCall(id="c2", name="t", arguments="{}")])
    assert answered_prefix([asked, answered, result, dangling]) == [asked, answered, result]
