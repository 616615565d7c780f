"""Layer 5 — skills: ``SKILL.md`` folders with frontmatter, inlined or loaded on demand."""

from shelly_dist.skills.skill import Skill, load_skill_dir, load_skills, parse_skill, split_frontmatter
from shelly_dist.skills.store import LOAD_SKILL, SkillStore

__all__ = [
    "LOAD_SKILL",
    "Skill",
    "SkillStore",
    "load_skill_dir",
    "load_skills",
    "parse_skill",
    "split_frontmatter",
]
