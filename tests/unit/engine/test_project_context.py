"""Project context assembly: external rule files, curated .shelly/*.md, and the size limit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from shelly_dist.engine.project_context import (
    MAX_CONTEXT_CHARS,
    TRUNCATION_MARKER,
    is_knowledge_stale,
    load_project_context,
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".shelly").mkdir()
    return tmp_path


def test_empty_project_has_no_context(project: Path) -> None:
    assert load_project_context(project / ".shelly") == ""


def test_external_then_curated_joined_by_blank_line(project: Path) -> None:
    (project / "CLAUDE.md").write_text("claude rules\n")
    (project / ".cursorrules").write_text("  cursor rules  ")
    rules = project / ".cursor" / "rules"
    rules.mkdir(parents=True)
    (rules / "b.mdc").write_text("---\nglobs: '*.py'\n---\nrule b\n")
    (rules / "a.mdc").write_text("rule a")
    (project / ".shelly" / "context.md").write_text("\ncurated context\n")
    (project / ".shelly" / "arch.md").write_text("architecture")
    text = load_project_context(project / ".shelly")
    assert text == "\n\n".join(
        ["claude rules", "cursor rules", "rule a", "rule b", "architecture", "curated context"]
    )


def test_empty_curated_files_are_skipped_and_non_md_ignored(project: Path) -> None:
    (project / ".shelly" / "empty.md").write_text("  \n")
    (project / ".shelly" / "notes.txt").write_text("not markdown")
    (project / ".shelly" / "x.md").write_text("x")
    assert load_project_context(project / ".shelly") == "x"


def test_knowledge_folder_is_not_auto_loaded(project: Path) -> None:
    (project / ".shelly" / "knowledge").mkdir()
    (project / ".shelly" / "knowledge" / "deep.md").write_text("deep dive")
    assert load_project_context(project / ".shelly") == ""


def test_external_file_is_capped_at_max_size(project: Path) -> None:
    (project / "CLAUDE.md").write_text("a" * 100)
    assert load_project_context(project / ".shelly", max_external_file_size=10) == "a" * 10


def test_context_over_limit_is_cut_with_marker(project: Path) -> None:
    (project / ".shelly" / "big.md").write_text("é" * (MAX_CONTEXT_CHARS + 50))
    text = load_project_context(project / ".shelly")
    assert text == "é" * MAX_CONTEXT_CHARS + TRUNCATION_MARKER


def test_knowledge_is_stale_without_context_md(project: Path) -> None:
    assert is_knowledge_stale(project, project / ".shelly") is True


def test_knowledge_staleness_follows_last_commit(project: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_COMMITTER_DATE": "2020-01-01T00:00:00Z"}
    context = project / ".shelly" / "context.md"
    context.write_text("ctx")
    assert is_knowledge_stale(project, project / ".shelly") is False  # not a repo: fails open
    subprocess.run(["git", "init", "-q"], cwd=project, check=True, env=env)
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "x"], cwd=project, check=True, env=env)
    assert is_knowledge_stale(project, project / ".shelly") is False  # context newer than 2020
    os.utime(context, (1_000_000_000, 1_000_000_000))  # 2001
    assert is_knowledge_stale(project, project / ".shelly") is True
