"""Every bundled template is a valid config, and the demo team is wired as documented."""

from __future__ import annotations

import json

import pytest

from shelly_dist.engine.config import parse_config
from shelly_dist.engine.config_models import ScriptStep
from shelly_dist.engine.shellydir import list_templates, template_config
from shelly_dist.providers.scripted import build_reply

ENV = {"ANTHROPIC_API_KEY": "test-key"}


@pytest.mark.parametrize("name", [n for n, _ in list_templates()])
def test_template_config_validates(name: str) -> None:
    cfg = parse_config(template_config(name), ENV, source=name)
    assert cfg.entry()


def test_dev_team_lead_delegates_two_levels_deep() -> None:
    cfg = parse_config(template_config("dev-team"), ENV)
    assert cfg.entry().name == "lead"
    assert cfg.entry().options.max_delegation_depth == 2
    assert {a.name for a in cfg.agents} == {"lead", "explorer", "planner", "coder", "reviewer"}


def steps(name: str, agent: str) -> list[ScriptStep | str]:
    cfg = parse_config(template_config(name), {})
    replies = cfg.providers[0].script_for(agent)
    assert replies is not None
    return replies


def calls(step: ScriptStep | str) -> list[tuple[str, dict]]:
    assert isinstance(step, ScriptStep)
    return [(c.name, c.arguments if isinstance(c.arguments, dict) else json.loads(c.arguments))
            for c in step.tool_calls]


def test_demo_needs_no_key_and_uses_only_the_scripted_provider() -> None:
    cfg = parse_config(template_config("demo"), {})
    assert [p.kind for p in cfg.providers] == ["scripted"]
    assert not cfg.distributed.broker_url
    assert all("state" in a.toolbox_names() for a in cfg.agents)


def test_demo_orchestrator_delegates_to_both_workers_in_one_call() -> None:
    first = calls(steps("demo", "orchestrator")[0])
    assert [name for name, _ in first] == ["delegate"]
    tasks = first[0][1]["tasks"]
    assert [t["agent"] for t in tasks] == ["researcher", "writer"]
    assert all(t["task"] == "{task}" and t["context"] for t in tasks)


@pytest.mark.parametrize(("worker", "key"), [("researcher", "research"), ("writer", "draft")])
def test_demo_worker_writes_blackboard_then_completes(worker: str, key: str) -> None:
    script = steps("demo", worker)
    (set_name, set_args), = calls(script[0])
    assert (set_name, set_args["key"]) == ("shared_state_set", key)
    (done_name, done_args), = calls(script[1])
    assert done_name == "task_complete"
    assert done_args["status"] == "completed" and done_args["summary"]


def test_demo_orchestrator_reads_blackboard_and_answers_with_both_findings() -> None:
    script = steps("demo", "orchestrator")
    reads = calls(script[1])
    assert [n for n, _ in reads] == ["shared_state_list", "shared_state_get", "shared_state_get"]
    assert {a.get("key") for _, a in reads[1:]} == {"research", "draft"}
    final = script[2]
    assert isinstance(final, str) and "{task}" in final
    assert "research" in final and "draft" in final


def test_demo_final_answer_quotes_what_each_worker_stored() -> None:
    final = steps("demo", "orchestrator")[2]
    assert isinstance(final, str)
    for worker in ("researcher", "writer"):
        (_, args), = calls(steps("demo", worker)[0])
        assert args["value"].rstrip(".").lower() in final.lower()


def test_demo_script_replies_build_with_the_scripted_completer() -> None:
    cfg = parse_config(template_config("demo"), {})
    for agent, replies in cfg.providers[0].script.items():
        for i, reply in enumerate(replies):
            spec = reply if isinstance(reply, str) else reply.model_dump()
            message, _, error = build_reply(spec, index=i, task="Why is the sky blue?")
            assert not error, agent
            assert "{task}" not in message.model_dump_json(), agent


async def test_demo_team_runs_end_to_end_offline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The demo team, built by the engine from its config, answers from the blackboard."""
    from shelly_dist.engine import Engine

    cfg = parse_config(template_config("demo"), {})
    async with await Engine.open(cfg, shelly_dir=tmp_path / ".shelly") as engine:
        session = engine.session()
        outcome = await session.send("Why is the sky blue?")
        store = engine.stores.store(session.id)
        assert sorted(await store.keys()) == ["draft", "research"]
    top = session.agent
    delegated = json.loads(top.chat.messages()[3].tool_results()[0].content)
    assert [(e["agent"], e["completion"]["status"]) for e in delegated] == [
        ("researcher", "completed"),
        ("writer", "completed"),
    ]
    assert not any(r.is_error for m in top.chat.messages() for r in m.tool_results())
    answer = outcome.reply.text_content()
    assert 'the key facts about "Why is the sky blue?"' in answer
    assert 'explanation of "Why is the sky blue?"' in answer


GO_DEV_TEAM = {  # Go Shelly's dev-team template: agent -> (toolboxes, skills, max_iterations, depth)
    "lead": (["filesystem", "search", "ask", "playwright", "tasks", "notes"], ["lead-workflow"], 20, 2),
    "explorer": (["filesystem", "search", "git", "playwright", "notes"], ["explorer-workflow", "project-indexer"],
                 10, None),
    "planner": (["filesystem", "search", "git", "ask", "playwright", "tasks", "notes"], ["planner-workflow"], 10,
                None),
    "coder": (["filesystem", "exec", "search", "git", "http", "playwright", "tasks", "notes"], ["coder-workflow"],
              20, None),
    "reviewer": (["filesystem", "search", "exec", "notes"], ["reviewer-workflow"], 10, None),
}


def test_dev_team_is_go_shellys_team() -> None:
    cfg = parse_config(template_config("dev-team"), ENV)
    shape = {a.name: (a.toolbox_names(), a.skills, a.options.max_iterations, a.options.max_delegation_depth)
             for a in cfg.agents}
    assert shape == GO_DEV_TEAM
    assert [p.name for p in cfg.providers] == ["default", "openai", "grok", "gemini"]
    assert [(m.name, m.command, m.args) for m in cfg.mcp_servers] == [("playwright", "npx", ["-y", "@playwright/mcp"])]
    assert "ask_user" in cfg.entry().instructions and "approval" in cfg.entry().instructions


def test_project_indexer_is_a_lead_and_explorers_on_the_task_board() -> None:
    cfg = parse_config(template_config("project-indexer"), ENV)
    assert cfg.entry().name == "index-lead" and cfg.entry().options.max_delegation_depth == 1
    assert {a.name: a.toolbox_names() for a in cfg.agents} == {
        "index-lead": ["filesystem", "search", "tasks"], "index-explorer": ["filesystem", "search", "tasks"]}
    assert all(a.skills == ["project-indexer"] for a in cfg.agents)
