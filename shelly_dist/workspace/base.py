"""A team's workspace, written once over a few storage primitives.

Both workspaces (in memory, in Redis) implement only the primitives below — append to the
channel, read it after an id, move an ack cursor forward, and get/put/mutate a field of a named
table — plus the wake lease; every rule a user can observe (who sees what, what lands in an inbox,
smart send, documents, proposals) is here, so the two cannot drift. ``_mutate`` hands a rule the
field's current text and atomically stores what it returns; a rule raises ``StoreError`` to abort
and may run more than once (Redis retries it on a conflicting write), so rules are pure.

Tables: ``members`` (the team's agents), ``docs`` (name → text), ``owners`` (document → agent,
set by a binding election), ``resources`` (sha256 → content), ``status`` (agent → status JSON),
``proposals`` (id → proposal JSON), ``dead`` (``agent:up_to`` → dead letter JSON), ``wakes``
(wake run id → the wake, while its run is on the pool), ``meta`` (``project``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from shelly_dist import events
from shelly_dist.errors import StoreError
from shelly_dist.workspace.models import (
    AgentStatus,
    ChannelMessage,
    DeadLetter,
    InboxEntry,
    Kind,
    WakeBudget,
    WakeLedger,
    for_inbox,
    mentions_in,
    priority_of,
    visible_to,
)
from shelly_dist.workspace.proposals import Proposal, new_proposal, option_id, settle
from shelly_dist.workspace.schedule import Schedule

logger = logging.getLogger(__name__)

DEFAULT_DOCUMENT = "notes.md"
MAX_DOCUMENT = 1 << 20
"""Characters a document may hold: a document goes into every wake prompt (its head,
``workspace.prompt.DOCUMENT_IN_PROMPT``) and is read whole by ``team_doc_read``."""
INLINE_LIMIT = 1200
"""Characters a message may have and still go inline; a longer one becomes a resource."""

RECENT = 50
"""Messages a channel read returns by default (and a wake's prompt shows)."""

TextRule = Callable[[str | None], str]
Listener = Callable[[ChannelMessage, list[str]], Awaitable[None]]
"""Called after a post with the agents whose inbox it lands in (how @mentions wake agents)."""

Observer = Callable[[str, str, dict[str, Any]], None]
"""Told of what happens in the workspace (event kind, agent, data): posts, acks, wakes."""


def resource_id(content: str) -> str:
    """The content address of ``content``: its sha256, in hex."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


class WorkspaceBase(ABC):
    """The workspace of one session. Agents are named by their config name."""

    def __init__(self) -> None:
        self.listeners: list[Listener] = []
        """Told of every post that lands in some inbox (the runtime's wake trigger)."""
        self.observers: list[Observer] = []
        """Told of posts, acks and wakes (the engine turns them into events)."""

    def observe(self, kind: str, agent: str, data: dict[str, Any]) -> None:
        """Tell the observers (never raises into the caller: events are a view, not the truth)."""
        for observer in list(self.observers):
            try:
                observer(kind, agent, data)
            except Exception as exc:  # a broken view must not fail the team's work
                logger.warning("workspace: an observer failed on %s: %s", kind, exc)

    # -- storage primitives -------------------------------------------------------------------

    @abstractmethod
    async def _append(self, fields: dict[str, Any]) -> ChannelMessage:
        """Append a message (``fields`` without ``id``/``timestamp``), giving it the next id."""

    @abstractmethod
    async def _after(self, after: int) -> list[ChannelMessage]:
        """Every message with an id above ``after``, in order."""

    @abstractmethod
    async def cursor(self, agent: str) -> int:
        """The id up to which ``agent`` has acked its inbox (0: nothing yet)."""

    @abstractmethod
    async def _ack(self, agent: str, until: int) -> int:
        """Move ``agent``'s cursor to ``until`` (never back, never past the last message); the new cursor."""

    @abstractmethod
    async def _get(self, table: str, field: str) -> str | None: ...

    @abstractmethod
    async def _all(self, table: str) -> dict[str, str]: ...

    @abstractmethod
    async def _put(self, table: str, field: str, text: str, *, only_new: bool = False) -> bool:
        """Store ``text``; with ``only_new``, only when the field is absent. True when stored."""

    @abstractmethod
    async def _mutate(self, table: str, field: str, rule: TextRule) -> str:
        """Atomically replace the field's text (``None`` when absent) by ``rule``'s result."""

    @abstractmethod
    async def _delete(self, table: str, field: str) -> bool: ...

    @abstractmethod
    async def acquire_wake(self, agent: str, token: str, ttl: float) -> bool:
        """Take ``agent``'s wake lease for ``ttl`` seconds; False while someone else holds it."""

    @abstractmethod
    async def renew_wake(self, agent: str, token: str, ttl: float) -> bool:
        """Extend the lease if ``token`` still holds it."""

    @abstractmethod
    async def release_wake(self, agent: str, token: str) -> None:
        """Give the lease back (only if ``token`` holds it)."""

    @abstractmethod
    async def wake_lease_left(self, agent: str) -> float:
        """Seconds ``agent``'s wake lease has left (0: free)."""

    # -- members ------------------------------------------------------------------------------

    async def join(self, agents: list[str]) -> None:
        """Make ``agents`` members of the team (idempotent)."""
        for agent in agents:
            await self._put("members", agent, "1")

    async def members(self) -> list[str]:
        """The team's agents, sorted."""
        return sorted(await self._all("members"))

    async def set_project(self, text: str) -> None:
        """What the team works on: the first section of every wake's prompt."""
        await self._put("meta", "project", text)

    async def project(self) -> str:
        return await self._get("meta", "project") or ""

    async def request_stop(self) -> None:
        """Ask a ``workflow start`` of this session to end (``shelly workflow stop``)."""
        await self._put("meta", "stop", "1")

    async def stop_requested(self) -> bool:
        return await self._get("meta", "stop") is not None

    # -- the wake budget (runtime/wake.py charges it; one mechanism for both runtimes) ---------

    async def set_wake_budget(self, budget: WakeBudget) -> None:
        """The session's wake budget (a workflow's ``wake_budget:``); the defaults without one."""
        await self._put("meta", "wake-budget", budget.model_dump_json())

    async def wake_budget(self) -> WakeBudget:
        text = await self._get("meta", "wake-budget")
        return WakeBudget.model_validate_json(text) if text else WakeBudget()

    async def wake_ledger(self) -> WakeLedger:
        text = await self._get("meta", "wake-ledger")
        return WakeLedger.model_validate_json(text) if text else WakeLedger()

    async def charge_wake(self, agent: str, *, now: float, user_said: int, scheduled: bool = False) -> str:
        """Count a wake of ``agent`` against the budget, atomically across the pool; returns why it
        must not start ("" when it may). Once paused every wake is refused until the user speaks
        after the pause (``user_said``: the id of the latest message from the user in the wake's
        inbox, 0 for none), which resumes with fresh counts; a user message, or a schedule's
        (``scheduled``), also ends the chain loop detection reads."""
        budget = await self.wake_budget()
        last_id = await self.last_id()
        verdict = ""

        def rule(old: str | None) -> str:
            nonlocal verdict
            ledger = WakeLedger.model_validate_json(old) if old else WakeLedger()
            if ledger.paused and user_said > ledger.paused_at:
                ledger = WakeLedger()
            elif (user_said or scheduled) and not ledger.paused:
                ledger.chain = []
            if ledger.paused:
                verdict = ledger.paused
                return ledger.model_dump_json()
            verdict = ledger.charge(agent, budget, now, last_id)
            return ledger.model_dump_json()

        await self._mutate("meta", "wake-ledger", rule)
        return verdict

    async def mark_pause_told(self) -> bool:
        """True once per pause (the first caller tells the channel and the events)."""
        return await self._put("meta", f"pause-told:{(await self.wake_ledger()).paused_at}", "1", only_new=True)

    async def wakes_paused(self) -> str:
        """Why the session's wakes are paused ("" when they are not)."""
        return (await self.wake_ledger()).paused

    async def set_schedule(self, agent: str, schedule: Schedule) -> None:
        await self._put("meta", f"schedule:{agent}", schedule.model_dump_json())

    async def schedule(self, agent: str) -> Schedule | None:
        raw = await self._get("meta", f"schedule:{agent}")
        return None if raw is None else Schedule.model_validate_json(raw)

    async def set_agents_spec(self, text: str) -> bool:
        """Keep the workflow's agent definitions (JSON) for workers to build its inline agents
        from; set once per session (False when already set), so every worker builds the same."""
        return await self._put("meta", "agents", text, only_new=True)

    async def agents_spec(self) -> str | None:
        return await self._get("meta", "agents")

    async def set_workflow_file(self, path: str) -> None:
        """Name the workflow file the session was started from: a worker running its agents makes
        it a control file of its process too (its ``setup:`` runs at the next ``workflow run``)."""
        await self._put("meta", "workflow_file", path)

    async def workflow_file(self) -> str | None:
        return await self._get("meta", "workflow_file")

    async def set_agent_prompt(self, agent: str, text: str) -> None:
        """Words for ``agent`` alone, added to the project section of its wakes (``prompt.append``)."""
        await self._put("meta", f"prompt:{agent}", text)

    async def agent_prompt(self, agent: str) -> str:
        return await self._get("meta", f"prompt:{agent}") or ""

    # -- channel ------------------------------------------------------------------------------

    async def send(self, sender: str, content: str, *, to: str | None = None, kind: Kind = "message") -> ChannelMessage:
        """Post ``content`` as ``sender``; over :data:`INLINE_LIMIT` characters it is stored as a
        resource and the channel gets a short message keeping its @mentions (smart send)."""
        members = await self.members()
        if to is not None and to not in members and to != "user":
            raise StoreError(f'channel_send: "{to}" is not a member of the team')
        mentions = mentions_in(content, members)
        if len(content) > INLINE_LIMIT:
            rid = await self.resource_create(content)
            tags = " ".join(f"@{m}" for m in mentions)
            content = (f"{tags} " if tags else "") + (
                f'[long message, {len(content)} characters, stored as a resource: resource_read("{rid}")]')
        fields: dict[str, Any] = {"from": sender, "content": content, "mentions": mentions, "kind": kind}
        if to is not None:
            fields["to"] = to
        message = await self._append(fields)
        self.observe(events.CHANNEL_POST, sender, {"id": message.id, "to": to, "mentions": mentions, "kind": kind,
                                                   "content": content[:500]})
        woken = [agent for agent in members if for_inbox(message, agent)]
        if woken:
            for listener in list(self.listeners):
                await listener(message, woken)
        return message

    async def read(self, agent: str | None, *, since: int = 0, limit: int = RECENT) -> list[ChannelMessage]:
        """The last ``limit`` messages after id ``since`` that ``agent`` may see (``None``: all)."""
        messages = [m for m in await self._after(since) if agent is None or visible_to(m, agent)]
        return messages[-limit:] if limit > 0 else messages

    async def last_id(self) -> int:
        """The id of the newest message (0 when the channel is empty)."""
        messages = await self._after(0)
        return messages[-1].id if messages else 0

    # -- inbox --------------------------------------------------------------------------------

    async def inbox(self, agent: str, *, up_to: int | None = None, after: int | None = None) -> list[InboxEntry]:
        """``agent``'s unacked messages (after id ``after`` instead of its cursor, up to id ``up_to``
        when given), with their priority."""
        if after is None:
            after = await self.cursor(agent)
        return [InboxEntry(message=m, priority=priority_of(m)) for m in await self._after(after)
                if for_inbox(m, agent) and (up_to is None or m.id <= up_to)]

    async def ack(self, agent: str, until: int) -> int:
        """Ack ``agent``'s inbox up to message ``until``; atomic, and a cursor never moves back."""
        cursor = await self._ack(agent, until)
        self.observe(events.INBOX_ACK, agent, {"until": until, "cursor": cursor})
        return cursor

    # -- documents ----------------------------------------------------------------------------

    async def doc_read(self, name: str = DEFAULT_DOCUMENT) -> str:
        text = await self._get("docs", name)
        if text is None:
            if name == DEFAULT_DOCUMENT:
                return ""
            raise StoreError(f'team_doc_read: document "{name}" not found')
        return text

    async def doc_list(self) -> list[str]:
        return sorted(await self._all("docs"))

    async def _check_owner(self, agent: str, name: str, origin: str) -> None:
        owner = await self._get("owners", name)
        if owner is not None and owner != agent:
            raise StoreError(f'{origin}: document "{name}" is owned by {owner} (elected); only they may write it')

    async def doc_create(self, agent: str, name: str, content: str = "") -> None:
        _check_size("team_doc_create", name, content)
        if not await self._put("docs", name, content, only_new=True):
            raise StoreError(f'team_doc_create: document "{name}" already exists')

    async def doc_write(self, agent: str, name: str, content: str) -> None:
        _check_size("team_doc_write", name, content)
        await self._check_owner(agent, name, "team_doc_write")
        await self._put("docs", name, content)

    async def doc_append(self, agent: str, name: str, content: str) -> str:
        await self._check_owner(agent, name, "team_doc_append")
        return await self._mutate("docs", name, lambda old: _check_size("team_doc_append", name, (old or "") + content))

    async def doc_owner(self, name: str) -> str | None:
        return await self._get("owners", name)

    # -- resources ----------------------------------------------------------------------------

    async def resource_create(self, content: str) -> str:
        """Store ``content`` once under its sha256; returns that id."""
        rid = resource_id(content)
        await self._put("resources", rid, content, only_new=True)
        return rid

    async def resource_read(self, rid: str) -> str:
        text = await self._get("resources", rid)
        if text is None:
            raise StoreError(f'resource_read: resource "{rid}" not found')
        return text

    # -- status -------------------------------------------------------------------------------

    async def status_set(self, agent: str, state: Literal["idle", "running", "stopped"], task: str = "") -> AgentStatus:
        status = AgentStatus(state=state, task=task, updated_at=time.time())
        await self._put("status", agent, status.model_dump_json())
        return status

    async def statuses(self) -> dict[str, AgentStatus]:
        raw = await self._all("status")
        return {agent: AgentStatus.model_validate_json(raw[agent]) for agent in sorted(raw)}

    # -- proposals ----------------------------------------------------------------------------

    async def propose(self, creator: str, **spec: Any) -> Proposal:
        """Create a proposal (see :func:`new_proposal`) and announce it to every other agent."""
        members = await self.members()
        proposal = new_proposal(creator=creator, team_size=len(members), **spec)
        await self._put("proposals", proposal.id, proposal.model_dump_json(), only_new=True)
        others = " ".join(f"@{m}" for m in members if m != creator)
        options = ", ".join(o.label for o in proposal.options)
        await self.send(creator, f"{others} New {proposal.type} proposal {proposal.id}: {proposal.title} "
                                 f"(options: {options}). Vote with team_vote.".lstrip())
        return proposal

    async def _change(self, pid: str, origin: str, change: Callable[[Proposal], None]) -> Proposal:
        """Apply ``change`` to an active proposal, then settle it; announce a resolution once."""
        resolved: list[bool] = [False]

        def rule(old: str | None) -> str:
            if old is None:
                raise StoreError(f'{origin}: proposal "{pid}" not found')
            proposal = Proposal.model_validate_json(old)
            was_active = proposal.status == "active"
            change(proposal)
            resolved[0] = settle(proposal, time.time()) and was_active
            return proposal.model_dump_json()

        proposal = Proposal.model_validate_json(await self._mutate("proposals", pid, rule))
        if resolved[0]:
            await self._announce(proposal)
        return proposal

    async def _announce(self, proposal: Proposal) -> None:
        if proposal.winner is not None and proposal.document:
            await self._put("owners", proposal.document, proposal.label(proposal.winner))
        voters = " ".join(f"@{v}" for v in sorted(proposal.votes))
        outcome = (f"Winner: {proposal.label(proposal.winner)}" if proposal.winner is not None
                   else f"No winner ({proposal.resolution} not reached)")
        await self.send("system", f"Proposal {proposal.id} resolved! {outcome} {voters}".rstrip())

    async def vote(self, agent: str, pid: str, choice: str) -> Proposal:
        """Cast or change ``agent``'s vote on an active proposal."""
        if agent not in await self.members():
            raise StoreError(f"team_vote: {agent} is not a member of the team")

        def cast(proposal: Proposal) -> None:
            if proposal.status != "active":
                raise StoreError(f'team_vote: proposal "{pid}" is {proposal.status}')
            proposal.votes[agent] = option_id(proposal, choice)

        return await self._change(pid, "team_vote", cast)

    async def proposal(self, pid: str) -> Proposal:
        """The proposal (settled first if it has expired); resolved ones stay readable."""
        return await self._change(pid, "team_proposal_status", lambda _p: None)

    async def proposals(self) -> list[Proposal]:
        """Every proposal, expired ones settled, oldest first."""
        found = [await self.proposal(pid) for pid in await self._all("proposals")]
        return sorted(found, key=lambda p: p.created_at)

    async def cancel(self, agent: str, pid: str) -> Proposal:
        def stop(proposal: Proposal) -> None:
            if proposal.creator != agent:
                raise StoreError(f'team_proposal_cancel: only {proposal.creator} (the creator) may cancel "{pid}"')
            if proposal.status != "active":
                raise StoreError(f'team_proposal_cancel: proposal "{pid}" is {proposal.status}')
            proposal.status = "cancelled"

        return await self._change(pid, "team_proposal_cancel", stop)

    async def idle(self) -> bool:
        """Whether the team has nothing to do: no agent running, every inbox empty, no active
        proposal (a workflow run ends once this holds for its debounce)."""
        if any(s.state == "running" for s in (await self.statuses()).values()):
            return False
        for agent in await self.members():
            if await self.inbox(agent):
                return False
        return not any(p.status == "active" for p in await self.proposals())

    # -- wakes in flight (the pool's: a wake's run ends on whichever worker finishes it) --------

    async def save_wake(self, run_id: str, record: str) -> None:
        await self._put("wakes", run_id, record)

    async def saved_wake(self, run_id: str) -> str | None:
        return await self._get("wakes", run_id)

    async def forget_wake(self, run_id: str) -> None:
        await self._delete("wakes", run_id)

    async def set_retry(self, agent: str, attempt: int, error: str) -> None:
        """A failed wake of ``agent`` asked for attempt ``attempt``: kept so that a wake sent again
        for a lost retry (the sweeper) carries on counting instead of starting over."""
        await self._put("meta", f"retry:{agent}", json.dumps({"attempt": attempt, "error": error}))

    async def retry_of(self, agent: str) -> tuple[int, str]:
        """(attempt, last error) of ``agent``'s pending retry; (1, "") when none."""
        raw = await self._get("meta", f"retry:{agent}")
        if raw is None:
            return 1, ""
        data = json.loads(raw)
        return int(data["attempt"]), str(data["error"])

    async def clear_retry(self, agent: str) -> None:
        await self._delete("meta", f"retry:{agent}")

    # -- dead letters -------------------------------------------------------------------------

    async def dead_letter(self, letter: DeadLetter) -> None:
        await self._put("dead", f"{letter.agent}:{letter.up_to}", letter.model_dump_json())

    async def dead_letters(self) -> list[DeadLetter]:
        raw = await self._all("dead")
        return sorted((DeadLetter.model_validate_json(v) for v in raw.values()), key=lambda d: d.failed_at)

    async def drop_dead_letter(self, agent: str, up_to: int) -> bool:
        """Forget a dead letter once a replay has handled its messages."""
        return await self._delete("dead", f"{agent}:{up_to}")


def _check_size(origin: str, name: str, text: str) -> str:
    """``text`` when a document may hold it, else the tool's error naming the limit."""
    if len(text) > MAX_DOCUMENT:
        raise StoreError(f'{origin}: document "{name}" would be {len(text):,} characters; a document holds at '
                         f"most {MAX_DOCUMENT:,}: keep it shorter or split it into several documents")
    return text
