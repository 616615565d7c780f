"""Loading a config's Python extensions: the modules of ``python:``, imported in every process.

``shelly run``, ``shelly worker``, ``shelly batch``, ``shelly mcp serve`` and the coordinator all
load their config through :func:`~shelly_dist.engine.config.config_from_data`, which calls
:func:`import_modules` before it checks any name, so the tools, hooks, guardrails and provider
kinds the modules register (:mod:`shelly_dist.extensions`) are known to the checks and to every
agent built afterwards. ``python: [team.tools]`` finds ``team/tools.py`` beside ``.shelly/`` (the
project directory, the parent of ``.shelly/``), but the project directory is *not* put on
``sys.path``: only the top-level names ``python:`` lists (``team``) are looked up there, by an
import finder (:class:`ProjectModules`), so a ``stringprep.py`` or ``json.py`` an agent wrote
into the project never shadows the standard library or an installed package (it ran inside a
live run at its first DNS lookup; DESIGN §3 rule 16). A package's own submodules are found
through its ``__path__`` as usual. The modules and their packages become control files of the
process (:mod:`shelly_dist.tools.control_files`): no tool may change them.

Bad input fails at load time, in every process, as one ``config: <path>: <problem>`` line (exit
2): a module that cannot be imported (with its own error), a toolbox, hook, guardrail or provider
kind no module registered, two tools of one name in one agent.

:func:`source_digest` is what the config fingerprint adds for the modules: their source, so a
rolling update that changes a tool is a new generation (DESIGN §3), never a silent mix.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterable, Iterator, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

from shelly_dist.engine.config_models import BUILTIN_TOOLBOXES, AgentConfig, Config
from shelly_dist.extensions import REGISTRY
from shelly_dist.tools import control_files

Problem = tuple[str, str]


def project_dir(source: str | None) -> Path:
    """The project directory of a config file: the parent of ``.shelly/`` when the file is in one,
    else the file's own directory; the working directory for a config not read from a file."""
    if not source:
        return Path.cwd()
    folder = Path(source).resolve().parent
    return folder.parent if folder.name == ".shelly" else folder


class ProjectModules(importlib.abc.MetaPathFinder):
    """Finds the top-level names of ``python:`` in their project directory, and nothing else
    there: the project's other modules stay out of the import system (no ``sys.path`` entry)."""

    def __init__(self) -> None:
        self.roots: dict[str, str] = {}
        """Top-level module name → the project directory it is imported from."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        root = self.roots.get(fullname)
        if root is None or path is not None:  # a submodule: its package's __path__ finds it
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [root])


FINDER = ProjectModules()
"""The process's one finder, first on ``sys.meta_path`` once a config names a module."""


def _install(names: Iterable[str], project: Path) -> None:
    for name in names:
        FINDER.roots[name.split(".")[0]] = str(project)
    if FINDER not in sys.meta_path:
        sys.meta_path.insert(0, FINDER)


def _guard(names: Iterable[str], project: Path) -> None:
    """Make the modules and their packages control files: the project's top-level package or
    module of each name (whether it exists yet or not) and wherever the module was found."""
    what = "a module of python:, imported by every shelly process"
    for name in names:
        top = project / name.split(".")[0]
        control_files.register_all((top, top.with_suffix(".py")), what)
        control_files.register_all(_files(name), what)
        package = sys.modules.get(name.split(".")[0])
        control_files.register_all(getattr(package, "__path__", None) or (), what)


def import_modules(cfg: Config, project: Path) -> list[Problem]:
    """Import every module of ``cfg.python`` (their top-level names from ``project``, nothing else
    of it: see :class:`ProjectModules`); one problem per module that fails, with the module's own
    error. Each module (imported or not) becomes a control file of the process."""
    if not cfg.python:
        return []
    _install(cfg.python, project)
    importlib.invalidate_caches()
    out: list[Problem] = []
    for i, name in enumerate(cfg.python):
        try:
            importlib.import_module(name)
        except Exception as exc:  # the user's module may raise anything while it runs
            out.append((f"python[{i}]", f'cannot import "{name}": {type(exc).__name__}: {exc}'))
    _guard(cfg.python, project)
    return out


def problems(cfg: Config) -> Iterator[Problem]:
    """Every agent's hook, guardrail and Python tool mistake (toolbox names and provider kinds are
    checked with the built-in ones, by :mod:`shelly_dist.engine.config_rules`)."""
    mcp = {m.name for m in cfg.mcp_servers}
    for name in sorted(set(REGISTRY.toolboxes) & (set(BUILTIN_TOOLBOXES) | mcp)):
        yield "python", f'a Python toolbox is named "{name}" like a built-in toolbox or MCP server: rename it'
    for i, a in enumerate(cfg.agents):
        at = f"agents[{i}]"
        for j, name in enumerate(a.hooks):
            if name not in REGISTRY.hooks:
                yield f"{at}.hooks[{j}]", f'unknown hook "{name}"{_known(REGISTRY.hooks)}'
        for side, table in (("input", REGISTRY.input_guardrails), ("output", REGISTRY.output_guardrails)):
            for j, name in enumerate(getattr(a.guardrails, side)):
                if name not in table:
                    yield f"{at}.guardrails.{side}[{j}]", f'unknown {side} guardrail "{name}"{_known(table)}'
        yield from _duplicate_tools(at, a)


def _known(table: dict[str, Any]) -> str:
    return f" (registered: {', '.join(sorted(table))})" if table else " (no module of python: registers one)"


def _duplicate_tools(at: str, agent: AgentConfig) -> Iterator[Problem]:
    """Two Python tools of one name in one agent (from two toolboxes): the model could not tell
    which one it calls."""
    seen: dict[str, str] = {}
    for j, (box, keep) in enumerate(agent.toolbox_refs()):
        if box not in REGISTRY.toolboxes:
            continue
        for tool in REGISTRY.toolbox(box).filter(keep):
            if tool.name in seen and seen[tool.name] != box:
                yield f"{at}.toolboxes[{j}]", (
                    f'tool "{tool.name}" of toolbox "{box}" has the name of a tool of toolbox "{seen[tool.name]}"'
                )
            seen.setdefault(tool.name, box)


def hooks_for(spec: AgentConfig) -> list[Any]:
    """The agent's hooks in the order they run: input guardrails, ``hooks:``, output guardrails.
    Each hook is a fresh instance (it keeps what it remembers in ``ctx.state``, not on itself)."""
    from shelly_dist.extensions import GuardrailHook  # the chat types only where agents are built

    out: list[Any] = [GuardrailHook(n, REGISTRY.input_guardrails[n].obj, "input") for n in spec.guardrails.input]
    for name in spec.hooks:
        hook = REGISTRY.hooks[name].obj()
        if not getattr(hook, "name", ""):
            hook.name = name
        out.append(hook)
    out += [GuardrailHook(n, REGISTRY.output_guardrails[n].obj, "output") for n in spec.guardrails.output]
    return out


def python_tools(spec: AgentConfig) -> dict[str, str]:
    """The agent's Python tools (after its ``{name, tools}`` filters) → the function each calls."""
    out: dict[str, str] = {}
    for box, keep in spec.toolbox_refs():
        if box in REGISTRY.toolboxes and box not in BUILTIN_TOOLBOXES:
            origins = REGISTRY.tool_origins(box)
            out.update({t.name: origins[t.name] for t in REGISTRY.toolbox(box).filter(keep)})
    return out


def _files(name: str) -> list[Path]:
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    if not file:
        return []
    paths = getattr(module, "__path__", None)
    if paths:  # a package: every module in it, as any of them may register something
        return sorted(p for folder in paths for p in Path(folder).rglob("*.py"))
    return [Path(file)]


def source_digest(cfg: Config) -> str:
    """A hash of the source of the modules of ``cfg.python`` (empty when it lists none)."""
    if not cfg.python:
        return ""
    digest = hashlib.sha256()
    for name in cfg.python:
        digest.update(name.encode() + b"\0")
        for path in _files(name):
            digest.update(path.name.encode() + b"\0")
            try:
                digest.update(path.read_bytes())
            except OSError:
                continue
    return digest.hexdigest()[:16]
