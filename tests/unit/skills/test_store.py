"""SkillStore: the load_skill tool and the inline / on-demand split."""

from __future__ import annotations

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.skills import LOAD_SKILL, Skill, SkillStore

FOOTER_TAIL = "\nUse filesystem tools to access supplementary files in this directory."


async def call_load_skill(store: SkillStore, arguments: str) -> str:
    tool = store.tools().get(LOAD_SKILL)
    assert tool is not None
    return await tool.handler(arguments)


async def test_load_skill_footer_is_relative_to_work_dir() -> None:
    store = SkillStore([Skill("deploy", "d", "Steps", "/project/skills/deploy")], work_dir="/project")
    out = await call_load_skill(store, '{"name": "deploy"}')
    assert out == "Steps\n\n---\nSkill directory: skills/deploy" + FOOTER_TAIL


async def test_load_skill_footer_is_absolute_without_work_dir() -> None:
    store = SkillStore([Skill("deploy", "d", "Steps", "/project/skills/deploy")])
    out = await call_load_skill(store, '{"name": "deploy"}')
    assert out == "Steps\n\n---\nSkill directory: /project/skills/deploy" + FOOTER_TAIL


async def test_load_skill_without_dir_has_no_footer() -> None:
    store = SkillStore([Skill("inline", "d", "Just content")], work_dir="/project")
    assert await call_load_skill(store, '{"name": "inline"}') == "Just content"


async def test_load_skill_unknown_name_errors() -> None:
    with pytest.raises(ToolError, match="skill not found: missing"):
        await call_load_skill(SkillStore(), '{"name": "missing"}')


async def test_load_skill_bad_json_is_invalid_input() -> None:
    with pytest.raises(ToolError, match="invalid input"):
        await call_load_skill(SkillStore(), "{not json")


def test_inline_and_on_demand_split_on_description() -> None:
    store = SkillStore([Skill("a", "", "A"), Skill("b", "desc", "B")])
    assert [s.name for s in store.inline()] == ["a"]
    assert [s.name for s in store.on_demand()] == ["b"]


def test_select_keeps_requested_order_and_empty_keeps_all() -> None:
    store = SkillStore([Skill("a"), Skill("b"), Skill("c")])
    assert [s.name for s in store.select(["c", "a"]).skills()] == ["c", "a"]
    assert [s.name for s in store.select([]).skills()] == ["a", "b", "c"]


def test_select_skips_a_skill_with_no_folder_and_missing_names_it() -> None:
    store = SkillStore([Skill("a")])
    assert [s.name for s in store.select(["nope", "a"]).skills()] == ["a"]
    assert store.select(["nope"]).skills() == []
    assert store.missing(["nope", "a"]) == ["nope"]
