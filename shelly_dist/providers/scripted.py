"""A deterministic model: replays a script of replies, and records what it was asked.

The reply for a call is chosen by how many assistant messages the chat already holds, not by a
counter in the completer. That makes a script stateless: a run rebuilt on another worker from its
journal, or a step redelivered after a crash, gets exactly the reply the original would have got,
and every instance of an agent replays its script from the start.

A reply is a string (text), a :class:`Message`, or a mapping::

    {"text": "…", "tool_calls": [{"name": "delegate", "arguments": {…}, "id"?: "…", "metadata"?: {…}}],
     "delay": 0.5, "error": "simulated outage", "until": "/path/to/file"}

``until`` holds the reply until that file exists (checked every 50 ms), then ``delay`` applies: a
test or a demo decides when a model call ends, on whichever process it runs, without guessing how
long the rest takes.

``suspend`` makes the call suspend its run the first time it is asked (a model call that must wait,
as the provider governor's or a vendor batch's: :mod:`shelly_dist.models.suspend`): a number of
seconds is the wait's due time, after which the call is asked again and answers; ``"reply"``
waits until a reply is delivered for it (``Run.deliver_reply``, or on the pool
``runtime.celery.model_waits.deliver``). A caller that cannot suspend (not a run's model step)
waits the seconds here instead.

``{task}`` in a text or in string arguments is replaced by the latest user message's text, so
one script can answer many different tasks (batches, benchmarks); ``{result}`` by the content of
the latest tool result, so a script can show what a tool (or the user answering ``ask_user``) gave.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shelly_dist.chats import Chat, Message, Role, Text, ToolCall
from shelly_dist.errors import ModelError
from shelly_dist.models import ToolSpec, Usage
from shelly_dist.models.suspend import SuspendModel, model_call

ScriptedReply = str | Message | Mapping[str, Any]


@dataclass(frozen=True)
class Request:
    """What the model was asked: the messages and the names of the tools offered."""

    messages: list[Message]
    tool_names: list[str]


def _estimate(text: str) -> int:
    return math.ceil(len(text) / 4) if text else 0


def _last_user_text(chat: Chat) -> str:
    for m in reversed(chat.view()):
        if m.role == Role.USER and m.sender == "user":
            return m.text_content()
    return ""


def _last_tool_result(chat: Chat) -> str:
    for m in reversed(chat.view()):
        if m.role == Role.TOOL and m.tool_results():
            return m.tool_results()[-1].content
    return ""


def _fill(value: Any, task: str, result: str = "") -> Any:
    if isinstance(value, str):
        return value.replace("{task}", task).replace("{result}", result)
    if isinstance(value, dict):
        return {k: _fill(v, task, result) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, task, result) for v in value]
    return value


UNTIL_POLL = 0.05
"""Seconds between two looks for an ``until`` file."""


async def wait_for_file(path: Path, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Return once ``path`` exists (a scripted reply's ``until``)."""
    while not os.path.exists(path):  # noqa: ASYNC240 -- one stat per look, cheaper than a thread hop
        await sleep(UNTIL_POLL)


def build_reply(spec: ScriptedReply, *, index: int, task: str = "", result: str = "") -> tuple[Message, float, str]:
    """Turn one script entry into (message, delay seconds, error text)."""
    if isinstance(spec, Message):
        return spec.model_copy(deep=True), 0.0, ""
    if isinstance(spec, str):
        return Message.text("", Role.ASSISTANT, _fill(spec, task, result)), 0.0, ""
    parts: list[Any] = []
    if spec.get("text"):
        parts.append(Text(text=_fill(str(spec["text"]), task, result)))
    for j, call in enumerate(spec.get("tool_calls") or []):
        args = _fill(call.get("arguments", {}), task, result)
        parts.append(
            ToolCall(
                id=str(call.get("id") or f"call_{index}_{j}"),
                name=str(call["name"]),
                arguments=args if isinstance(args, str) else json.dumps(args),
                metadata={str(k): str(v) for k, v in (call.get("metadata") or {}).items()},
            )
        )
    return (
        Message(role=Role.ASSISTANT, parts=parts),
        float(spec.get("delay") or 0.0),
        str(spec.get("error") or ""),
    )


class ScriptedCompleter:
    """Replays ``replies`` in order and records every request in ``requests``.

    ``repeat_last=True`` keeps answering with the final entry once the script is used up (handy for
    "always calls a tool" models); otherwise running past the end is a ``ModelError``.
    """

    def __init__(
        self,
        replies: Sequence[ScriptedReply],
        *,
        repeat_last: bool = False,
        name: str = "scripted",
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.replies = list(replies)
        self.repeat_last = repeat_last
        self.name = name
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._sleep = sleep

    @property
    def calls(self) -> int:
        """How many completions were requested."""
        with self._lock:
            return len(self.requests)

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        messages = list(chat.view())  # messages are never changed once in a chat: no copy needed
        with self._lock:
            self.requests.append(Request(messages=messages, tool_names=[t.name for t in tools]))
        index = sum(1 for m in messages if m.role == Role.ASSISTANT)
        if index >= len(self.replies):
            if not (self.repeat_last and self.replies):
                raise ModelError(
                    f'provider "{self.name}": script exhausted after {len(self.replies)} replies',
                    provider=self.name,
                )
            index = len(self.replies) - 1
        spec = self.replies[index]
        reply, delay, error = build_reply(spec, index=index, task=_last_user_text(chat), result=_last_tool_result(chat))
        if isinstance(spec, Mapping) and spec.get("suspend") is not None:
            await self._suspend(spec["suspend"], index)
        if isinstance(spec, Mapping) and spec.get("until"):
            await wait_for_file(Path(str(spec["until"])), self._sleep)
        if delay:
            await self._sleep(delay)
        if error:
            raise ModelError(f'provider "{self.name}": {error}', provider=self.name)
        prompt = "".join(m.text_content() for m in messages)
        return Usage(input_tokens=_estimate(prompt), output_tokens=_estimate(reply.text_content()) + 1).attach(reply)


    async def _suspend(self, suspend: Any, index: int) -> None:
        """A ``suspend`` entry: suspend the run's call the first time it is asked (see the module)."""
        call = model_call()
        if call.previous is not None:  # asked again after its wait: it answers
            return
        until_reply = suspend == "reply"
        if call.can_suspend:
            due = None if until_reply else time.time() + float(suspend)
            raise SuspendModel("scripted", {"index": index}, due, reason=f'provider "{self.name}": scripted wait')
        if until_reply:
            raise ModelError(f'provider "{self.name}": reply {index} waits for a delivered reply, and its caller '
                             "cannot suspend", provider=self.name)
        await self._sleep(float(suspend))


class FunctionCompleter:
    """A completer whose replies come from a function of the chat and the tools.

    The function may be sync or async and returns a reply in any form ``ScriptedCompleter``
    accepts. Requests are recorded the same way.
    """

    def __init__(self, fn: Callable[[list[Message], list[ToolSpec]], Any], *, name: str = "function") -> None:
        self.fn = fn
        self.name = name
        self.requests: list[Request] = []

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        messages = chat.messages()
        self.requests.append(Request(messages=messages, tool_names=[t.name for t in tools]))
        out = self.fn(messages, tools)
        if asyncio.iscoroutine(out):
            out = await out
        index = sum(1 for m in messages if m.role == Role.ASSISTANT)
        reply, delay, error = build_reply(out, index=index, task=_last_user_text(chat), result=_last_tool_result(chat))
        if delay:
            await asyncio.sleep(delay)
        if error:
            raise ModelError(f'provider "{self.name}": {error}', provider=self.name)
        return reply
