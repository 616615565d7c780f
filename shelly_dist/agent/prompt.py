"""The system prompt: XML-tagged sections in Shelly's fixed order, each only when it applies.

Order: completion_protocol (depth > 0), handoff_protocol (depth > 0 and the ``handoff``
tool offered), interaction_protocol (depth > 0 and ``request_input`` offered),
interactive_delegation_protocol (the agent may delegate with ``interaction_mode: interactive``),
notes_protocol (a ``list_notes`` tool),
instructions, behavioral_constraints (default on), project_context, skills (inline),
available_skills (on demand), available_agents (only when the agent may still delegate; never
itself, compared case-insensitively on the config name), then extra sections (the blackboard
snapshot) and identity last.
The prompt is rebuilt on every run, so a changed registry or blackboard shows up on the next turn.

A deliberate difference from Shelly (SHELLY-compat): Shelly puts ``<identity>`` ("You are
{instance name}. {description}") first. Here it comes last, after the blackboard snapshot, so
that the prompts of sibling instances of one agent (``worker-what-1`` … ``worker-what-16``) are
byte-identical up to their own tail: a server's prefix cache (llama.cpp, vLLM, OpenAI's automatic
caching, Anthropic's ``cache_control``) then serves the shared sections to every sibling after the
first instead of evaluating them again. Every other section keeps Shelly's order and text.
:func:`prompt_parts` gives the two parts, which the run sends as two text parts of the system
message. Anthropic marks each a cache breakpoint; OpenAI-compatible servers get the first as the
system prompt and the second at the head of the first user turn, because their chat templates
render the tools after the system prompt and the instance's own part would end the shared prefix
before them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from shelly_dist.agent.entry import Entry


class SkillLike(Protocol):
    """What the prompt needs of a skill (``shelly_dist.skills.Skill`` satisfies it)."""

    name: str
    description: str
    content: str


COMPLETION_PROTOCOL = """You are working on a task delegated to you by another agent.
When you have finished, call the task_complete tool with status "completed" and a summary of what you did
(and files_modified, tests_run, caveats when relevant). If you cannot finish, call task_complete with
status "failed" and explain why in the summary and caveats. Calling task_complete ends your work."""

HANDOFF_PROTOCOL = """You have a handoff tool available. Use it to transfer control to a peer agent when:
- The task requires expertise outside your capabilities.
- Another agent is clearly better suited for the remaining work.
Do NOT use handoff when:
- You can complete the task yourself (use task_complete instead).
- You want to delegate a sub-task (that's what the delegate tool is for).
When handing off, provide a thorough context summary so the peer can continue without re-exploring."""
"""Shelly's text word for word (``prompt.go``)."""

INTERACTION_PROTOCOL = """You have a request_input tool available to ask the parent for clarification.
Use it when you need information that was not provided in the delegation context and cannot be obtained \
through your own tools.
Be specific in your questions. The parent will answer based on its context.
Do NOT use request_input for information you can find yourself."""
"""Shelly's text word for word (``prompt.go``)."""

NOTES_PROTOCOL = """You have a notes toolbox (write_note, read_note, list_notes). Use notes to keep durable
progress records: check list_notes before starting, and write a note when you learn something other agents
or your future self will need."""

BEHAVIORAL_CONSTRAINTS = """- Do not repeat the same action more than twice; if it did not work, change your approach.
- Read files before editing them.
- Prefer small, verifiable steps over large speculative changes.
- Verify your work (run tests, re-read output) before reporting success.
- When a tool returns an error, read it and adapt instead of retrying blindly.
- Stay within the scope of your task; do not make unrelated changes.
- Delegate only work that another agent is better suited for, and give it full context.
- Report failures honestly, with what you tried and what is left.
- Keep your final answer concise and specific."""

INTERACTIVE_DELEGATION_PROTOCOL = """You can delegate tasks with mode "interactive" when children may need your input.
Interactive delegation returns immediately with any pending questions from children.
Use answer_delegation_questions to respond to all pending questions in a single call.
Each answer call blocks until every answered child either asks a follow-up or completes.
Use "interactive" mode when the task may need clarification you can provide.
Use default mode (no mode field) for self-contained tasks where children have all context."""

CONTEXT_PREAMBLE = (
    "Treat this as your own knowledge of the project. It was curated for you; rely on it before "
    "exploring."
)


def _section(tag: str, body: str) -> str:
    return f"<{tag}>\n{body.strip()}\n</{tag}>"


def _agent_line(e: Entry) -> str:
    line = f"- **{e.name}**: {e.description}"
    if e.skills:
        line += f" [skills: {', '.join(e.skills)}]"
    if e.estimated_cost:
        line += f" [cost: {e.estimated_cost}]"
    return line


@dataclass
class PromptInputs:
    """Everything the system prompt is made from."""

    name: str
    config_name: str
    description: str = ""
    instructions: str = ""
    depth: int = 0
    can_delegate: bool = False
    agents: Sequence[Entry] = ()
    skills: Sequence[SkillLike] = ()
    context: str = ""
    has_notes: bool = False
    behavioral_hints: bool = True
    can_handoff: bool = False
    has_interaction: bool = False
    interactive_delegation: bool = False
    extra_sections: Sequence[str] = field(default_factory=list)


def prompt_parts(p: PromptInputs) -> tuple[str, str]:
    """The prompt in two parts: what every instance of the agent shares, and its own tail.

    The shared part is Shelly's sections in Shelly's order without ``<identity>``; the tail holds
    the extra sections (the blackboard snapshot, which changes as the run goes) and then
    ``<identity>`` with the instance name. ``"".join`` of the two is the prompt.
    """
    shared: list[str] = []
    if p.depth > 0:
        shared.append(_section("completion_protocol", COMPLETION_PROTOCOL))
        if p.can_handoff:
            shared.append(_section("handoff_protocol", HANDOFF_PROTOCOL))
        if p.has_interaction:
            shared.append(_section("interaction_protocol", INTERACTION_PROTOCOL))
    if p.interactive_delegation:
        shared.append(_section("interactive_delegation_protocol", INTERACTIVE_DELEGATION_PROTOCOL))
    if p.has_notes:
        shared.append(_section("notes_protocol", NOTES_PROTOCOL))
    if p.instructions.strip():
        shared.append(_section("instructions", p.instructions))
    if p.behavioral_hints:
        shared.append(_section("behavioral_constraints", BEHAVIORAL_CONSTRAINTS))
    if p.context.strip():
        shared.append(_section("project_context", f"{CONTEXT_PREAMBLE}\n\n{p.context.strip()}"))
    inline = [s for s in p.skills if not s.description]
    on_demand = [s for s in p.skills if s.description]
    if inline:
        shared.append(_section("skills", "\n\n".join(f"### {s.name}\n{s.content.strip()}" for s in inline)))
    if on_demand:
        lines = [f"- **{s.name}**: {s.description}" for s in on_demand]
        lines.append("\nWhen a skill is relevant, call the load_skill tool with its name to read it.")
        shared.append(_section("available_skills", "\n".join(lines)))
    if p.can_delegate:
        others = [e for e in p.agents if e.name.lower() != p.config_name.lower()]
        if others:
            body = "\n".join(_agent_line(e) for e in others)
            body += "\n\nUse the delegate tool to hand tasks to these agents; they run in parallel."
            shared.append(_section("available_agents", body))
    own = [s for s in p.extra_sections if s]
    own.append(_section("identity", f"You are {p.name}. {p.description}".strip()))
    head = "\n\n".join(shared)
    return head, ("\n\n" if head else "") + "\n\n".join(own)


def build_system_prompt(p: PromptInputs) -> str:
    """Assemble the prompt; see the module docstring for the order."""
    return "".join(prompt_parts(p))
