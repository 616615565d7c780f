"""A team as an agent: Shelly's reactor, whose coordinator is the team's "model".

A team (config ``teams:``) is an :class:`Agent` whose completer is a :class:`Reactor`. Each
"model call" of the team is one round of its coordinator: it reads the shared conversation out
of the team's own chat (the task, then every member output, which come back as ``delegate``
results), picks who acts next — in order (``sequential``), ``round_robin`` for ``rounds`` passes,
or an LLM answering ``{"members": [0, 2], "done": false, "reasoning": "…"}`` — and answers
either with a ``delegate`` call to those members (their turns run concurrently, their outputs
come back in roster order) or, when the team is done, with its reply.

Because a round is a model reply with a ``delegate`` call, the team needs nothing of its own
from a runtime: embedded its members are asyncio tasks; on the pool each member turn is a run on
a worker and the team suspends between rounds holding no worker; its decisions are journaled as
its replies, so a redelivered step never asks the coordinator twice for one round. A team is
registered like an agent, so a team can be a member of another team.

Each member keeps a private chat across rounds: its turn is a child run that continues the chat
of its previous turn (``ChildRequest.history``) with the shared messages it has not seen — the
other members' outputs since its last turn, as user input — so its own tool calls stay in its
chat and nobody else's.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shelly_dist.chats import Chat, Message, Role, ToolCall
from shelly_dist.errors import AgentError
from shelly_dist.models import Completer, ToolSpec, Usage

logger = logging.getLogger(__name__)

SEQUENTIAL, ROUND_ROBIN, LLM = "sequential", "round_robin", "llm"
CORRECTION = ('Your answer was not a valid decision ({why}). Answer only with JSON: {{"members": [indexes of '
              'the roster], "done": true|false, "reasoning": "why"}}.')


@dataclass(frozen=True)
class Member:
    name: str
    description: str = ""


@dataclass(frozen=True)
class Turn:
    """One entry of the shared conversation: who said it (``user`` for the task) and what."""

    speaker: str
    text: str


@dataclass(frozen=True)
class Decision:
    members: list[int]
    done: bool = False
    reasoning: str = ""
    reply: str = ""


def parse_decision(raw: str, roster: int) -> Decision:
    """The coordinator's answer as a decision; ``ValueError`` says what is wrong with it."""
    text = raw.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    members = data.get("members", [])
    if not isinstance(members, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in members):
        raise ValueError('"members" must be a list of roster indexes')
    if bad := [i for i in members if not 0 <= i < roster]:
        raise ValueError(f"member index {bad[0]} out of range 0..{roster - 1}")
    done = bool(data.get("done", False))
    if not done and not members:
        raise ValueError("no member chosen and not done")
    return Decision(sorted(set(members)), done, str(data.get("reasoning", "")), str(data.get("reply", "") or ""))


def conversation(chat: Sequence[Message]) -> list[Turn]:
    """The shared conversation held in a team's chat: the task, then each member's output."""
    turns: list[Turn] = []
    for m in chat:
        if m.role == Role.USER and not turns[1:]:
            turns.append(Turn("user", m.text_content()))
        elif m.role == Role.TOOL:
            for result in m.tool_results():
                try:
                    entries = json.loads(result.content)
                except json.JSONDecodeError:
                    continue
                for e in entries if isinstance(entries, list) else []:
                    turns.append(Turn(str(e.get("agent", "")), str(e.get("result") or f"(failed: {e.get('error')})")))
    return turns


def last_turn(messages: Sequence[Message], member: int) -> tuple[str, int, int]:
    """Where roster member ``member`` last acted in a team's chat: its turn key
    (``<iteration>:<call>:<index>``, "" before its first turn), where that round's outputs begin
    in the shared conversation, and where its own output is: every other output from that round
    on is what it has not seen."""
    key, start, own, iteration = "", 0, -1, 0
    for pos, m in enumerate(messages):
        if m.role != Role.ASSISTANT:
            continue
        iteration += 1
        chosen = (m.metadata.get("reactor") or {}).get("members") or []
        calls = m.tool_calls()
        if member in chosen and calls:
            index = chosen.index(member)
            start = len(conversation(messages[:pos]))
            key, own = f"{iteration}:{calls[0].id}:{index}", start + index
    return key, start, own


_TAG = re.compile(r"^(\s*)(\[[^\]\n]*\]:)", re.MULTILINE)
"""A line of a turn's text that would read as another speaker's turn (``[user]: …``)."""


def transcript(turns: Sequence[Turn]) -> str:
    """The turns as ``[speaker]: text`` blocks. A member's text cannot forge a turn: a line of it
    that starts like one (``[user]: …``) is escaped (``\\[user]: …``)."""
    return "\n\n".join(f"[{t.speaker}]: {_TAG.sub(_escaped, t.text)}" for t in turns)


def _escaped(tag: re.Match[str]) -> str:
    return tag.group(1) + "\\" + tag.group(2)


class Reactor:
    """A team's completer: one coordinator round per call (see the module's docstring)."""

    def __init__(self, team: str, members: Sequence[Member], *, kind: str = SEQUENTIAL, rounds: int = 1,
                 max_rounds: int = 6, model: Completer | None = None) -> None:
        if kind == LLM and model is None:
            raise AgentError(f"reactor {team}: an llm coordinator needs a provider")
        self.team = team
        self.members = list(members)
        self.kind = kind
        self.rounds = max(1, rounds)
        self.max_rounds = max_rounds
        self.model = model

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        messages = chat.view()
        decided = [m for m in messages if m.role == Role.ASSISTANT]
        turns = conversation(messages)
        last = self._last_output(messages)
        if self.kind == LLM:
            if len(decided) >= self.max_rounds:
                logger.warning("reactor %s: max_rounds %d reached; ending with the conversation so far",
                               self.team, self.max_rounds)
                return self._reply(transcript(turns[1:]) + f"\n\n[reactor {self.team}: max_rounds "
                                   f"{self.max_rounds} reached]", warning="max_rounds")
            decision, asked, usage = await self._ask(messages)
            if decision.done:
                return usage.attach(self._reply(decision.reply or last, reasoning=decision.reasoning, **asked))
            return usage.attach(self._round(len(decided), decision.members, messages, reasoning=decision.reasoning,
                                            **asked))
        total = len(self.members) * (self.rounds if self.kind == ROUND_ROBIN else 1)
        if len(decided) >= total:
            return self._reply(last)
        return self._round(len(decided), [len(decided) % len(self.members)], messages)

    @staticmethod
    def _last_output(messages: Sequence[Message]) -> str:
        """The last member output of the last round (the roster's last one of that round)."""
        turns = conversation([m for m in messages if m.role == Role.TOOL][-1:])
        return turns[-1].text if turns else ""

    def _reply(self, text: str, **metadata: Any) -> Message:
        return Message(sender=self.team, role=Role.ASSISTANT, parts=Message.text("", Role.ASSISTANT, text).parts,
                       metadata={"reactor": metadata} if metadata else {})

    def _round(self, n: int, chosen: list[int], messages: Sequence[Message], **metadata: Any) -> Message:
        """Round ``n``: a ``delegate`` call to the chosen members, in roster order. A member's
        turn continues its private chat (its previous turn's) with the shared messages it has not
        seen: the others' outputs since its last turn."""
        tasks = []
        turns = conversation(messages)
        for i in chosen:
            name = self.members[i].name
            turn, start, own = last_turn(messages, i)
            new = [t for k, t in enumerate(turns) if k >= start and k != own] if turn else turns
            if turn:
                task = (f"The team's conversation since your last turn:\n\n{transcript(new)}\n\n"
                        "Contribute your part now.")
            else:
                task = (f'You are "{name}", a member of the team "{self.team}". The team\'s conversation so far:'
                        f"\n\n{transcript(new)}\n\nContribute your part now.")
            tasks.append({"agent": name, "context": "", "task": task, "turn": turn})
        call = ToolCall(id=f"{self.team}-round-{n + 1}", name="delegate", arguments=json.dumps({"tasks": tasks}))
        text = ", ".join(self.members[i].name for i in chosen)
        return Message(sender=self.team, role=Role.ASSISTANT,
                       parts=[*Message.text("", Role.ASSISTANT, f"round {n + 1}: {text}").parts, call],
                       metadata={"reactor": {"members": chosen, **metadata}})

    # -- the LLM coordinator ------------------------------------------------------------------

    def roster(self) -> str:
        lines = "\n".join(f'[{i}] "{m.name}" — {m.description}' for i, m in enumerate(self.members))
        return (f'You coordinate the team "{self.team}". Its members:\n{lines}\n\nEach round, choose who acts next '
                'given the conversation. Answer only with JSON: {"members": [indexes], "done": false, '
                '"reasoning": "why"}; set "done": true (optionally with "reply") when the task is complete.')

    def _coordinator_chat(self, messages: Sequence[Message]) -> Chat:
        """The coordinator's own chat, rebuilt from the team's: per past round the conversation it
        had not seen and its answers (a corrected one too), so it reads the same as when asked."""
        chat = Chat()
        chat.append(Message.text("coordinator", Role.SYSTEM, self.roster()))
        seen = 0
        for i, m in enumerate(messages):
            if m.role != Role.ASSISTANT:
                continue
            turns = conversation(messages[:i])
            chat.append(Message.text("user", Role.USER, transcript(turns[seen:]) or "(nothing new)"))
            seen = len(turns)
            raws = (m.metadata.get("reactor") or {}).get("raws") or [m.text_content()]
            for raw, why in zip(raws[:-1], (m.metadata.get("reactor") or {}).get("whys", []), strict=False):
                chat.append(Message.text("coordinator", Role.ASSISTANT, raw))
                chat.append(Message.text("user", Role.USER, CORRECTION.format(why=why)))
            chat.append(Message.text("coordinator", Role.ASSISTANT, raws[-1]))
        turns = conversation(messages)
        chat.append(Message.text("user", Role.USER, transcript(turns[seen:]) or "(nothing new)"))
        return chat

    async def _ask(self, messages: Sequence[Message]) -> tuple[Decision, dict[str, Any], Usage]:
        """Ask the coordinator; one correction prompt for an invalid answer, then fail. The usage
        of every answer is the round's (the team's run counts it as its model call's)."""
        assert self.model is not None
        chat = self._coordinator_chat(messages)
        raws: list[str] = []
        whys: list[str] = []
        usage = Usage()
        for _attempt in range(2):
            answer = await self.model.complete(chat, [])
            usage = usage + Usage.of(answer)
            raw = answer.text_content()
            raws.append(raw)
            try:
                decision = parse_decision(raw, len(self.members))
            except ValueError as exc:
                whys.append(str(exc))
                chat.append(Message.text("coordinator", Role.ASSISTANT, raw))
                chat.append(Message.text("user", Role.USER, CORRECTION.format(why=exc)))
                continue
            return decision, {"raws": raws, "whys": whys}, usage
        failed = AgentError(f"reactor {self.team}: coordinator gave no valid decision: {whys[-1]}")
        failed.usage = usage  # type: ignore[attr-defined]  # the calls were made: the run counts them
        raise failed
