"""Layer 5 — skills: ``SKILL.md`` folders with frontmatter, inlined or loaded on demand."""
