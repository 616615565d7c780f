"""Workflow files (YAML): a team, its parameters, setup commands and the kickoff message.

    name: review
    agents:
      coder: {ref: coder, prompt: {append: "Keep patches small."}}
      reviewer: {provider: main, model: fast, system_prompt: "You review code.", toolboxes: [filesystem]}
    params:
      - {name: target, description: what to review, required: true}
    setup:
      - {shell: "git diff --stat", as: diff}
    kickoff: "@coder ${{ params.target }} needs work. Changes so far: ${{ diff }}"

An agent is a config agent (``ref``, with ``prompt.append`` added to its wake prompts) or inline
(``provider`` — a provider of the config —, ``model`` overriding the provider's, ``system_prompt``,
``toolboxes``, ``max_steps``, ``wakeup``, ``wakeup_prompt``); every agent gets the ``team``
toolbox. ``${{ var }}`` (a setup output), ``${{ env.X }}``, ``${{ params.x }}``,
``${{ workflow.name }}`` and ``${{ workflow.tag }}`` are interpolated in the kickoff and in prompts;
an unknown variable stays as written. In setup commands they are never interpolated: each becomes a
reference to an environment variable holding the value (:func:`shell_references`), and the
commands run with the exec tools' clean environment.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shelly_dist.engine.config_models import AgentConfig, Config
from shelly_dist.errors import ConfigError, UsageError
from shelly_dist.tools import control_files
from shelly_dist.tools.builtin._process import program_env
from shelly_dist.workspace.models import WakeBudget
from shelly_dist.workspace.schedule import Schedule, parse_wakeup

VARIABLE = re.compile(r"\$\{\{\s*([A-Za-z_][\w.-]*)\s*\}\}")
SETUP_TIMEOUT = 300.0
"""Seconds a setup command may run."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PromptSpec(_Strict):
    append: str = ""


class WorkflowAgent(_Strict):
    ref: str = ""
    prompt: PromptSpec = Field(default_factory=PromptSpec)
    provider: str = ""
    model: str = ""
    system_prompt: str = ""
    toolboxes: list[str] = Field(default_factory=list)
    max_steps: int | None = Field(None, ge=1)
    wakeup: str = ""
    wakeup_prompt: str = ""

    @property
    def inline(self) -> bool:
        return not self.ref


class Param(_Strict):
    name: str
    description: str = ""
    type: Literal["string", "number", "boolean"] = "string"
    required: bool = False
    default: Any = None


class SetupStep(_Strict):
    shell: str
    as_: str = Field("", alias="as")


class Workflow(_Strict):
    name: str
    agents: dict[str, WorkflowAgent] = Field(min_length=1)
    params: list[Param] = Field(default_factory=list)
    setup: list[SetupStep] = Field(default_factory=list)
    kickoff: str = ""
    wake_budget: WakeBudget = Field(default_factory=WakeBudget)
    """Wakes the session may start (in all, per minute) and the ping-pong loop bound; over it the
    workflow pauses (``runtime/wake.py``)."""


def load_workflow(path: str | Path) -> Workflow:
    """Read and validate a workflow file; errors name the file and the field. The file becomes a
    control file of the process (its ``setup:`` runs commands): no tool may change it."""
    control_files.register(path, "the workflow file in use")
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"workflow: cannot read {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"workflow: {path} is not valid YAML: {exc}") from exc
    try:
        workflow = Workflow.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"workflow: {path}: {where}: {first['msg']}", field=where) from exc
    schedules(workflow)  # an invalid wakeup fails the load, naming it
    return workflow


def schedules(workflow: Workflow) -> dict[str, Schedule]:
    """The agents that wake by themselves, with their schedule."""
    out = {}
    for name, spec in workflow.agents.items():
        if spec.wakeup:
            try:
                out[name] = parse_wakeup(spec.wakeup, spec.wakeup_prompt)
            except ConfigError as exc:
                raise ConfigError(f"{exc} (agent {name})", field=f"agents.{name}.wakeup") from exc
    return out


def interpolate(text: str, variables: Mapping[str, str]) -> str:
    """Replace ``${{ name }}`` by ``variables[name]``; unknown names stay as written."""
    return VARIABLE.sub(lambda m: variables.get(m.group(1), m.group(0)), text)


def resolve_params(workflow: Workflow, given: Mapping[str, str]) -> dict[str, str]:
    """The parameters' values: given, else defaults; a missing required or unknown one is an error."""
    known = {p.name for p in workflow.params}
    if unknown := sorted(set(given) - known):
        raise UsageError(f"workflow: unknown parameter {unknown[0]!r} (known: {', '.join(sorted(known)) or 'none'})")
    values: dict[str, str] = {}
    for param in workflow.params:
        if param.name in given:
            values[param.name] = _typed(param, given[param.name])
        elif param.default is not None:
            values[param.name] = str(param.default).lower() if isinstance(param.default, bool) else str(param.default)
        elif param.required:
            raise UsageError(f"workflow: parameter {param.name!r} is required (--param {param.name}=…)")
    return values


def _typed(param: Param, value: str) -> str:
    """``value`` checked against the parameter's type (booleans normalised to true/false)."""
    if param.type == "number":
        try:
            float(value)
        except ValueError:
            raise UsageError(f"workflow: parameter {param.name!r} must be a number, not {value!r}") from None
    elif param.type == "boolean":
        if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise UsageError(f"workflow: parameter {param.name!r} must be true or false, not {value!r}")
        return "true" if value.lower() in ("true", "1", "yes") else "false"
    return value


def base_variables(workflow: Workflow, params: Mapping[str, str], env: Mapping[str, str], tag: str) -> dict[str, str]:
    variables = {f"env.{k}": v for k, v in env.items()}
    variables |= {f"params.{k}": v for k, v in params.items()}
    variables |= {"workflow.name": workflow.name, "workflow.tag": tag}
    return variables


_ENV_PREFIXES = (("params.", "SHELLY_PARAM_"), ("env.", "SHELLY_ENV_"), ("workflow.", "SHELLY_WORKFLOW_"))


def setup_env_name(name: str) -> str:
    """The environment variable a setup command reads ``${{ name }}`` from: ``SHELLY_STEP_<AS>``
    for a setup output, ``SHELLY_PARAM_<X>``, ``SHELLY_ENV_<X>``, ``SHELLY_WORKFLOW_NAME`` and
    ``SHELLY_WORKFLOW_TAG`` for the others."""
    for prefix, env_prefix in _ENV_PREFIXES:
        if name.startswith(prefix):
            return env_prefix + re.sub(r"\W", "_", name[len(prefix):]).upper()
    return "SHELLY_STEP_" + re.sub(r"\W", "_", name).upper()


def shell_references(command: str, variables: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """``command`` with each known ``${{ name }}`` turned into a reference to an environment
    variable, and those variables' values.

    Why: a value (a setup output, which an agent may have written — a commit message, a branch
    name) pasted into shell text becomes shell syntax, and no quoting advice survives a value that
    closes the quote. A parameter expansion's result is never parsed again, so the value reaches
    the command as data whatever it holds. The reference fits the quoting where the placeholder
    stands: ``"${V}"`` outside quotes (one word, as the value would have been), ``${V}`` inside
    double quotes, ``'"${V}"'`` inside single quotes (closed, expanded, reopened)."""
    out: list[str] = []
    env: dict[str, str] = {}
    taken: dict[str, str] = {}  # env name -> variable name, so two names never share one variable
    quote = ""
    i = 0
    while i < len(command):
        match = VARIABLE.match(command, i)
        if match and match.group(1) in variables:
            name = match.group(1)
            var = setup_env_name(name)
            n = 2
            while taken.get(var, name) != name:
                var = f"{setup_env_name(name)}_{n}"
                n += 1
            taken[var] = name
            env[var] = variables[name]
            ref = "${" + var + "}"
            out.append(ref if quote == '"' else f"'\"{ref}\"'" if quote == "'" else f'"{ref}"')
            i = match.end()
            continue
        char = command[i]
        if char == "\\" and quote != "'":
            out.append(command[i:i + 2])
            i += 2
            continue
        if not quote and char in "'\"":
            quote = char
        elif quote == char:
            quote = ""
        out.append(char)
        i += 1
    return "".join(out), env


def run_setup(
    workflow: Workflow, variables: dict[str, str], cwd: Path, passthrough: Iterable[str] = (),
) -> dict[str, str]:
    """Run the setup commands in order (each sees the outputs before it); stdout trimmed becomes
    its ``as`` variable. A failing command aborts, naming it.

    Each command gets the variables it names as environment variables (:func:`shell_references`),
    never as shell text, and runs with the environment the exec tools give a program
    (:func:`~shelly_dist.tools.builtin._process.program_env`: PATH, HOME, LANG and
    ``permissions.exec_env``), so neither an agent-written output nor a provider key in this
    process's environment reaches the shell as anything but data it was handed."""
    out = dict(variables)
    for step in workflow.setup:
        command, values = shell_references(step.shell, out)
        try:
            done = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True,
                                  env={**program_env(passthrough), **values}, timeout=SETUP_TIMEOUT, check=False)
        except subprocess.TimeoutExpired as exc:
            raise UsageError(f"workflow: setup command {step.shell!r} timed out after {SETUP_TIMEOUT:g}s") from exc
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise UsageError(f"workflow: setup command {step.shell!r} failed with exit code {done.returncode}"
                             + (f": {detail[-1]}" if detail else ""))
        if step.as_:
            out[step.as_] = done.stdout.strip()
    return out


def team_config(config: Config, workflow: Workflow) -> Config:
    """``config`` with the workflow's inline agents added and every workflow agent given ``team``."""
    return agents_config(config, workflow.agents)


def agents_spec(workflow: Workflow) -> str:
    """The workflow's agent definitions as JSON: what a worker needs to build them
    (:func:`agents_config` of :func:`parse_agents_spec`), kept in the session's workspace."""
    return json.dumps({name: spec.model_dump(exclude_defaults=True) for name, spec in workflow.agents.items()},
                      sort_keys=True)


def parse_agents_spec(text: str) -> dict[str, WorkflowAgent]:
    try:
        return {name: WorkflowAgent.model_validate(spec) for name, spec in json.loads(text).items()}
    except (ValueError, ValidationError) as exc:
        raise ConfigError(f"workflow: the session's stored agent definitions are unreadable: {exc}") from exc


def agents_config(config: Config, workflow_agents: Mapping[str, WorkflowAgent]) -> Config:
    """``config`` with the inline agents of ``workflow_agents`` added (a provider ``P@agent`` for
    each that overrides its provider's model), refs under another name added as copies, and every
    workflow agent given ``team``. Pure: every worker of one config builds the same agents from
    the same definitions."""
    by_name = {a.name: a for a in config.agents}
    agents = list(config.agents)
    providers = list(config.providers)
    for name, spec in workflow_agents.items():
        if spec.ref:
            if spec.ref not in by_name:
                raise ConfigError(f'workflow: agent "{name}": ref "{spec.ref}" is not an agent of the config')
            base = by_name[spec.ref]
            toolboxes = base.toolboxes if "team" in base.toolbox_names() else [*base.toolboxes, "team"]
            copy = base.model_copy(update={"name": name, "toolboxes": toolboxes})
            if name == spec.ref:
                agents[agents.index(base)] = copy
            elif name in by_name:
                raise ConfigError(f'workflow: agent "{name}" (ref "{spec.ref}") has the name of another config agent')
            else:
                agents.append(copy)
            continue
        if name in by_name:
            raise ConfigError(f'workflow: inline agent "{name}" has the name of a config agent: use ref')
        provider = spec.provider or (providers[0].name if providers else "")
        match = next((p for p in providers if p.name == provider), None)
        if match is None:
            raise ConfigError(f'workflow: agent "{name}": provider "{provider}" is not in the config')
        if spec.model:
            provider = f"{match.name}@{name}"
            providers.append(match.model_copy(update={"name": provider, "model": spec.model}))
        toolboxes: list[Any] = [*spec.toolboxes, *([] if "team" in spec.toolboxes else ["team"])]
        agents.append(AgentConfig(name=name, provider=provider, instructions=spec.system_prompt,
                                  toolboxes=toolboxes, options={"max_iterations": spec.max_steps}))
    return config.model_copy(update={"agents": agents, "providers": providers})
