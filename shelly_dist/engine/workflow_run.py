"""Running a workflow: join the team in a fresh session, post the kickoff, wait for idle.

The team is **idle** when no agent is running, every inbox is empty and no proposal is active
(``Workspace.idle``), continuously for a debounce (2 s): a wake about to start shows as an unacked
message, so idle is never declared between a post and the wake it causes.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from shelly_dist.cancellation import pause
from shelly_dist.engine.sessions import new_session_id
from shelly_dist.engine.workflow import (
    Workflow,
    agents_spec,
    base_variables,
    interpolate,
    resolve_params,
    run_setup,
    schedules,
)
from shelly_dist.errors import UsageError
from shelly_dist.workspace import DEFAULT_DOCUMENT, USER, WorkspaceBase
from shelly_dist.workspace.due import DueIndex, member

DEBOUNCE = 2.0
"""Seconds the team must stay idle before ``workflow run`` ends."""

POLL = 0.2
"""Seconds between idle checks (each a handful of reads)."""


async def start_workflow(
    workspace_of: Callable[[str], WorkspaceBase], workflow: Workflow, *, params: Mapping[str, str], tag: str = "",
    env: Mapping[str, str] | None = None, cwd: Path | None = None, session: str | None = None,
    due: DueIndex | None = None, exec_env: Sequence[str] = (),
) -> tuple[str, WorkspaceBase]:
    """Set the team up in a new session and post the kickoff (as ``user``, so it wakes whom it
    mentions); returns the session id and its workspace. ``workspace_of`` is the engine's
    ``stores.workspace``; ``exec_env`` the config's ``permissions.exec_env`` (what setup commands
    may see of this process's environment besides PATH, HOME and LANG)."""
    values = resolve_params(workflow, params)
    variables = base_variables(workflow, values, os.environ if env is None else env, tag)
    variables = await asyncio.to_thread(run_setup, workflow, variables, cwd or Path.cwd(), exec_env)
    session = session or new_session_id()
    ws = workspace_of(session)
    await ws.join(list(workflow.agents))
    await ws.set_wake_budget(workflow.wake_budget)
    await ws.set_agents_spec(agents_spec(workflow))  # what a worker builds the inline agents from
    await ws.set_project(f"Workflow: {workflow.name}" + (f" (tag {tag})" if tag else ""))
    for name, spec in workflow.agents.items():
        if spec.prompt.append:
            await ws.set_agent_prompt(name, interpolate(spec.prompt.append, variables))
    now = time.time()
    for name, schedule in schedules(workflow).items():
        if due is None:
            raise UsageError(f"workflow: agent {name} has a wakeup but this runner has no schedule index")
        await ws.set_schedule(name, schedule.model_copy(update={"prompt": interpolate(schedule.prompt, variables)}))
        await due.schedule(member(session, name), schedule.next_due(now, 0.0))
    kickoff = interpolate(workflow.kickoff, variables)
    if kickoff.strip():
        await ws.send(USER, kickoff)
    return session, ws


async def unschedule(workflow: Workflow, session: str, due: DueIndex) -> None:
    """Stop the workflow's schedules (its run has ended)."""
    for name in schedules(workflow):
        await due.remove(member(session, name))


async def wait_idle(ws: WorkspaceBase, *, debounce: float = DEBOUNCE, poll: float = POLL) -> None:
    """Return once the team has stayed idle for ``debounce`` seconds, or its wakes paused (over
    the wake budget: the inbox that waits would keep it from ever being idle)."""
    since: float | None = None
    while True:
        if await ws.wakes_paused():
            return
        if await ws.idle():
            since = since or time.monotonic()
            if time.monotonic() - since >= debounce:
                return
        else:
            since = None
        await pause(poll)


async def wait_stopped(ws: WorkspaceBase, *, poll: float = POLL) -> None:
    """Return once ``shelly workflow stop`` has asked this session to stop."""
    while True:
        if await ws.stop_requested():
            return
        await pause(poll)


async def final_output(ws: WorkspaceBase) -> str:
    """What ``workflow run`` prints: the document, or else the channel's last word from an agent."""
    document = await ws.doc_read(DEFAULT_DOCUMENT)
    if document.strip():
        return document
    members = set(await ws.members())
    said = [m for m in await ws.read(None, limit=0) if m.sender in members]
    return said[-1].content if said else ""
