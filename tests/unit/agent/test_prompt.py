"""The system prompt (behaviours 13–18): which sections appear, what they hold, and their order."""

from __future__ import annotations

import re

import pytest

from shelly_dist.agent import Agent, AgentOptions, Entry, Registry, Run
from shelly_dist.agent.prompt import PromptInputs, build_system_prompt, prompt_parts
from shelly_dist.chats import Message, Role
from shelly_dist.providers import ScriptedCompleter
from shelly_dist.skills import Skill
from shelly_dist.tools import Tool, ToolBox

ORDER = [
    "completion_protocol",
    "handoff_protocol",
    "interaction_protocol",
    "interactive_delegation_protocol",
    "notes_protocol",
    "instructions",
    "behavioral_constraints",
    "project_context",
    "skills",
    "available_skills",
    "available_agents",
    "identity",
]
"""Shelly's order, with ``identity`` moved last (SHELLY-compat: siblings share the prefix)."""


def section(prompt: str, tag: str) -> str | None:
    """The body of ``<tag>…</tag>``, or None when the section is absent."""
    found = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", prompt, re.DOTALL)
    return found.group(1) if found else None


def tags(prompt: str) -> list[str]:
    return re.findall(r"^<([a-z_]+)>$", prompt, re.MULTILINE)


def agent(
    name: str = "helper",
    description: str = "A helpful bot.",
    instructions: str = "",
    **options: object,
) -> Agent:
    return Agent(name, description, instructions, completer=ScriptedCompleter(["ok"]), options=AgentOptions(**options))


def team(*names: str, **entry_fields: object) -> Registry:
    reg = Registry()
    for n in names:
        reg.register(n, f"the {n}", lambda n=n: agent(n, max_delegation_depth=2), **entry_fields)
    return reg


# -- identity, instructions, context (13, 15) -----------------------------------------------------


def test_identity_names_the_agent_and_its_description() -> None:
    prompt = agent("helper", "A helpful bot.", "Always answer in French.").system_prompt()
    assert section(prompt, "identity") == "You are helper. A helpful bot."
    assert section(prompt, "instructions") == "Always answer in French."


def test_identity_uses_the_instance_name_of_a_spawned_agent() -> None:
    reg = team("coder")
    child = reg.spawn("coder", 1)
    child.name = "coder-refactor-1"
    assert section(child.system_prompt(), "identity") == "You are coder-refactor-1. A helpful bot."


def test_instructions_section_is_absent_without_instructions() -> None:
    assert section(agent(instructions="  ").system_prompt(), "instructions") is None


def test_project_context_has_the_preamble_and_the_context() -> None:
    body = section(agent(context="The repo uses tabs.").system_prompt(), "project_context")
    assert body is not None
    assert "Treat this as your own knowledge" in body
    assert body.endswith("The repo uses tabs.")


def test_project_context_is_absent_without_context() -> None:
    assert section(agent().system_prompt(), "project_context") is None


# -- skills (14) -------------------------------------------------------------------------------------


def test_skill_without_description_is_inlined_with_its_content() -> None:
    prompt = agent(skills=[Skill(name="style", content="Use four spaces.")]).system_prompt()
    assert section(prompt, "skills") == "### style\nUse four spaces."
    assert section(prompt, "available_skills") is None


def test_skill_with_description_is_listed_on_demand_without_its_body() -> None:
    skill = Skill(name="deploy", description="How to deploy", content="SECRET DEPLOY STEPS")
    prompt = agent(skills=[skill]).system_prompt()
    body = section(prompt, "available_skills")
    assert body is not None
    assert "- **deploy**: How to deploy" in body
    assert "load_skill" in body
    assert "SECRET DEPLOY STEPS" not in prompt
    assert section(prompt, "skills") is None


def test_mixed_skills_split_between_inline_and_on_demand() -> None:
    skills = [Skill(name="style", content="Tabs."), Skill(name="deploy", description="Ship it", content="STEPS")]
    prompt = agent(skills=skills).system_prompt()
    assert section(prompt, "skills") == "### style\nTabs."
    body = section(prompt, "available_skills")
    assert body is not None and "- **deploy**: Ship it" in body and "style" not in body


# -- available agents (16) ------------------------------------------------------------------------


def test_available_agents_lists_the_others_but_never_itself() -> None:
    reg = team("boss", "worker")
    body = section(reg.spawn("boss").system_prompt(), "available_agents")
    assert body is not None
    assert "**worker**" in body
    assert "**boss**" not in body


def test_available_agents_excludes_itself_case_insensitively() -> None:
    reg = team("Boss", "boss", "worker")
    body = section(reg.spawn("Boss").system_prompt(), "available_agents")
    assert body is not None
    assert "**worker**" in body
    assert "boss" not in body.lower()


def test_available_agents_excludes_by_config_name_not_instance_name() -> None:
    reg = team("coder", "reviewer")
    child = reg.spawn("coder", 1)
    child.name = "coder-refactor-1"
    body = section(child.system_prompt(), "available_agents")
    assert body is not None
    assert "**reviewer**" in body and "**coder**" not in body


def test_available_agents_is_absent_when_max_delegation_depth_is_zero() -> None:
    reg = team("worker")
    boss = agent("boss", max_delegation_depth=0)
    boss.set_registry(reg)
    assert section(boss.system_prompt(), "available_agents") is None


@pytest.mark.parametrize("depth", [2, 3])
def test_available_agents_is_absent_at_or_beyond_max_depth(depth: int) -> None:
    reg = team("boss", "worker")
    assert section(reg.spawn("boss", depth).system_prompt(), "available_agents") is None


def test_available_agents_is_present_below_max_depth() -> None:
    reg = team("boss", "worker")
    assert section(reg.spawn("boss", 1).system_prompt(), "available_agents") is not None


def test_available_agents_is_absent_without_a_registry() -> None:
    assert section(agent(max_delegation_depth=3).system_prompt(), "available_agents") is None


def test_available_agent_line_shows_skills_and_cost() -> None:
    reg = team("boss")
    reg.register("worker", "does work", lambda: agent("worker"), skills=["a", "b"], estimated_cost="x")
    body = section(reg.spawn("boss").system_prompt(), "available_agents")
    assert body is not None
    assert "- **worker**: does work [skills: a, b] [cost: x]" in body.splitlines()


def test_available_agents_follow_the_registry_sorted_by_name() -> None:
    reg = team("boss", "zed", "amy")
    body = section(reg.spawn("boss").system_prompt(), "available_agents")
    assert body is not None
    assert body.index("**amy**") < body.index("**zed**")


# -- protocols (17, 18) -------------------------------------------------------------------------


def test_completion_protocol_appears_only_below_the_top_level() -> None:
    reg = team("coder")
    top, child = reg.spawn("coder", 0), reg.spawn("coder", 1)
    assert section(top.system_prompt(), "completion_protocol") is None
    body = section(child.system_prompt(), "completion_protocol")
    assert body is not None and "task_complete" in body


GO_HANDOFF_PROTOCOL = """You have a handoff tool available. Use it to transfer control to a peer agent when:
- The task requires expertise outside your capabilities.
- Another agent is clearly better suited for the remaining work.
Do NOT use handoff when:
- You can complete the task yourself (use task_complete instead).
- You want to delegate a sub-task (that's what the delegate tool is for).
When handing off, provide a thorough context summary so the peer can continue without re-exploring."""

GO_INTERACTION_PROTOCOL = (
    "You have a request_input tool available to ask the parent for clarification.\n"
    "Use it when you need information that was not provided in the delegation context "
    "and cannot be obtained through your own tools.\n"
    "Be specific in your questions. The parent will answer based on its context.\n"
    "Do NOT use request_input for information you can find yourself."
)


def test_handoff_protocol_appears_below_the_top_level_when_handoffs_are_allowed_with_shellys_text() -> None:
    reg = Registry()
    reg.register("coder", "c", lambda: agent("coder", max_handoffs=2))
    assert section(reg.spawn("coder", 1).system_prompt(), "handoff_protocol") == GO_HANDOFF_PROTOCOL
    assert section(reg.spawn("coder", 0).system_prompt(), "handoff_protocol") is None


def test_handoff_protocol_is_absent_without_handoffs_or_without_a_registry() -> None:
    reg = Registry()
    reg.register("coder", "c", lambda: agent("coder", max_handoffs=0))
    assert section(reg.spawn("coder", 1).system_prompt(), "handoff_protocol") is None
    alone = agent("coder", max_handoffs=2)
    alone.depth = 1
    assert section(alone.system_prompt(), "handoff_protocol") is None


async def _answer(question: object) -> str:
    return "an answer"


def test_interaction_protocol_appears_below_the_top_level_when_request_input_is_wired_with_shellys_text() -> None:
    child = agent("coder", request_input=_answer)
    child.depth = 1
    assert section(child.system_prompt(), "interaction_protocol") == GO_INTERACTION_PROTOCOL
    top = agent("coder", request_input=_answer)
    assert section(top.system_prompt(), "interaction_protocol") is None
    unwired = agent("coder")
    unwired.depth = 1
    assert section(unwired.system_prompt(), "interaction_protocol") is None


async def test_a_delegated_child_is_told_its_interaction_protocol_but_not_handoff_without_handoffs() -> None:
    reg = Registry()
    lead_script = ScriptedCompleter([{"tool_calls": [{"name": "delegate", "arguments": {
        "tasks": [{"agent": "coder", "task": "code it", "context": "ctx"}]}}]}, "done"])
    child_script = ScriptedCompleter(["coded"])
    reg.register("lead", "l", lambda: Agent("lead", completer=lead_script,
                                           options=AgentOptions(max_delegation_depth=1)))
    reg.register("coder", "c", lambda: Agent("coder", completer=child_script))
    lead = reg.spawn("lead", 0)
    lead.set_registry(reg)
    await lead.run("go")
    child_prompt = child_script.requests[0].messages[0].text_content()
    assert section(child_prompt, "interaction_protocol") == GO_INTERACTION_PROTOCOL
    assert section(child_prompt, "handoff_protocol") is None
    assert section(lead.chat.system_prompt(), "interaction_protocol") is None


async def _prompt_after_one_step(a: Agent) -> str:
    run = Run.start(a, [Message.text("user", Role.USER, "hi")])
    await run.step()
    return a.chat.system_prompt()


async def test_notes_protocol_appears_when_a_list_notes_tool_is_present() -> None:
    async def handler(arguments: str) -> str:
        return "[]"

    a = agent()
    a.add_toolboxes(ToolBox([Tool("list_notes", "list notes", {"type": "object"}, handler)]))
    assert section(await _prompt_after_one_step(a), "notes_protocol") is not None


async def test_notes_protocol_is_absent_without_a_list_notes_tool() -> None:
    assert section(await _prompt_after_one_step(agent()), "notes_protocol") is None


def test_behavioral_constraints_are_on_by_default_with_shellys_heuristics() -> None:
    body = section(agent().system_prompt(), "behavioral_constraints")
    assert body is not None
    assert "Do not repeat the same action more than twice" in body
    assert "Read files before editing them" in body
    assert len(body.splitlines()) == 9


def test_behavioral_constraints_are_absent_when_hints_are_disabled() -> None:
    assert section(agent(behavioral_hints=False).system_prompt(), "behavioral_constraints") is None


# -- order ------------------------------------------------------------------------------------------


def test_sections_follow_shellys_order() -> None:
    prompt = build_system_prompt(
        PromptInputs(
            name="coder-x-1",
            config_name="coder",
            description="d",
            instructions="i",
            depth=1,
            can_delegate=True,
            agents=[Entry(name="coder"), Entry(name="reviewer", description="r")],
            skills=[Skill(name="inline", content="c"), Skill(name="lazy", description="l", content="c2")],
            context="ctx",
            has_notes=True,
            can_handoff=True,
            has_interaction=True,
            interactive_delegation=True,
        )
    )
    assert tags(prompt) == ORDER


def test_extra_sections_come_after_the_shared_sections_and_before_identity() -> None:
    prompt = build_system_prompt(
        PromptInputs(
            name="a",
            config_name="a",
            context="ctx",
            skills=[Skill(name="s", content="c")],
            extra_sections=["<shared_state>\nk=v\n</shared_state>", ""],
        )
    )
    assert tags(prompt) == ["behavioral_constraints", "project_context", "skills", "shared_state", "identity"]


def test_minimal_prompt_has_identity_and_behavioral_constraints_only() -> None:
    prompt = build_system_prompt(PromptInputs(name="a", config_name="a"))
    assert tags(prompt) == ["behavioral_constraints", "identity"]
    assert section(prompt, "identity") == "You are a."


def test_can_delegate_with_only_itself_registered_has_no_available_agents() -> None:
    prompt = build_system_prompt(
        PromptInputs(name="a", config_name="A", can_delegate=True, agents=[Entry(name="a")])
    )
    assert section(prompt, "available_agents") is None


def test_interactive_delegation_protocol_follows_interaction_mode_even_without_a_registry() -> None:
    # Go: HasInteractiveDelegation is "interaction_mode is interactive", nothing about delegating.
    assert section(agent("orch", interaction_mode="interactive").system_prompt(),
                   "interactive_delegation_protocol") is not None
    assert section(agent("orch").system_prompt(), "interactive_delegation_protocol") is None


def test_siblings_prompts_differ_only_in_their_tail() -> None:
    def parts(name: str) -> tuple[str, str]:
        return prompt_parts(PromptInputs(name=name, config_name="worker", description="d", instructions="i",
                                         depth=1, context="ctx"))

    first, second = parts("worker-what-1"), parts("worker-what-2")
    assert first[0] == second[0] and "worker-what" not in first[0]
    assert first[1] != second[1] and first[1].endswith("<identity>\nYou are worker-what-1. d\n</identity>")
    assert "".join(first) == build_system_prompt(PromptInputs(name="worker-what-1", config_name="worker",
                                                              description="d", instructions="i", depth=1,
                                                              context="ctx"))
