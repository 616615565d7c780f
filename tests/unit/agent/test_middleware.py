"""The built-in middleware (behaviours 7, 53–56) as hooks on the step machine: timeout, recovery,
logger and output guardrail, through real runs of an agent."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from shelly_dist.agent import Agent, AgentOptions, Run, logger, output_guardrail, recovery, timeout
from shelly_dist.chats import Message
from shelly_dist.errors import AgentError, ModelError, StepTimeout
from shelly_dist.providers import FunctionCompleter, ScriptedCompleter


def agent(*hooks: object, replies: list[object] | None = None, completer: object = None) -> Agent:
    return Agent("solo", completer=completer or ScriptedCompleter(replies or ["done"]),  # type: ignore[arg-type]
                 options=AgentOptions(middleware=list(hooks)))


def failing(exc: BaseException) -> FunctionCompleter:
    def fn(messages: object, tools: object) -> object:
        raise exc

    return FunctionCompleter(fn)


async def test_timeout_fails_a_slow_model_call_with_deadline_exceeded() -> None:
    slow = agent(timeout(0.05), replies=[{"text": "late", "delay": 30}])
    with pytest.raises(StepTimeout, match=r"deadline exceeded after 0\.05s"):
        await slow.run("hello")


async def test_timeout_returns_the_reply_of_a_fast_run() -> None:
    assert (await agent(timeout(30)).run("hello")).text_content() == "done"


async def test_timeout_counts_from_the_journaled_start_across_a_rebuild() -> None:
    """A run continued from its snapshot (another worker) keeps the deadline of its first step."""
    script = [{"text": "", "tool_calls": [{"name": "nothing", "arguments": {}}]}, "x"]
    first = agent(timeout(5), replies=script)
    first.chat.append(Message.text("user", "user", "go"))  # type: ignore[arg-type]
    run = Run.start(first)
    await run.step()
    snapshot = run.snapshot()
    snapshot.hooks["timeout"]["started"] = time.time() - 10  # its first step was 10 s ago
    again = Run.restore(agent(timeout(5), replies=script), snapshot)
    with pytest.raises(StepTimeout, match="deadline exceeded"):
        await again.step()


async def test_timeout_lets_the_models_own_timeout_error_through_unchanged() -> None:
    own = TimeoutError("socket read timed out")
    with pytest.raises(TimeoutError) as info:
        await agent(timeout(30), completer=failing(own)).run("hello")
    assert info.value is own


async def test_recovery_turns_an_unexpected_exception_into_agent_panicked() -> None:
    with pytest.raises(AgentError, match="agent panicked: something went wrong"):
        await agent(recovery(), completer=failing(RuntimeError("something went wrong"))).run("hello")


async def test_recovery_passes_shelly_errors_through_unchanged() -> None:
    err = ModelError('provider "x": down', provider="x")
    with pytest.raises(ModelError) as info:
        await agent(recovery(), completer=failing(err)).run("hello")
    assert info.value is err


async def test_recovery_lets_cancellation_through() -> None:
    task = asyncio.create_task(agent(recovery(), replies=[{"text": "x", "delay": 30}]).run("hello"))
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_output_guardrail_rejection_fails_the_run_naming_the_check() -> None:
    def check(reply: Message) -> None:
        raise ValueError("reply mentions a secret")

    with pytest.raises(AgentError, match="hook output_guardrail failed: ValueError: reply mentions a secret"):
        await agent(output_guardrail(check)).run("hello")


async def test_output_guardrail_is_skipped_when_the_model_fails() -> None:
    checked: list[Message] = []
    with pytest.raises(ModelError):
        await agent(output_guardrail(checked.append), completer=failing(ModelError("inner failure"))).run("x")
    assert checked == []


async def test_output_guardrail_sees_the_final_reply_and_passes_it_through() -> None:
    checked: list[Message] = []
    reply = await agent(output_guardrail(checked.append)).run("hello")
    assert [m.text_content() for m in checked] == ["done"] and reply.text_content() == "done"


async def test_output_guardrail_awaits_an_async_check() -> None:
    async def check(reply: Message) -> None:
        raise ValueError("async rejection")

    with pytest.raises(AgentError, match="async rejection"):
        await agent(output_guardrail(check)).run("hello")


async def test_logger_logs_start_and_finish_with_the_agent_name(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.middleware.ok")
    with caplog.at_level(logging.INFO, logger=log.name):
        await agent(logger(log, "coder-refactor-1")).run("hello")
    assert "agent started" in caplog.text and "agent finished" in caplog.text
    assert "coder-refactor-1" in caplog.text and "finished with error" not in caplog.text


async def test_logger_logs_finished_with_error_and_the_error_text(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.middleware.err")
    with caplog.at_level(logging.INFO, logger=log.name), pytest.raises(ModelError):
        await agent(logger(log, "coder"), completer=failing(ModelError("the model fell over"))).run("hello")
    assert "agent finished with error" in caplog.text and "the model fell over" in caplog.text


async def test_middleware_and_hooks_are_one_list_middleware_first() -> None:
    seen: list[str] = []

    class Mark:
        def __init__(self, name: str) -> None:
            self.name = name

        async def on_run_start(self, ctx: object) -> None:
            seen.append(self.name)

    solo = Agent("solo", completer=ScriptedCompleter(["done"]),
                 options=AgentOptions(middleware=[Mark("a")], hooks=[Mark("b"), Mark("c")]))
    await solo.run("hello")
    assert seen == ["a", "b", "c"]
