"""A team against the loopback server answering as a real llama-server does (issue 22): delegated
children on a strict-alternation template, a tool call cut by ``max_tokens``, arguments that are
not JSON, and a fan-out whose siblings share one prompt prefix."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from shelly_dist.agent import Agent, AgentOptions, Registry
from shelly_dist.events import REPLY_TRUNCATED, WARNING, Event
from shelly_dist.providers.http import aclose_http_client
from shelly_dist.providers.openai import OpenAICompleter
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply
from shelly_dist.tools import Tool, ToolBox


@pytest.fixture(autouse=True)
async def _close_http_client() -> AsyncIterator[None]:
    yield
    await aclose_http_client()


def system_of(request: RecordedRequest) -> str:
    return str(request.body["messages"][0]["content"])


def first_turn(request: RecordedRequest) -> str:
    return str(request.body["messages"][1]["content"])


def is_lead(request: RecordedRequest) -> bool:
    return "You are lead." in first_turn(request)


def answered_tools(request: RecordedRequest) -> bool:
    return request.body["messages"][-1]["role"] == "tool"


def team(server: ModelServer, *, events: list[Event] | None = None, toolboxes: tuple[ToolBox, ...] = ()) -> Registry:
    registry = Registry()

    def make(name: str, depth_limit: int) -> Agent:
        agent = Agent(name, f"the {name}", completer=OpenAICompleter(model="local", base_url=server.url),
                      options=AgentOptions(max_delegation_depth=depth_limit, max_iterations=6,
                                           on_event=events.append if events is not None else None))
        agent.add_toolboxes(*toolboxes)
        return agent

    registry.register("lead", "splits the work", lambda: make("lead", 1))
    registry.register("worker", "does one part", lambda: make("worker", 0))
    return registry


def delegation(n: int) -> Reply:
    tasks = [{"agent": "worker", "task": f"what part {i}", "context": "the shared background"} for i in range(n)]
    return Reply(text="", tool_calls=[{"name": "delegate", "arguments": {"tasks": tasks}}])


def finish(summary: str = "did it") -> Reply:
    return Reply(text="", tool_calls=[{"name": "task_complete", "arguments": {"status": "completed",
                                                                              "summary": summary}}])


def fan_out(n: int) -> Any:
    def respond(request: RecordedRequest) -> Reply:
        if is_lead(request):
            return Reply(text="all done") if answered_tools(request) else delegation(n)
        return finish()

    return respond


async def test_a_delegated_child_works_on_a_strict_alternation_template() -> None:
    with ModelServer(strict_alternation=True, strict_arguments=True, responder=fan_out(1)) as server:
        reply = await team(server).spawn("lead").run("split it")
    assert reply.text_content() == "all done"
    child = [r for r in server.requests if not is_lead(r)][0]
    assert [m["role"] for m in child.body["messages"]] == ["system", "user"]
    delegated = json.loads(server.requests[-1].body["messages"][-1]["content"])
    assert delegated[0]["completion"]["status"] == "completed"


async def test_a_tool_call_cut_by_max_tokens_is_not_run_and_the_run_goes_on() -> None:
    ran: list[str] = []

    async def write(arguments: str) -> str:
        ran.append(arguments)
        return "written"

    box = ToolBox([Tool("write", "write a file", {"type": "object"}, write)], name="fs")
    events: list[Event] = []
    with ModelServer(strict_alternation=True, strict_arguments=True) as server:
        server.push(Reply(text="", tool_calls=[{"name": "write", "arguments": "{"}], finish_reason="length"),
                    Reply(text="recovered"))
        reply = await team(server, events=events, toolboxes=(box,)).spawn("worker").run("write it")
    assert reply.text_content() == "recovered" and ran == []
    result = server.requests[1].body["messages"][-1]
    assert result["role"] == "tool" and "not executed" in result["content"] and "output limit" in result["content"]
    warnings = [e for e in events if e.kind == WARNING]
    assert [w.data["code"] for w in warnings] == [REPLY_TRUNCATED] and warnings[0].data["tool_calls"] == ["write"]


async def test_a_reply_cut_by_max_tokens_runs_its_complete_tool_calls_and_refuses_only_the_cut_one() -> None:
    cities: list[str] = []

    async def get_weather(arguments: str) -> str:
        cities.append(json.loads(arguments)["city"])
        return "sunny"

    box = ToolBox([Tool("get_weather", "weather of a city", {"type": "object"}, get_weather)], name="w")
    events: list[Event] = []
    whole = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    with ModelServer(strict_alternation=True, strict_arguments=True) as server:
        server.push(Reply(text="", tool_calls=[whole, whole, whole, {"name": "get_weather", "arguments": '{"ci'}],
                          finish_reason="length"),
                    Reply(text="three answers"))
        reply = await team(server, events=events, toolboxes=(box,)).spawn("worker").run("weather")
    assert reply.text_content() == "three answers" and cities == ["Paris", "Paris", "Paris"]
    results = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert results[:3] == ["sunny"] * 3 and "not executed" in results[3]
    [warning] = [e for e in events if e.kind == WARNING]
    assert warning.data["tool_calls"] == ["get_weather"] and "3 complete call(s) run" in warning.data["message"]


async def test_a_final_answer_cut_by_max_tokens_is_named_in_a_warning() -> None:
    events: list[Event] = []
    with ModelServer() as server:
        server.push(Reply(text="The answer is", finish_reason="length"))
        reply = await team(server, events=events).spawn("worker").run("answer")
    assert reply.text_content() == "The answer is"
    [warning] = [e for e in events if e.kind == WARNING]
    assert warning.data["code"] == REPLY_TRUNCATED and warning.data["stop_reason"] == "length"


async def test_arguments_that_are_not_a_json_object_get_an_error_result_naming_them() -> None:
    ran: list[str] = []

    async def echo(arguments: str) -> str:
        ran.append(arguments)
        return "echoed"

    box = ToolBox([Tool("echo", "echo", {"type": "object"}, echo)], name="t")
    with ModelServer(strict_arguments=True) as server:
        server.push(Reply(text="", tool_calls=[{"name": "echo", "arguments": "[1, 2]"}]), Reply(text="fine"))
        reply = await team(server, toolboxes=(box,)).spawn("worker").run("echo")
    assert reply.text_content() == "fine" and ran == []
    result = server.requests[1].body["messages"][-1]["content"]
    assert result.startswith("invalid arguments for echo: not a JSON object: '[1, 2]'")


async def test_arguments_holding_nan_get_an_error_result_and_are_sent_back_as_json_llama_server_parses() -> None:
    ran: list[str] = []

    async def measure(arguments: str) -> str:
        ran.append(arguments)
        return "measured"

    box = ToolBox([Tool("measure", "measure", {"type": "object"}, measure)], name="t")
    with ModelServer(strict_arguments=True) as server:
        server.push(Reply(text="", tool_calls=[{"name": "measure", "arguments": '{"value": NaN}'}]),
                    Reply(text="fine"))
        reply = await team(server, toolboxes=(box,)).spawn("worker").run("measure")
    assert reply.text_content() == "fine" and ran == []
    assert server.requests[1].body["messages"][-1]["content"].startswith("invalid arguments for measure")
    history = server.requests[1].body["messages"][-2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(history) == {"_raw": '{"value": NaN}'}


async def test_a_16_child_fan_out_sends_identical_tools_and_system_prompt_prefixes() -> None:
    with ModelServer(responder=fan_out(16)) as server:
        reply = await team(server).spawn("lead").run("split it sixteen ways")
    assert reply.text_content() == "all done"
    children = [r for r in server.requests if not is_lead(r)]
    assert len(children) == 16
    tools = {json.dumps(r.body["tools"]) for r in children}
    assert len(tools) == 1
    systems = {system_of(r) for r in children}
    assert len(systems) == 1 and len(systems.pop()) > 500  # byte-identical, and not a trivial one
    turns = [first_turn(r) for r in children]
    assert sorted(t[: t.index("</identity>")] for t in turns) == sorted(
        f"<identity>\nYou are worker-what-{i}. the worker\n" for i in range(1, 17))


async def test_the_iteration_warning_after_tool_results_passes_a_strict_template() -> None:
    async def echo(arguments: str) -> str:
        return "echoed"

    box = ToolBox([Tool("echo", "echo", {"type": "object"}, echo)], name="t")
    with ModelServer(strict_alternation=True) as server:
        server.push(Reply(text="", tool_calls=[{"name": "echo", "arguments": {}}]), Reply(text="done"))
        agent = team(server, toolboxes=(box,)).spawn("worker")
        agent.options.warn_iterations = 1
        reply = await agent.run("echo")
    assert reply.text_content() == "done"
    last = server.requests[1].body["messages"][-1]
    assert last["role"] == "tool" and last["content"].startswith("echoed\n\nYou are approaching your iteration limit")
