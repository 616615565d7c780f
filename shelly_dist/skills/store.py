"""The skills an agent may use, and the ``load_skill`` tool that reads one on demand.

Skills with a description are only listed in the system prompt; the model fetches the body with
``load_skill``. The tool's output appends a footer naming the skill's folder (relative to the work
directory when one is given) so the model can reach the skill's supplementary files with its
filesystem tools. Error texts (``skill not found: <name>``) are Shelly's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.skills.skill import Skill
from shelly_dist.tools import ToolBox, tool_from_model

LOAD_SKILL = "load_skill"

_FOOTER = (
    "\n\n---\nSkill directory: {dir}\nUse filesystem tools to access supplementary files in this directory."
)


class LoadSkillInput(BaseModel):
    name: str = Field(description="The name of the skill to load.")


class SkillStore:
    """Skills by name, in load order. Later skills with the same name replace earlier ones."""

    def __init__(self, skills: Iterable[Skill] = (), work_dir: str | os.PathLike[str] | None = None) -> None:
        self._skills: dict[str, Skill] = {s.name: s for s in skills}
        self.work_dir = os.fspath(work_dir) if work_dir is not None else None

    def skills(self) -> list[Skill]:
        return list(self._skills.values())

    def get(self, name: str) -> Skill | None:
        return self._skills.get(name)

    def __len__(self) -> int:
        return len(self._skills)

    def inline(self) -> list[Skill]:
        """Skills without a description: their content goes into the system prompt."""
        return [s for s in self._skills.values() if not s.has_description]

    def on_demand(self) -> list[Skill]:
        """Skills with a description: listed in the prompt, loaded by ``load_skill``."""
        return [s for s in self._skills.values() if s.has_description]

    def select(self, names: list[str] | None) -> SkillStore:
        """The store restricted to ``names`` (an agent's ``skills:``); empty or ``None`` keeps all.

        A name with no skill is skipped, as Shelly does (the engine warns about it once, at
        start-up: see :meth:`missing`).
        """
        if not names:
            return self
        return SkillStore((self._skills[n] for n in names if n in self._skills), work_dir=self.work_dir)

    def missing(self, names: list[str] | None) -> list[str]:
        """The names in ``names`` that no loaded skill has."""
        return [n for n in names or [] if n not in self._skills]

    def render(self, name: str) -> str:
        """What ``load_skill`` returns for ``name``: the content plus the directory footer."""
        skill = self._skills.get(name)
        if skill is None:
            raise ToolError(f"skill not found: {name}", tool=LOAD_SKILL)
        if not skill.dir:
            return skill.content
        shown = skill.dir
        if self.work_dir:
            shown = os.path.relpath(skill.dir, self.work_dir)
        return skill.content + _FOOTER.format(dir=shown)

    def tools(self) -> ToolBox:
        """A toolbox holding ``load_skill``."""

        async def load(inp: LoadSkillInput) -> str:
            return self.render(inp.name)

        tool = tool_from_model(
            LOAD_SKILL,
            "Load the full instructions of a skill listed under available skills, by name.",
            LoadSkillInput,
            load,
            group="skills",
            retry_on_crash=True,
        )
        return ToolBox([tool], name="skills")
