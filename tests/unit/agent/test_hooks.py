"""Lifecycle hooks on the step machine (issue 21): every point, in order, with journaled state, and
guardrails as hooks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shelly_dist import BaseHook, GuardrailTripped, RunContext
from shelly_dist.agent import Agent, AgentOptions, Run
from shelly_dist.chats import Chat, Message, Role, ToolCall, ToolResult
from shelly_dist.errors import GuardrailError, HookError, UsageError
from shelly_dist.extensions import GuardrailHook
from shelly_dist.providers import ScriptedCompleter
from shelly_dist.tools import Tool, ToolBox

CALL_ECHO = {"text": "", "tool_calls": [{"name": "echo", "arguments": {"x": "hi"}}]}


async def echo_handler(arguments: str) -> str:
    return f"echo {arguments}"


def agent(*hooks: object, replies: list[Any] | None = None) -> tuple[Agent, ScriptedCompleter]:
    completer = ScriptedCompleter(replies or [CALL_ECHO, "done"])
    a = Agent("solo", completer=completer, options=AgentOptions(hooks=list(hooks), session="s-1"))
    a.add_toolboxes(ToolBox([Tool("echo", "Echo.", {"type": "object"}, echo_handler)]))
    return a, completer


class Recorder(BaseHook):
    name = "rec"

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_run_start(self, ctx: RunContext) -> None:
        self.seen.append(f"start {ctx.agent} {ctx.session} {ctx.task}")

    async def before_model(self, ctx: RunContext, chat: Chat) -> None:
        self.seen.append(f"model {len(chat.view())}")

    async def after_model(self, ctx: RunContext, reply: Message) -> None:
        self.seen.append("replied")

    async def before_tool(self, ctx: RunContext, call: ToolCall) -> None:
        self.seen.append(f"tool {call.name}")

    async def after_tool(self, ctx: RunContext, call: ToolCall, result: ToolResult) -> None:
        self.seen.append(f"result {result.content}")

    async def on_run_end(self, ctx: RunContext, reply: Message) -> Message:
        self.seen.append(f"end {reply.text_content()}")
        return reply


async def test_each_point_is_called_in_the_order_of_the_loop() -> None:
    rec = Recorder()
    a, _ = agent(rec)
    await a.run("task one")
    assert rec.seen == ["start solo s-1 task one", "model 2", "replied", "tool echo", 'result echo {"x": "hi"}',
                        "model 4", "replied", "end done"]


async def test_before_tool_may_answer_a_call_and_after_tool_rewrite_a_result() -> None:
    class Intercept:
        name = "intercept"

        async def before_tool(self, ctx: RunContext, call: ToolCall) -> ToolResult:
            return ToolResult(tool_call_id=call.id, content="cached")

    class Shout:
        name = "shout"

        async def after_tool(self, ctx: RunContext, call: ToolCall, result: ToolResult) -> ToolResult:
            return result.model_copy(update={"content": result.content.upper()})

    a, completer = agent(Intercept(), Shout())
    await a.run("go")
    assert completer.requests[1].messages[-1].parts[0].content == "CACHED"  # type: ignore[union-attr]


async def test_on_run_end_may_replace_the_final_reply() -> None:
    class Stamp:
        name = "stamp"

        async def on_run_end(self, ctx: RunContext, reply: Message) -> Message:
            return Message.text(reply.sender, Role.ASSISTANT, reply.text_content() + " (stamped)")

    a, _ = agent(Stamp())
    assert (await a.run("go")).text_content() == "done (stamped)"


async def test_hook_state_is_journaled_and_on_run_start_runs_once_across_a_rebuild() -> None:
    class Count:
        name = "count"
        starts = 0

        async def on_run_start(self, ctx: RunContext) -> None:
            Count.starts += 1

        async def after_model(self, ctx: RunContext, reply: Message) -> None:
            ctx.state["calls"] = ctx.state.get("calls", 0) + 1

    a, _ = agent(Count())
    a.chat.append(Message.text("user", Role.USER, "go"))
    run = Run.start(a)
    await run.step()  # the model call and the tool call
    snapshot = run.snapshot()
    assert snapshot.hooks["count"] == {"calls": 1} and snapshot.hooks_started
    again = Run.restore(agent(Count())[0], snapshot.model_validate_json(snapshot.model_dump_json()))
    await again.until_done()
    assert again.state.hooks["count"] == {"calls": 2} and Count.starts == 1


async def test_a_hook_that_raises_fails_the_run_naming_the_hook() -> None:
    class Broken:
        name = "broken"

        async def before_model(self, ctx: RunContext, chat: Chat) -> None:
            raise KeyError("oops")

    with pytest.raises(HookError, match="hook broken failed: KeyError: 'oops'"):
        await agent(Broken())[0].run("go")


async def test_an_input_guardrail_that_trips_stops_the_run_before_any_model_call() -> None:
    def no_pii(text: str, ctx: RunContext) -> None:
        if "SSN" in text:
            raise GuardrailTripped("the task holds an SSN")

    a, completer = agent(GuardrailHook("no_pii", no_pii, "input"))
    with pytest.raises(GuardrailError, match=r"^guardrail no_pii tripped: the task holds an SSN$"):
        await a.run("my SSN is 1")
    assert completer.requests == []


async def test_an_output_guardrail_checks_the_final_reply_text() -> None:
    async def no_done(text: str, ctx: RunContext) -> None:
        if text == "done":
            raise GuardrailTripped("too terse")

    with pytest.raises(GuardrailError, match=r"^guardrail terse tripped: too terse$"):
        await agent(GuardrailHook("terse", no_done, "output"))[0].run("go")


async def test_a_guardrail_that_fails_otherwise_is_reported_as_its_own_failure() -> None:
    def buggy(text: str, ctx: RunContext) -> None:
        raise ZeroDivisionError("division by zero")

    with pytest.raises(GuardrailError, match=r"^guardrail buggy failed: ZeroDivisionError: division by zero$"):
        await agent(GuardrailHook("buggy", buggy, "input"))[0].run("go")


async def test_an_old_style_middleware_function_is_refused_not_silently_ignored() -> None:
    def wrap(next_: object) -> object:
        return next_

    with pytest.raises(UsageError, match="hook wrap: has none of the hook points"):
        await Agent("solo", completer=ScriptedCompleter(["x"]), options=AgentOptions(middleware=[wrap])).run("go")


async def test_an_output_guardrail_of_a_child_checks_its_task_complete_summary_and_fails_its_entry() -> None:
    from shelly_dist.agent import Registry

    def no_secrets(text: str, ctx: RunContext) -> None:
        if "SECRET" in text:
            raise GuardrailTripped("the reply holds a secret")

    task = {"agent": "child", "task": "t", "context": ""}
    delegate = {"tool_calls": [{"name": "delegate", "arguments": {"tasks": [task]}}]}
    lead_model = ScriptedCompleter([delegate, "lead done"])
    registry = Registry()
    registry.register("lead", "", lambda: Agent("lead", completer=lead_model,
                                                options=AgentOptions(max_delegation_depth=1)))
    registry.register("child", "", lambda: Agent("child", completer=ScriptedCompleter([
        {"tool_calls": [{"name": "task_complete", "arguments": {"status": "completed", "summary": "the SECRET"}}]},
    ]), options=AgentOptions(hooks=[GuardrailHook("no_secrets", no_secrets, "output")])))
    await registry.spawn("lead").run("go")
    entry = lead_model.requests[1].messages[-1].parts[0].content  # type: ignore[union-attr]
    assert json.loads(entry) == [{"agent": "child", "error": "guardrail no_secrets tripped: the reply holds a secret"}]


async def test_a_reply_replaced_by_a_hook_still_counts_the_model_calls_usage() -> None:
    class Replace:
        name = "replace"

        async def on_run_end(self, ctx: RunContext, reply: Message) -> Message:
            return Message.text(reply.sender, Role.ASSISTANT, "replaced")

    a, _ = agent(Replace(), replies=["done"])
    a.chat.append(Message.text("user", Role.USER, "go"))
    run = Run.start(a)
    await run.until_done()
    assert run.state.usage.model_requests == 1 and run.state.usage.input_tokens > 0


async def test_state_that_is_not_json_fails_the_run_embedded_as_it_would_on_the_pool() -> None:
    class Keeps:
        name = "keeps"

        async def after_model(self, ctx: RunContext, reply: Message) -> None:
            ctx.state["reply"] = reply  # a Message, not JSON

    with pytest.raises(HookError, match="hook keeps failed: TypeError: Object of type Message"):
        await agent(Keeps())[0].run("go")
