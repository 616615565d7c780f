"""Workflow files: validation, interpolation, setup, and the team's config."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelly_dist.engine import config_from_data
from shelly_dist.engine.workflow import (
    Workflow,
    agents_config,
    agents_spec,
    base_variables,
    interpolate,
    load_workflow,
    parse_agents_spec,
    resolve_params,
    run_setup,
    team_config,
)
from shelly_dist.errors import ConfigError, UsageError

CONFIG = config_from_data({"providers": [{"name": "main", "kind": "scripted", "model": "big", "script": {"*": ["x"]}}],
                           "agents": [{"name": "coder", "toolboxes": ["team"]}, {"name": "lead"}]}, {})


def workflow(**agents: dict[str, object]) -> Workflow:
    return Workflow.model_validate({"name": "wf", "agents": agents or {"coder": {"ref": "coder"}},
                                    "params": [{"name": "target", "default": "parser"}]})


def test_known_variables_are_interpolated_and_unknown_ones_stay() -> None:
    variables = base_variables(workflow(), {"target": "lexer"}, {"HOME": "/h"}, "t1")
    text = "${{ params.target }} ${{env.HOME}} ${{ workflow.name }}/${{ workflow.tag }} ${{ nope }}"
    assert interpolate(text, variables) == "lexer /h wf/t1 ${{ nope }}"


def test_a_param_default_applies_and_an_unknown_param_is_refused() -> None:
    assert resolve_params(workflow(), {}) == {"target": "parser"}
    with pytest.raises(UsageError, match="unknown parameter 'tagret'"):
        resolve_params(workflow(), {"tagret": "x"})


def test_setup_outputs_are_trimmed_variables_for_later_steps(tmp_path: Path) -> None:
    steps = [{"shell": "echo '  one  '", "as": "a"}, {"shell": "echo ${{ a }}-two", "as": "b"}]
    wf = Workflow.model_validate({"name": "wf", "agents": {"coder": {"ref": "coder"}}, "setup": steps})
    assert run_setup(wf, {}, tmp_path)["b"] == "one-two"


def test_a_failing_setup_command_aborts_naming_it(tmp_path: Path) -> None:
    wf = Workflow.model_validate({"name": "wf", "agents": {"coder": {"ref": "coder"}}, "setup": [{"shell": "exit 3"}]})
    with pytest.raises(UsageError, match="setup command 'exit 3' failed with exit code 3"):
        run_setup(wf, {}, tmp_path)


def test_an_unknown_key_in_the_file_is_a_load_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "wf.yaml"
    path.write_text("name: wf\nagents: {coder: {ref: coder, colour: red}}\n")
    with pytest.raises(ConfigError, match=r"agents\.coder\.colour"):
        load_workflow(path)


def test_an_inline_agent_gets_the_team_toolbox_and_its_own_model() -> None:
    cfg = team_config(CONFIG, workflow(helper={"provider": "main", "model": "small", "system_prompt": "Help."}))
    helper = next(a for a in cfg.agents if a.name == "helper")
    assert helper.toolbox_names() == ["team"] and helper.instructions == "Help."
    assert next(p for p in cfg.providers if p.name == helper.provider).model == "small"


def test_a_ref_without_team_gets_it() -> None:
    wf = workflow(lead={"ref": "lead"})
    assert "team" in next(a for a in team_config(CONFIG, wf).agents if a.name == "lead").toolbox_names()


def test_the_stored_agent_definitions_rebuild_the_same_team_config() -> None:
    """A worker builds a workflow's inline agents from the JSON kept in the session's workspace."""
    wf = workflow(helper={"provider": "main", "model": "small", "system_prompt": "Help.", "max_steps": 4},
                  lead={"ref": "lead"})
    assert agents_config(CONFIG, parse_agents_spec(agents_spec(wf))) == team_config(CONFIG, wf)


def test_an_invalid_cron_wakeup_fails_the_load_naming_the_agent(tmp_path: Path) -> None:
    path = tmp_path / "wf.yaml"
    path.write_text("name: wf\nagents: {ticker: {ref: ticker, wakeup: '0 25 * * *'}}\n")
    with pytest.raises(ConfigError, match=r"wakeup '0 25 \* \* \*'.*hour.*\(agent ticker\)"):
        load_workflow(path)


def test_a_typed_param_is_checked() -> None:
    wf = Workflow.model_validate({"name": "wf", "agents": {"coder": {"ref": "coder"}},
                                  "params": [{"name": "n", "type": "number"}, {"name": "b", "type": "boolean"}]})
    assert resolve_params(wf, {"n": "3", "b": "yes"}) == {"n": "3", "b": "true"}
    with pytest.raises(UsageError, match="parameter 'n' must be a number, not 'three'"):
        resolve_params(wf, {"n": "three"})


@pytest.mark.parametrize("message", ["$(touch pwned)", '"; touch pwned; "', "'; touch pwned; '", "`touch pwned`"])
@pytest.mark.parametrize("use", ['echo ${{ msg }}', 'echo "${{ msg }}"', "echo '${{ msg }}'", 'echo "x ${{ msg }} y"'])
def test_an_agent_written_setup_output_never_runs_as_a_command(tmp_path: Path, message: str, use: str) -> None:
    # The first step stands for what an agent wrote (a commit message); the second uses it as
    # docs/workflows.md shows, quoted or not.
    (tmp_path / "msg").write_text(message)
    steps = [{"shell": "cat msg", "as": "msg"}, {"shell": use, "as": "echoed"}]
    wf = Workflow.model_validate({"name": "wf", "agents": {"coder": {"ref": "coder"}}, "setup": steps})
    out = run_setup(wf, {}, tmp_path)
    assert not (tmp_path / "pwned").exists()
    assert message in out["echoed"]


def test_setup_commands_do_not_see_the_secrets_of_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-fake-secret")
    monkeypatch.setenv("SHELLY_REDIS_URL", "redis://:hunter2@localhost:6379/0")
    monkeypatch.setenv("LISTED", "ok")
    wf = Workflow.model_validate({"name": "wf", "agents": {"coder": {"ref": "coder"}},
                                  "setup": [{"shell": "env", "as": "env"}]})
    seen = run_setup(wf, {}, tmp_path, passthrough=["LISTED"])["env"]
    assert "sk-fake-secret" not in seen and "hunter2" not in seen
    assert "LISTED=ok" in seen and "PATH=" in seen


def test_params_and_workflow_variables_reach_setup_commands_as_values(tmp_path: Path) -> None:
    variables = base_variables(workflow(), {"target": "a b;c"}, {"HOME": "/h"}, "t1")
    step = {"shell": "printf '%s|' ${{ params.target }} '${{ workflow.tag }}'", "as": "x"}
    wf = Workflow.model_validate({"name": "wf", "agents": {"coder": {"ref": "coder"}}, "setup": [step]})
    assert run_setup(wf, variables, tmp_path)["x"] == "a b;c|t1|"
