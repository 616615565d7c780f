"""Remote A2A agents as delegation targets (``a2a_agents:``): a local agent delegates to one
exactly as to a local agent, and the child run's one "model call" is the remote task.

Why a completer: the child is then an ordinary run of our runtime — embedded or on a worker,
journaled, listed by ``shelly runs``, counted by the limits — and its reply is the remote task's
final artifact. Cancelling our tree cancels the child's step, which cancels the remote task
(``tasks/cancel``) before the cancellation goes on. A worker that dies mid-call leaves the remote
task running; the redone step sends a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shelly_dist.chats import Chat, Message, Role
from shelly_dist.engine.a2a import require_sdk
from shelly_dist.errors import AgentError

if TYPE_CHECKING:
    from shelly_dist.engine.config_models import A2AAgentConfig
    from shelly_dist.models.completer import ToolSpec

log = logging.getLogger(__name__)

CARD_TIMEOUT = 10.0
"""Seconds to read a remote agent's card at start-up before going on without its description."""

CANCEL_TIMEOUT = 10.0
"""Seconds the remote ``tasks/cancel`` may take when our tree is cancelled."""


@dataclass
class RemoteAgent:
    """A configured remote agent and the description ``list_agents`` shows for it."""

    config: A2AAgentConfig
    description: str

    @property
    def name(self) -> str:
        return self.config.name


def _headers(config: A2AAgentConfig) -> dict[str, str]:
    return {"Authorization": f"Bearer {config.token}"} if config.token else {}


async def read_card_description(config: A2AAgentConfig) -> str:
    """The card's description (the config's ``description`` wins); "" with a warning when the card
    cannot be read now: a worker still starts, and a call reads the card again."""
    if config.description:
        return config.description
    import httpx
    from a2a.client import A2ACardResolver

    try:
        async with httpx.AsyncClient(timeout=CARD_TIMEOUT, headers=_headers(config)) as http:
            card = await A2ACardResolver(http, config.url).get_agent_card()
    except Exception as exc:
        log.warning('a2a agent "%s": cannot read its card at %s (%s); listed without a description',
                    config.name, config.url, exc)
        return ""
    return str(card.description)


async def remote_agents(configs: list[A2AAgentConfig]) -> list[RemoteAgent]:
    """Every configured remote agent with its description, the cards read concurrently."""
    if not configs:
        return []
    require_sdk("a2a_agents")
    descriptions = await asyncio.gather(*(read_card_description(c) for c in configs))
    return [RemoteAgent(c, d) for c, d in zip(configs, descriptions, strict=True)]


def _task_text(chat: Chat) -> str:
    """What the delegation asked: the child's last user message (its task, after any context)."""
    users = [m for m in chat.view() if m.role == Role.USER]
    return users[-1].text_content() if users else ""


class A2ACompleter:
    """Sends the child's task to the remote agent and returns the final artifact as its reply."""

    def __init__(self, config: A2AAgentConfig) -> None:
        self.config = config

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        import httpx
        from a2a.client import ClientConfig, create_client
        from a2a.helpers import new_text_message
        from a2a.types.a2a_pb2 import Role as A2ARole
        from a2a.types.a2a_pb2 import SendMessageRequest

        name = self.config.name
        request = SendMessageRequest(message=new_text_message(_task_text(chat), role=A2ARole.ROLE_USER))
        seen = _Progress()
        async with httpx.AsyncClient(timeout=self.config.timeout, headers=_headers(self.config)) as http:
            client = await create_client(self.config.url, ClientConfig(httpx_client=http, streaming=True))
            try:
                async with asyncio.timeout(self.config.timeout):
                    async for response in client.send_message(request):
                        seen.take(response)
            except asyncio.CancelledError:  # our tree was cancelled: so is the remote task
                await self._cancel(client, seen)
                raise
            except TimeoutError:
                await self._cancel(client, seen)
                raise AgentError(f'a2a agent "{name}": no answer within {self.config.timeout:g}s '
                                 f"(task {seen.task_id or '?'} cancelled)", agent=name) from None
        if not seen.completed():
            raise AgentError(f'a2a agent "{name}": task {seen.task_id or "?"} ended {seen.state_name()}'
                             + (f": {seen.detail}" if seen.detail else ""), agent=name)
        return Message.text(name, Role.ASSISTANT, seen.reply())

    async def _cancel(self, client: Any, seen: _Progress) -> None:
        """``tasks/cancel`` the remote task if it started and has not ended; never raises."""
        from a2a.types.a2a_pb2 import CancelTaskRequest

        if not seen.task_id or seen.ended():
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.cancel_task(CancelTaskRequest(id=seen.task_id)), CANCEL_TIMEOUT)
            log.info('a2a agent "%s": cancelled its task %s', self.config.name, seen.task_id)


class _Progress:
    """What the remote task's stream said so far: its id, state, last status text, artifacts."""

    def __init__(self) -> None:
        self.task_id = ""
        self.state = 0
        self.detail = ""
        self.parts: list[str] = []

    def take(self, response: Any) -> None:
        from a2a.helpers import get_artifact_text, get_message_text
        from a2a.types.a2a_pb2 import TaskState

        if response.HasField("task"):
            task = response.task
            self.task_id, self.state = task.id, task.status.state
            if task.artifacts and not self.parts:
                self.parts = [get_artifact_text(a) for a in task.artifacts]
        elif response.HasField("status_update"):
            update = response.status_update
            self.task_id, self.state = update.task_id, update.status.state
            if update.status.message.parts:
                self.detail = get_message_text(update.status.message)
        elif response.HasField("artifact_update"):
            self.task_id = response.artifact_update.task_id
            self.parts.append(get_artifact_text(response.artifact_update.artifact))
        elif response.HasField("message"):  # a message-only agent: its message is the answer
            self.parts.append(get_message_text(response.message))
            self.state = TaskState.TASK_STATE_COMPLETED

    def completed(self) -> bool:
        from a2a.types.a2a_pb2 import TaskState

        return self.state == TaskState.TASK_STATE_COMPLETED

    def ended(self) -> bool:
        from a2a.types.a2a_pb2 import TaskState

        return self.state in (TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
                              TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_REJECTED)

    def state_name(self) -> str:
        from a2a.types.a2a_pb2 import TaskState

        return TaskState.Name(self.state).removeprefix("TASK_STATE_").lower()  # type: ignore[arg-type]

    def reply(self) -> str:
        return "\n".join(self.parts)
