"""A tool, a hook and both guardrails written in the user's own module, named by ``python:``, on
both runtimes (issue 21): the module is ``team/tools.py`` beside ``.shelly/``; on the pool the tool
runs in the worker's process, and the hook's count survives the clerk's suspension on a worker.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from ..integration.cluster import complete, delegate, scripted
from .conftest import Project

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TEAM_MODULE = textwrap.dedent('''
    """The user's extensions: what a team writes in Python."""
    import json
    import os
    from pathlib import Path

    from shelly_dist import GuardrailTripped, Message, ToolResult, hook, input_guardrail, output_guardrail, tool

    PIDS = Path(__file__).resolve().parent.parent / "tool-pids.txt"


    @tool(toolbox="orders")
    def lookup_order(order_id: str) -> str:
        """Look up an order by its id."""
        with PIDS.open("a") as f:
            f.write(f"{os.getpid()}\\n")
        return f"order {order_id}: shipped"


    @hook("audit")
    class Audit:
        """Counts the run's model calls in its journaled state and stamps the final reply."""

        async def after_model(self, ctx, reply):
            ctx.state["calls"] = ctx.state.get("calls", 0) + 1

        async def on_run_end(self, ctx, reply):
            return Message.text(reply.sender, reply.role, f"{reply.text_content()} [model calls: {ctx.state['calls']}]")


    @hook("echo")
    class Echo:
        """Keeps the last tool result the model saw, and appends it to the final reply."""

        async def before_model(self, ctx, chat):
            for m in chat.view():
                for part in m.parts:
                    if isinstance(part, ToolResult):
                        ctx.state["seen"] = part.content

        async def on_run_end(self, ctx, reply):
            return Message.text(reply.sender, reply.role, reply.text_content() + "\\n" + ctx.state.get("seen", "[]"))


    @input_guardrail("no_pii")
    def no_pii(text, ctx):
        if "SSN" in text:
            raise GuardrailTripped("the task holds an SSN")


    @output_guardrail("no_secrets")
    async def no_secrets(text, ctx):
        if "SECRET" in text:
            raise GuardrailTripped("the reply holds a secret")
''')


def lookup(order_id: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": order_id}}]}


def team(project: Project, clerk_ends: Any = "A1 shipped") -> None:
    """lead → clerk (the Python tool, the counting hook, both guardrails) → checker: the clerk
    suspends while the checker runs, and resumes (on the pool, as a new task on a worker)."""
    (project.root / "team").mkdir()
    (project.root / "team" / "__init__.py").write_text("")
    (project.root / "team" / "tools.py").write_text(TEAM_MODULE)
    project.write_config(
        [scripted(
            lead=[delegate(("clerk", "{task}")), "lead done {task}"],
            clerk=[lookup("A1"), delegate(("checker", "check A1")), clerk_ends],
            checker=["checked"],
        )],
        [{"name": "lead", "hooks": ["echo"], "guardrails": {"output": ["no_secrets"]},
          "options": {"max_delegation_depth": 2}},
         {"name": "clerk", "toolboxes": ["orders"], "hooks": ["audit"],
          "guardrails": {"input": ["no_pii"], "output": ["no_secrets"]}, "options": {"max_delegation_depth": 2}},
         {"name": "checker"}],
        python=["team.tools"],
    )


def entries(stdout: str) -> list[dict[str, Any]]:
    """The delegate entries the lead saw (its echo hook appended them to its reply)."""
    return json.loads(stdout.strip().splitlines()[-1])


def test_a_python_tool_and_a_counting_hook_work_and_the_tool_runs_in_the_runs_process(project: Project) -> None:
    team(project)
    out = project.run("order A1")
    assert out.returncode == 0, f"{out.stderr}\n{project.log()}"
    assert out.stdout.splitlines()[0] == "lead done order A1"
    assert entries(out.stdout) == [{"agent": "clerk", "result": "A1 shipped [model calls: 3]"}]
    pids = [int(p) for p in (project.root / "tool-pids.txt").read_text().split()]
    assert pids and set(pids) <= set(project.tool_process())


def test_a_hooks_final_reply_reaches_the_parent_when_the_child_ends_with_task_complete(project: Project) -> None:
    """The README's ``Audit``: a child that ends the usual way, with ``task_complete``, still gets
    its reply stamped (issue 38: the hook's return value was dropped for it)."""
    team(project, clerk_ends=complete("A1 shipped"))
    out = project.run("order A1")
    assert out.returncode == 0, f"{out.stderr}\n{project.log()}"
    [entry] = entries(out.stdout)
    assert "A1 shipped [model calls: 3]" in json.dumps(entry), entry


def test_an_input_guardrail_that_trips_fails_the_childs_entry_before_its_model_is_called(project: Project) -> None:
    team(project)
    out = project.run("SSN 123-45")
    assert out.returncode == 0, f"{out.stderr}\n{project.log()}"
    assert entries(out.stdout) == [{"agent": "clerk", "error": "guardrail no_pii tripped: the task holds an SSN"}]
    assert not (project.root / "tool-pids.txt").exists()


def test_an_output_guardrail_that_trips_at_the_top_fails_the_run_with_exit_1(project: Project) -> None:
    team(project)
    out = project.run("leak the SECRET")
    assert out.returncode == 1
    assert "guardrail no_secrets tripped: the reply holds a secret" in out.stderr
    assert out.stdout == ""


def test_an_input_guardrail_that_trips_at_the_top_fails_the_run_with_exit_1(project: Project) -> None:
    team(project)
    out = project.run("SSN 123-45", "--agent", "clerk")
    assert out.returncode == 1
    assert "guardrail no_pii tripped: the task holds an SSN" in out.stderr
    assert not (project.root / "tool-pids.txt").exists()
