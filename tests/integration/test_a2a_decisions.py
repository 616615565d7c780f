"""People in the loop over A2A (issue 35): a gated call of a child on a real worker turns the task
``input-required`` (the message says what waits, its metadata names the decision); the task's
next message answers it and the task completes; an answer that does not fit asks again."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers import get_artifact_text, new_text_message
from a2a.types.a2a_pb2 import Role, SendMessageRequest, TaskState

from .cluster import Cluster
from .ops import Processes
from .test_a2a_serve import start_a2a
from .test_approvals import deploys, project

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


async def send(url: str, text: str, task_id: str = "", context_id: str = "") -> Any:
    """``message/send`` (blocking): the task as it stands once it completes or needs input."""
    async with httpx.AsyncClient(timeout=120) as http:
        client = await create_client(url, ClientConfig(httpx_client=http, streaming=False))
        request = SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER, task_id=task_id or None,
                                                              context_id=context_id or None))
        return [r async for r in client.send_message(request)][-1].task


def test_a_gated_call_makes_the_task_input_required_and_the_next_message_approves_it(
        cluster: Cluster, procs: Processes) -> None:
    project(cluster)
    cluster.start_worker("w1")
    url = start_a2a(procs, "--agent", "lead")

    asked = asyncio.run(send(url, "release"))
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    text = asked.status.message.parts[0].text
    assert text.startswith("approval a-1: lead → deployer-ship-1 wants to run deploy")
    assert deploys(cluster) == []

    again = asyncio.run(send(url, "perhaps", asked.id, asked.context_id))
    assert again.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert "answer approve (yes, always) or reject" in again.status.message.parts[0].text

    done = asyncio.run(send(url, "yes", asked.id, asked.context_id))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED, done.status
    assert "deploy said: deployed to prod" in get_artifact_text(done.artifacts[0])
    assert len(deploys(cluster)) == 1
