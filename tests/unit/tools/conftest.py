"""Helpers for the built-in tool tests: call a tool by name, build permissions on tmp_path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shelly_dist.tools import ToolBox
from shelly_dist.tools.permissions import Permissions


async def call(tb: ToolBox, tool_name: str, /, **args: Any) -> str:
    tool = tb.get(tool_name)
    assert tool is not None, f"{tool_name} not in {tb.names()}"
    return await tool.handler(json.dumps(args))


class ScriptedApprover:
    """Answers prompts from a list (then "no"), recording every question."""

    interactive = True

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.questions: list[str] = []

    async def ask(self, question: str, options: Any) -> str:
        self.questions.append(question)
        return self.answers.pop(0) if self.answers else "no"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


@pytest.fixture
def perms(project: Path) -> Permissions:
    return Permissions(root=project)
