"""Run one delegation scenario on either runtime and observe what both must agree on.

A scenario is a team (scripted models per agent) and a task. :func:`observe` runs it through the
engine as ``shelly run`` does — embedded (children as asyncio tasks) or on the pool (children on a
real ``shelly worker`` subprocess, the coordinator in this process) — and returns what a user can
see: the ``delegate`` results the lead got, how each child run ended, the event kinds of each
child, the tokens spent, the board and the final answer. Every scenario goes through :func:`both`,
which asserts that both runtimes give the whole same :class:`Observed` (DESIGN §6: a behaviour
that differs is a failing test) before the scenario asserts what that result is.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest.mock import patch

import yaml

from shelly_dist.chats import Message, ToolCall, ToolResult
from shelly_dist.engine import Engine
from shelly_dist.events import Event
from shelly_dist.tasks import board as board_module
from tests.integration.cluster import Cluster
from tests.integration.conftest import cluster

__all__ = ["Cluster", "Observed", "Scenario", "both", "cluster", "complete", "delegate", "observe"]

VOLATILE = {"call_id"}
"""Event fields that differ per run (a tool call's id)."""

POOL_ONLY = {"run_queued", "run_waiting", "run_resumed"}
"""Kinds that say where a run is placed on the pool (docs/events.md); an embedded run has no queue."""


@dataclass
class Scenario:
    """A team and a task: ``scripts`` per agent name (the scripted provider's format)."""

    scripts: dict[str, list[Any]]
    agents: list[dict[str, Any]]
    task: str = "go"
    entry_agent: str = "lead"
    board: list[str] = field(default_factory=list)
    """Ids of tasks put on the session's board (``pending``) before the run."""
    cancel_when_claimed: str = ""
    """A board task to cancel on the board as soon as a child has claimed it."""
    provider: dict[str, Any] = field(default_factory=dict)
    """More settings of the scripted provider (e.g. ``context_window``)."""
    answers: dict[str, str] = field(default_factory=dict)
    """``ask_user`` answers by question text, given from outside the run with ``Session.respond``
    once the question is listed by ``Session.questions``."""
    during: Callable[[Any, Path], Awaitable[Any]] | None = None
    """What a person does while the run works, from outside it: called with the session and the
    project directory once the send has started; what it returns is ``Observed.during``."""
    providers: list[dict[str, Any]] = field(default_factory=list)
    """More providers (an agent names one with ``provider:``), e.g. a vendor's loopback stand-in."""
    concurrency: int = 8
    """The pool worker's concurrency: 1 runs the children one after the other, so a sibling a
    failure stops is still queued when it is stopped (the embedded runtime starts them all)."""


@dataclass
class Observed:
    """What both runtimes must agree on."""

    entries: list[list[dict[str, Any]]]
    """Each ``delegate`` (and ``answer_delegation_questions``) result the lead got, in order (the
    JSON array of entries)."""
    endings: list[tuple[str, str]]
    """(agent asked for, status) of every child's ``run_finished``, sorted."""
    kinds: dict[str, set[str]] = field(default_factory=dict)
    """The event kinds of each child's runs, by the agent asked for (pool-only kinds left out)."""
    tokens: int = 0
    """Input plus output tokens of every child run (from their ``run_finished``)."""
    inputs: list[int] = field(default_factory=list)
    """Input tokens of each child run (what each child was shown), sorted: the children of one
    fan-out finish in any order on the pool."""
    reply: str = ""
    board: dict[str, tuple[str, str]] = field(default_factory=dict)
    """(status, assignee) of each of the scenario's board tasks after the run."""
    questions: list[dict[str, Any]] = field(default_factory=list)
    """Each question answered, as ``Session.questions`` listed it (``id``, ``agent``, ``text``,
    ``options``, ``timeout``; the asking run and time left out)."""
    asked: list[dict[str, Any]] = field(default_factory=list)
    """The data of every ``ask_user`` event, in order."""
    during: Any = None
    """What the scenario's ``during`` returned."""
    root: list[tuple[str, str]] = field(default_factory=list)
    """The top-level run's ``run_started`` (with its parent, ``""``) and ``run_finished`` (with its
    status), in order: the same in both runtimes."""
    people: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    """Every ``approval_requested``, ``approval_decided`` and ``steered`` event: (kind, agent, data
    without what differs per run or per process)."""


async def both(cluster: Cluster, scenario: Scenario) -> Observed:
    """The scenario observed embedded, then on the pool (same project, same scripts): the whole
    observed result — entries, endings, every child's event kinds, tokens, board, questions,
    reply — must be the same on both; returns it."""
    embedded = await observe(cluster, scenario, "embedded")
    pool = await observe(cluster, scenario, "pool")
    assert embedded == pool, f"the runtimes differ:\nembedded: {embedded}\npool:     {pool}\n{cluster.worker_log()}"
    return embedded


def write_team(cluster: Cluster, scenario: Scenario, runtime: str) -> None:
    """The scenario's config in the cluster's project; embedded, without a ``distributed:`` section."""
    providers = [{"name": "team", "kind": "scripted", "model": "script", "script": scenario.scripts,
                  **scenario.provider}, *scenario.providers]
    if runtime == "pool":
        cluster.write_config(providers, scenario.agents, entry_agent=scenario.entry_agent)
        return
    config = {"providers": providers, "agents": scenario.agents, "entry_agent": scenario.entry_agent}
    (cluster.root / ".shelly" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


async def observe(cluster: Cluster, scenario: Scenario, runtime: str) -> Observed:
    """Run ``scenario`` on ``runtime`` (``embedded`` or ``pool``) and observe it."""
    write_team(cluster, scenario, runtime)
    if runtime == "pool":
        cluster.start_worker("w1", concurrency=scenario.concurrency)
    seen: list[Event] = []
    async with await Engine.open(None, shelly_dir=cluster.root / ".shelly", env=cluster.env()) as engine:
        assert engine.runtime.name == ("celery" if runtime == "pool" else "local")
        sub = engine.bus.subscribe(buffer=100_000)
        session = engine.session(persist=False)
        board = engine.stores.board(session.id)
        for task_id in scenario.board:
            await put_task(board, task_id)
        sending = asyncio.create_task(session.send(scenario.task))
        if scenario.cancel_when_claimed:
            await cancel_once_claimed(board, scenario.cancel_when_claimed, sending)
        answered = await answer_questions(session, scenario.answers, sending)
        during = await scenario.during(session, cluster.root) if scenario.during is not None else None
        outcome = await sending
        await until_every_run_ended(sub, seen)
        sub.close()
        entries = delegate_results(session.agent.chat.messages())
        tasks = {t: await board.get(t) for t in scenario.board}
    observed = _observed(seen, same_ids(entries), outcome.reply.text_content(), outcome.run_id)
    observed.board = {t: (str(task.status), task.assignee) if task else ("", "") for t, task in tasks.items()}
    observed.questions = answered
    observed.during = during
    return observed


async def answer_questions(session: Any, answers: dict[str, str], run: asyncio.Task[Any]) -> list[dict[str, Any]]:
    """Answer each question of ``answers`` (by text) once ``Session.questions`` lists it, with
    ``Session.respond``; returns the questions as listed (fail if the run ends first)."""
    answered: list[dict[str, Any]] = []
    deadline = asyncio.get_running_loop().time() + 60
    while len(answered) < len(answers):
        for q in await session.questions():
            if q["text"] in answers and q["id"] not in {a["id"] for a in answered}:
                await session.respond(q["id"], answers[q["text"]])
                answered.append({k: v for k, v in q.items() if k not in ("run", "asked")})
        assert not run.done() or len(answered) == len(answers), f"the run ended with questions unanswered: {answers}"
        assert asyncio.get_running_loop().time() < deadline, f"never asked: {answers}"
        await asyncio.sleep(0.05)  # polling the open questions: the condition, with a deadline
    return answered


async def until_every_run_ended(sub: Any, seen: list[Event]) -> None:
    """Read events into ``seen`` until every run that started has finished: a child the parent's
    end cancels ends with the send embedded, and shortly after it on the pool (cancelled through
    Redis); what both must agree on is how it ended."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while True:
        try:
            while True:  # everything buffered now, then a short wait for more
                event = await asyncio.wait_for(sub.get(), 0.1)
                assert event is not None
                seen.append(event)
        except TimeoutError:
            pass
        started = {e.run_id for e in seen if e.kind == "run_started"}
        ended = {e.run_id for e in seen if e.kind == "run_finished"}
        if started <= ended:
            return
        assert loop.time() < deadline, f"runs never finished: {sorted(started - ended)}"


async def put_task(board: Any, task_id: str) -> None:
    """A pending task with a known id (a scripted lead names it in its ``delegate`` call): the
    board draws ids from ``uuid4``, so it draws this one."""
    with patch.object(board_module.uuid, "uuid4", return_value=task_id.removeprefix("task-")):
        await board.create(task_id, description="spec")


async def cancel_once_claimed(board: Any, task_id: str, run: asyncio.Task[Any]) -> None:
    """Cancel ``task_id`` on the board once a child holds it (fail if the run ends first)."""
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        task = await board.get(task_id)
        if task is not None and task.status == "in_progress":
            await board.cancel(task_id)
            return
        assert not run.done(), f"the run ended before {task_id} was claimed"
        assert asyncio.get_running_loop().time() < deadline, f"{task_id} never claimed"
        await asyncio.sleep(0.05)  # polling the board: the condition, with a deadline


def same_ids(entries: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """``entries`` with run ids (random per root, in both runtimes) written as ``<run>``."""
    return json.loads(re.sub(r"tree of run [0-9a-f-]+", "tree of run <run>", json.dumps(entries)))


DELEGATING = {"delegate", "answer_delegation_questions"}


def delegate_results(messages: list[Message]) -> list[list[dict[str, Any]]]:
    """The parsed result of every ``delegate`` (or interactive answer) call in ``messages``, in order."""
    calls = {p.id for m in messages for p in m.parts if isinstance(p, ToolCall) and p.name in DELEGATING}
    return [json.loads(p.content) for m in messages for p in m.parts
            if isinstance(p, ToolResult) and p.tool_call_id in calls]


def _observed(seen: list[Event], entries: list[list[dict[str, Any]]], reply: str, root: str) -> Observed:
    asked_for: dict[str, str] = {}
    endings: list[tuple[str, str]] = []
    tokens = 0
    inputs: list[int] = []
    root_life = [(e.kind, str(e.data.get("status", e.data.get("parent", "")))) for e in seen
                 if e.run_id == root and e.kind in ("run_started", "run_finished")]
    for e in seen:
        if e.kind == "run_finished" and e.run_id != root:
            agent = str(e.data["entry"].get("agent", ""))
            asked_for[e.run_id] = agent
            endings.append((agent, str(e.data["status"])))
            usage = e.data.get("usage") or {}
            tokens += int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
            inputs.append(int(usage.get("input_tokens", 0)))
    asked = [dict(e.data) for e in seen if e.kind == "ask_user"]
    people = [(e.kind, e.agent, {k: v for k, v in e.data.items() if k not in VOLATILE})
              for e in seen if e.kind in ("approval_requested", "approval_decided", "steered")]
    kinds: dict[str, set[str]] = {}
    for e in seen:
        if e.run_id in asked_for and e.kind not in POOL_ONLY:
            kinds.setdefault(asked_for[e.run_id], set()).add(e.kind)
    return Observed(entries=entries, endings=sorted(endings), kinds=kinds, tokens=tokens, inputs=sorted(inputs),
                    reply=reply, root=root_life,
                    asked=asked, people=people)


def delegate(*tasks: dict[str, Any]) -> dict[str, Any]:
    """A scripted reply calling ``delegate`` with ``tasks`` (``agent``, ``task``, optional keys)."""
    return {"tool_calls": [{"name": "delegate", "arguments": {
        "tasks": [{"context": "", **t} for t in tasks]}}]}


def complete(summary: str, status: str = "completed") -> dict[str, Any]:
    return {"tool_calls": [{"name": "task_complete", "arguments": {"status": status, "summary": summary}}]}
