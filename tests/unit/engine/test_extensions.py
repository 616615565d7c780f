"""Loading ``python:`` modules (issue 21): imported at config load from the project directory
(which is not put on ``sys.path``), every name they register checked (exit 2 with one line),
their source fingerprinted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from shelly_dist.agent import Run
from shelly_dist.engine import Engine, fingerprint, load_config
from shelly_dist.errors import ConfigError

SCRIPTED = {"name": "m", "kind": "scripted", "model": "x", "script": {"*": ["done"]}}


def project(tmp_path: Path, source: str, agents: list[dict[str, Any]] | None = None,
            providers: list[dict[str, Any]] | None = None) -> tuple[Path, str]:
    """A project whose module (unique name, beside ``.shelly/``) holds ``source``; returns the
    config path and the module name."""
    module = f"ext_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source).replace("MOD", module))
    (tmp_path / ".shelly").mkdir()
    config = {"providers": providers or [SCRIPTED], "agents": agents or [{"name": "solo"}], "python": [module]}
    path = tmp_path / ".shelly" / "config.yaml"
    path.write_text(yaml.safe_dump(config).replace("MOD", module))
    return path, module


TOOLS = """
    from shelly_dist import hook, input_guardrail, output_guardrail, tool

    @tool(toolbox="MOD-a")
    def ping(x: int) -> str:
        '''Ping.'''
        return "pong"

    @tool(toolbox="MOD-b", name="ping")
    def ping_again(x: int) -> str:
        '''Ping again.'''
        return "pong"

    @hook("MOD-hook")
    class Audit:
        async def on_run_start(self, ctx):
            pass

    @input_guardrail("MOD-in")
    def check_in(text, ctx):
        pass

    @output_guardrail("MOD-out")
    def check_out(text, ctx):
        pass
"""


def test_a_module_beside_shelly_dir_is_imported_and_its_names_are_valid(tmp_path: Path) -> None:
    path, mod = project(tmp_path, TOOLS, [{"name": "solo", "toolboxes": ["MOD-a"], "hooks": ["MOD-hook"],
                                          "guardrails": {"input": ["MOD-in"], "output": ["MOD-out"]}}])
    load_config(path)
    assert mod in sys.modules and str(tmp_path) not in sys.path


def test_a_module_that_fails_to_import_is_one_line_naming_it_and_its_error(tmp_path: Path) -> None:
    path, mod = project(tmp_path, "raise RuntimeError('no database configured')")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (f'config: python[0]: cannot import "{mod}": RuntimeError: no database configured '
                               f"({path})")


@pytest.mark.parametrize(("agent", "problem"), [
    ({"toolboxes": ["MOD-nope"]}, 'agents[0].toolboxes[0]: unknown toolbox "MOD-nope"'),
    ({"hooks": ["MOD-nope"]}, 'agents[0].hooks[0]: unknown hook "MOD-nope"'),
    ({"guardrails": {"input": ["MOD-nope"]}}, 'agents[0].guardrails.input[0]: unknown input guardrail "MOD-nope"'),
    ({"guardrails": {"output": ["MOD-nope"]}}, 'agents[0].guardrails.output[0]: unknown output guardrail "MOD-nope"'),
    ({"toolboxes": ["MOD-a", "MOD-b"]},
     'agents[0].toolboxes[1]: tool "ping" of toolbox "MOD-b" has the name of a tool of toolbox "MOD-a"'),
], ids=["toolbox", "hook", "input-guardrail", "output-guardrail", "two-tools-of-one-name"])
def test_a_bad_name_is_a_config_error_naming_the_field(tmp_path: Path, agent: dict[str, Any], problem: str) -> None:
    path, mod = project(tmp_path, TOOLS, [{"name": "solo", **agent}])
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"config: {problem.replace('MOD', mod)}" in str(info.value)


def test_a_hook_class_without_any_hook_point_fails_the_import_naming_it(tmp_path: Path) -> None:
    path, mod = project(tmp_path, """
        from shelly_dist import hook

        @hook("MOD-empty")
        class Empty:
            def on_start(self, ctx):  # a typo of on_run_start
                pass
    """)
    problem = f"cannot import \"{mod}\": UsageError: @hook('{mod}-empty'): decorate a class with at least one"
    with pytest.raises(ConfigError, match=re.escape(problem)):
        load_config(path)


def test_an_unknown_provider_kind_is_a_config_error(tmp_path: Path) -> None:
    path, _ = project(tmp_path, "", providers=[{"name": "gw", "kind": "no-such-gateway", "model": "x"}])
    with pytest.raises(ConfigError, match=r'providers\[0\]\.kind: unknown provider kind "no-such-gateway"'):
        load_config(path)


async def test_a_provider_kind_of_the_module_builds_the_agents_completer_with_its_options(tmp_path: Path) -> None:
    path, _ = project(tmp_path, """
        from shelly_dist import Message, Role, provider

        @provider("MOD-gw")
        class Gateway:
            def __init__(self, *, name, model, options, **_):
                self.greeting = f"{options['greeting']} from {model}"

            async def complete(self, chat, tools):
                return Message.text("gw", Role.ASSISTANT, self.greeting)
    """, providers=[{"name": "gw", "kind": "MOD-gw", "model": "m1", "options": {"greeting": "hello"}}])
    async with await Engine.open(path, shelly_dir=tmp_path / ".shelly") as engine:
        reply = await engine.registry("s1").spawn("solo", 0).run("hi")
    assert reply.text_content() == "hello from m1"


def test_the_fingerprint_changes_with_the_modules_source(tmp_path: Path) -> None:
    path, mod = project(tmp_path, "X = 1\n")
    before = fingerprint(load_config(path))
    assert fingerprint(load_config(path)) == before
    (tmp_path / f"{mod}.py").write_text("X = 2\n")
    assert fingerprint(load_config(path)) != before


async def test_a_python_tool_named_like_a_built_in_tool_of_the_agent_is_refused_when_it_is_built(
    tmp_path: Path,
) -> None:
    path, mod = project(tmp_path, """
        from shelly_dist import tool

        @tool(toolbox="MOD-notes")
        def list_notes() -> str:
            '''Mine.'''
            return ""
    """, [{"name": "solo", "toolboxes": ["notes", "MOD-notes"]}])
    async with await Engine.open(path, shelly_dir=tmp_path / ".shelly") as engine:
        twice = f'two tools named "list_notes" (toolboxes "notes" and "{mod}-notes")'
        with pytest.raises(ConfigError, match=re.escape(twice)):
            engine.registry("s1").spawn("solo", 0)


def shelly(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shelly_dist.cli.main", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def test_shelly_exits_2_with_one_line_on_a_module_that_fails_to_import(tmp_path: Path) -> None:
    project(tmp_path, "import no_such_dependency_xyz\n")
    out = shelly(tmp_path, "run", "hi")
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "No module named 'no_such_dependency_xyz'" in lines[0], out.stderr


def test_a_worker_exits_2_at_start_on_a_module_that_fails_to_import(tmp_path: Path) -> None:
    project(tmp_path, "import no_such_dependency_xyz\n")
    out = shelly(tmp_path, "worker", "--concurrency", "1")
    assert out.returncode == 2 and "No module named 'no_such_dependency_xyz'" in out.stderr


def test_agents_check_lists_each_agents_python_tools(tmp_path: Path) -> None:
    _, mod = project(tmp_path, TOOLS, [{"name": "solo", "toolboxes": ["MOD-a"]}])
    out = shelly(tmp_path, "agents", "--check")
    assert out.returncode == 0, out.stderr
    assert f"python tool: solo: ping ({mod}.ping)" in out.stdout


async def test_tool_filters_and_tool_policy_apply_to_a_python_toolbox(tmp_path: Path) -> None:
    path, _ = project(tmp_path, """
        from shelly_dist import tool

        @tool(toolbox="MOD-ops")
        def keep(x: int) -> str:
            '''Kept.'''
            return ""

        @tool(toolbox="MOD-ops")
        def filtered(x: int) -> str:
            '''Left out by the filter.'''
            return ""

        @tool(toolbox="MOD-ops", group="danger")
        def denied(x: int) -> str:
            '''Denied by policy.'''
            return ""
    """, [{"name": "solo", "toolboxes": [{"name": "MOD-ops", "tools": ["keep", "denied"]}],
           "tools": {"deny": ["group:danger"]}}])
    async with await Engine.open(path, shelly_dir=tmp_path / ".shelly") as engine:
        run = Run.start(engine.registry("s1").spawn("solo", 0))
        await run._prepare()  # collects the tools the model is offered
    names = {t.name for t in run.tools}
    assert "keep" in names and "filtered" not in names and "denied" not in names


async def test_shelly_mcp_serve_serves_a_python_toolbox_an_agent_uses(tmp_path: Path) -> None:
    from shelly_dist.cli.mcp import served_toolboxes

    path, mod = project(tmp_path, TOOLS, [{"name": "solo", "toolboxes": ["MOD-a"]}])
    async with await Engine.open(path, shelly_dir=tmp_path / ".shelly") as engine:
        boxes = served_toolboxes(engine, [], "s1")
    assert [(b.name, b.names()) for b in boxes] == [(f"{mod}-a", ["ping"])]


def test_a_project_module_named_like_the_standard_library_is_never_imported(tmp_path: Path) -> None:
    """An agent-written ``stringprep.py`` (the stdlib module ``encodings.idna`` imports at the first
    DNS lookup) ran with the secrets when the project directory was first on ``sys.path``, as would
    any standard module imported after the config loads (``tabnanny`` here; ``json`` is imported
    earlier by every process, so its planted twin is checked as well but was never reached). Now
    only ``python:``'s own top-level names are looked up there. Run as the ``shelly`` console
    script runs (``-P``: its ``sys.path[0]`` is its bin directory, not the working directory), with
    a fake secret planted."""
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "__init__.py").write_text("")
    (tmp_path / "team" / "tools.py").write_text(textwrap.dedent("""
        import tabnanny
        import encodings.idna
        import json

        from shelly_dist import tool


        @tool(toolbox="orders")
        def lookup(order_id: str) -> str:
            '''Look an order up.'''
            return "shipped"
    """))
    for name in ("stringprep", "tabnanny", "json"):
        (tmp_path / f"{name}.py").write_text(
            f"import os\nopen({name!r} + '.leaked', 'w').write(os.environ.get('ANTHROPIC_API_KEY', ''))\n")
    (tmp_path / ".shelly").mkdir()
    (tmp_path / ".shelly" / "config.yaml").write_text(yaml.safe_dump(
        {"providers": [SCRIPTED], "agents": [{"name": "solo", "toolboxes": ["orders"]}], "python": ["team.tools"]}))
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-FAKE-shadow-0123456789"}
    out = subprocess.run([sys.executable, "-P", "-m", "shelly_dist.cli.main", "agents", "--check"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "python tool: solo: lookup (team.tools.lookup)" in out.stdout
    assert sorted(p.name for p in tmp_path.glob("*.leaked")) == []
