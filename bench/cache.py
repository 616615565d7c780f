"""Prompt caching on a fan-out: how much of a 16-child fan-out's prompt a prefix cache serves.

``python -m bench.cache [--children 16] [--runs 3]`` runs one delegation of N children of one agent,
embedded, against the loopback model server with prefix caching on (it counts the longest prefix a
prompt shares with any earlier one as cached, as llama.cpp's slots and vLLM's automatic prefix
caching do; the prompt is rendered system prompt first, then tools, as ChatML/Qwen templates do;
:mod:`shelly_dist.testing.server_rules`), through the real OpenAI-compatible provider
and the config's built-in toolboxes. It prints the tree's cached share — ``cache_read_tokens /
(input_tokens + cache_read_tokens)`` from ``shelly run --json``'s ``tree_usage`` — for the system
prompt as sent (the sections every instance shares as the system prompt, ``<identity>`` and the
blackboard snapshot at the head of the first user turn) and, for comparison, with Shelly's order
(``<identity>``, which names each instance, first in the system prompt): what issue 22 measured against a real
llama-server (159 of 18,129 prompt tokens from cache in a cold 16-child fan-out).

The children's requests reach the server concurrently; the loopback server caches a prompt the
moment it arrives, so the first sibling seeds the cache for the other fifteen. A real server
evaluating siblings in parallel slots may serve fewer of the first wave from cache.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
from collections.abc import Iterator
from typing import Any
from unittest import mock

from shelly_dist.agent import agent as agent_module
from shelly_dist.agent import prompt as prompt_module
from shelly_dist.engine import Engine
from shelly_dist.engine.config import config_from_data
from shelly_dist.models import Usage
from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

INSTRUCTIONS = (
    "Work carefully through the task you are given. Read the relevant files before changing anything, keep "
    "changes small, and report precisely what you did and what you could not do. "
) * 6


def _team(url: str) -> dict[str, Any]:
    return {
        "providers": [{"name": "local", "kind": "openai", "model": "local", "base_url": url, "api_key": "x"}],
        "agents": [
            {"name": "lead", "description": "splits the work", "instructions": INSTRUCTIONS,
             "options": {"max_delegation_depth": 1}, "provider": "local"},
            {"name": "worker", "description": "does one part of the work", "instructions": INSTRUCTIONS,
             "toolboxes": ["filesystem", "search"], "provider": "local"},
        ],
        "entry_agent": "lead",
    }


def _responder(children: int) -> Any:
    def respond(request: RecordedRequest) -> Reply:
        messages = request.body["messages"]
        if "You are lead." in str(messages[:2]):
            if messages[-1]["role"] == "tool":
                return Reply(text="all parts done", usage={"output": 4})
            tasks = [{"agent": "worker", "task": f"what part {i} of the report", "context": "the background"}
                     for i in range(children)]
            return Reply(text="", tool_calls=[{"name": "delegate", "arguments": {"tasks": tasks}}])
        return Reply(text="", tool_calls=[{"name": "task_complete",
                                           "arguments": {"status": "completed", "summary": "done"}}])

    return respond


def _shelly_order(p: prompt_module.PromptInputs) -> tuple[str, str]:
    """Shelly's order: ``<identity>`` first, then the rest as sent now (one part: nothing shared)."""
    shared, own = prompt_module.prompt_parts(p)
    identity = own[own.index("<identity>"):]
    rest = (shared + own[: own.index("<identity>")]).strip()
    return "", identity + ("\n\n" + rest if rest else "")


@contextlib.contextmanager
def _order(shelly: bool) -> Iterator[None]:
    if not shelly:
        yield
        return
    with mock.patch.object(agent_module, "prompt_parts", _shelly_order):
        yield


async def fan_out(children: int, *, shelly_order: bool) -> Usage:
    """The tree usage of one fan-out against a fresh prefix-caching server."""
    with ModelServer(prefix_cache=True, responder=_responder(children)) as server, \
            tempfile.TemporaryDirectory() as tmp, _order(shelly_order):
        config = config_from_data(_team(server.url))
        async with await Engine.open(config, shelly_dir=tmp) as engine:
            outcome = await engine.session(agent="lead").send("write the report")
        assert outcome.tree_usage is not None and len(server.requests) == children + 2
        return outcome.tree_usage


def cached_share(u: Usage) -> float:
    return u.cache_read_tokens / max(1, u.input_tokens + u.cache_read_tokens)


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cache")
    parser.add_argument("--children", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    for label, shelly in (("as sent now (shared system prompt, <identity> heads the first user turn)", False),
                          ("Shelly's order, <identity> first", True)):
        runs = [await fan_out(args.children, shelly_order=shelly) for _ in range(args.runs)]
        shares = [cached_share(u) for u in runs]
        u = runs[0]
        print(f"{label}: cached share {statistics.median(shares):.1%} "
              f"({u.cache_read_tokens:,} of {u.input_tokens + u.cache_read_tokens:,} prompt tokens, "
              f"{u.model_requests} requests; runs: {', '.join(f'{s:.1%}' for s in shares)})")


if __name__ == "__main__":
    asyncio.run(main())
