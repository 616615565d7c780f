"""``shelly run`` on a terminal prompts for a nested child's approval, naming its path (``lead →
deployer-…``), on both runtimes: embedded the child asks through the terminal itself; on the pool
it waits in Redis on a worker and the root's terminal prompts for it (issue 35). Driven through a
real pseudo-terminal."""

from __future__ import annotations

import json

import pytest

from ..integration.cluster import complete, delegate, scripted
from ..integration.test_approvals import OPS_MODULE, deploys
from ..integration.test_cli_interactive import run_on_a_terminal
from .conftest import Project

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def team(project: Project) -> None:
    (project.root / "team").mkdir(exist_ok=True)
    (project.root / "team" / "__init__.py").write_text("")
    (project.root / "team" / "ops.py").write_text(OPS_MODULE)
    project.write_config(
        [scripted(lead=[delegate(("deployer", "ship the release")), "lead heard: {result}"],
                  deployer=[{"tool_calls": [{"name": "deploy", "arguments": {"env": "prod"}}]},
                            complete("deploy said: {result}")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "deployer", "toolboxes": ["ops"]}],
        entry_agent="lead", python=["team.ops"])


@pytest.mark.parametrize(("typed", "said"), [("yes", "deploy said: deployed to prod"),
                                             ("no, freeze week", "deploy said: deploy: rejected: freeze week")])
def test_the_root_terminal_prompts_for_a_nested_childs_approval_naming_its_path(
        project: Project, typed: str, said: str) -> None:
    team(project)
    code, out, terminal = run_on_a_terminal(project.root, typed, b"Approve?")
    assert code == 0, f"{terminal}\n{project.log()}"
    assert "lead → deployer-ship-1 wants to run deploy" in terminal
    assert said in json.loads(out)["reply"]
    assert len(deploys(project.cluster)) == (1 if typed == "yes" else 0)
