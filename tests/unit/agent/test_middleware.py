"""Middleware (behaviours 7, 53–56): order, timeout, recovery, logger and output guardrail."""

from __future__ import annotations

import asyncio
import logging

import pytest

from shelly_dist.agent import Agent, AgentOptions, Middleware, Runner, logger, output_guardrail, recovery, timeout
from shelly_dist.agent.middleware import compose
from shelly_dist.chats import Message, Role
from shelly_dist.errors import AgentError, ModelError, StepTimeout
from shelly_dist.providers import ScriptedCompleter

REPLY = Message.text("agent", Role.ASSISTANT, "done")


async def ok() -> Message:
    return REPLY


async def never() -> Message:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def recorder(name: str, events: list[str]) -> Middleware:
    def wrap(next_: Runner) -> Runner:
        async def run() -> Message:
            events.append(f"{name}:before")
            reply = await next_()
            events.append(f"{name}:after")
            return reply

        return run

    return wrap


async def test_first_middleware_is_outermost() -> None:
    events: list[str] = []
    await compose([recorder("A", events), recorder("B", events)], ok)()
    assert events == ["A:before", "B:before", "B:after", "A:after"]


async def test_three_levels_nest_in_list_order() -> None:
    events: list[str] = []
    await compose([recorder("A", events), recorder("B", events), recorder("C", events)], ok)()
    assert events == ["A:before", "B:before", "C:before", "C:after", "B:after", "A:after"]


async def test_compose_with_no_middleware_runs_the_runner() -> None:
    assert await compose([], ok)() is REPLY


async def test_agent_run_applies_its_middleware_first_outermost() -> None:
    events: list[str] = []
    agent = Agent(
        "solo",
        completer=ScriptedCompleter(["hi"]),
        options=AgentOptions(middleware=[recorder("A", events), recorder("B", events)]),
    )
    reply = await agent.run("hello")
    assert reply.text_content() == "hi"
    assert events == ["A:before", "B:before", "B:after", "A:after"]


async def test_timeout_fails_a_slow_runner_with_deadline_exceeded() -> None:
    with pytest.raises(StepTimeout, match="deadline exceeded"):
        await timeout(0.05)(never)()


async def test_timeout_returns_the_reply_of_a_fast_runner() -> None:
    assert await timeout(30)(ok)() is REPLY


async def test_timeout_lets_the_runners_own_timeout_error_through_unchanged() -> None:
    own = TimeoutError("socket read timed out")

    async def failing() -> Message:
        raise own

    with pytest.raises(TimeoutError) as info:
        await timeout(30)(failing)()
    assert info.value is own


async def test_recovery_turns_an_unexpected_exception_into_agent_panicked() -> None:
    async def panics() -> Message:
        raise RuntimeError("something went wrong")

    with pytest.raises(AgentError) as info:
        await recovery()(panics)()
    assert "agent panicked" in str(info.value)
    assert "something went wrong" in str(info.value)


async def test_recovery_passes_shelly_errors_through_unchanged() -> None:
    err = ModelError('provider "x": down', provider="x")

    async def fails() -> Message:
        raise err

    with pytest.raises(ModelError) as info:
        await recovery()(fails)()
    assert info.value is err


async def test_recovery_lets_cancellation_through() -> None:
    task = asyncio.create_task(recovery()(never)())
    for _ in range(3):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_output_guardrail_rejection_is_the_checks_exact_error() -> None:
    rejection = ValueError("reply mentions a secret")

    def check(reply: Message) -> None:
        raise rejection

    with pytest.raises(ValueError) as info:
        await output_guardrail(check)(ok)()
    assert info.value is rejection


async def test_output_guardrail_is_skipped_when_the_inner_runner_fails() -> None:
    checked: list[Message] = []
    inner = ModelError("inner failure")

    async def fails() -> Message:
        raise inner

    with pytest.raises(ModelError) as info:
        await output_guardrail(checked.append)(fails)()
    assert info.value is inner
    assert checked == []


async def test_output_guardrail_passes_an_accepted_reply_through() -> None:
    checked: list[Message] = []
    assert await output_guardrail(checked.append)(ok)() is REPLY
    assert checked == [REPLY]


async def test_output_guardrail_awaits_an_async_check() -> None:
    async def check(reply: Message) -> None:
        raise ValueError("async rejection")

    with pytest.raises(ValueError, match="async rejection"):
        await output_guardrail(check)(ok)()


async def test_logger_logs_start_and_finish_with_the_agent_name(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.middleware.ok")
    with caplog.at_level(logging.INFO, logger=log.name):
        await logger(log, "coder-refactor-1")(ok)()
    text = caplog.text
    assert "agent started" in text and "agent finished" in text
    assert "coder-refactor-1" in text
    assert "finished with error" not in text


async def test_logger_logs_finished_with_error_and_the_error_text(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.middleware.err")

    async def fails() -> Message:
        raise ModelError("the model fell over")

    with caplog.at_level(logging.INFO, logger=log.name), pytest.raises(ModelError):
        await logger(log, "coder")(fails)()
    assert "agent finished with error" in caplog.text
    assert "the model fell over" in caplog.text
