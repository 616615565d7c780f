"""Toolboxes by the names a config lists: ``state``/``tasks``, the built-ins, MCP servers.

- ``state`` and ``tasks`` are the **session's** blackboard and task board (``shared_state_*``,
  ``shared_tasks_*``), so every agent of one session shares them.
- ``team`` is the session's team workspace (``channel_send``, ``my_inbox``, ``team_doc_*``, …;
  see ``shelly_dist/workspace``), built per agent so that agent is always the sender.
- ``filesystem``, ``exec``, ``search``, ``git``, ``http``, ``notes`` are built once per engine on
  first use and share one permission store (Shelly: the permission-gated toolboxes share one
  store). The process CWD is pre-approved, as in Shelly.
- an MCP server's name is that server's toolbox (connected at engine start-up); a server named
  like a built-in toolbox is not connected, and the name means the built-in (as in Shelly, whose
  built-ins are wired after the MCP servers under the same name).
- ``ask`` (``ask_user``) is given to **every** agent, first, as in Shelly, whether it lists
  ``ask`` or not; who answers is the engine's :class:`~shelly_dist.tools.builtin.ask.Answerer`
  (a terminal for ``shelly run`` on one; otherwise the call is an error result saying how to get
  an answer channel). It waits at most the agent's ``options.question_timeout``.

- a toolbox registered by a module of ``python:`` (``@tool(toolbox="orders")``) under its name;
  its tools get the agent's tool policy and ``{name, tools}`` filter like any other. A Python tool
  named like another tool of the same agent is a ``ConfigError`` when the agent is built.

A ``{name, tools}`` reference keeps only the listed tools (``ToolBox.filter``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path

from shelly_dist.engine.config_models import AgentConfig, Config
from shelly_dist.engine.shellydir import ShellyDir
from shelly_dist.engine.stores import SessionStores
from shelly_dist.errors import ConfigError
from shelly_dist.extensions import REGISTRY
from shelly_dist.state import state_tools
from shelly_dist.tasks import task_tools
from shelly_dist.tools import ToolBox
from shelly_dist.tools.builtin.ask import Responder
from shelly_dist.workspace import USER
from shelly_dist.workspace.tools import team_tools

HEADLESS_SKIPPED = frozenset({"ask"})
"""Toolboxes ``shelly mcp serve`` leaves out by default: an MCP client asks its own user."""

class Toolboxes:
    """Builds the toolboxes of each agent instance. Thread-safe."""

    def __init__(
        self,
        config: Config,
        shelly_dir: ShellyDir,
        stores: SessionStores,
        mcp: Mapping[str, ToolBox] | None = None,
    ) -> None:
        self.config = config
        self.shelly_dir = shelly_dir
        self.stores = stores
        self.mcp = dict(mcp or {})
        self._builtins: dict[str, ToolBox] = {}
        self._permissions: object | None = None
        self._lock = threading.Lock()
        self.permissions_file: Path = shelly_dir.permissions
        """Where the persisted grants are (the engine re-points it: see ``engine.legacy``)."""
        self.responder = Responder()
        """Numbers and routes ``ask_user`` questions; the engine sets its answerer and notifier."""
        self.approver: object | None = None
        """Who answers permission questions: ``None`` refuses (headless, the default everywhere a
        person cannot answer); ``shelly run`` on a terminal sets an interactive one."""

    def prepare(self) -> None:
        """Build every built-in toolbox some agent references (blocking: reads permissions).

        Called once at engine start-up, in a thread, so agent factories never do file I/O.
        """
        from shelly_dist.tools.builtin import BUILTIN_NAMES

        for name in BUILTIN_NAMES:
            if self.config.uses_toolbox(name):
                self._builtin(name)

    def for_agent(self, spec: AgentConfig, session: str) -> list[ToolBox]:
        """The toolboxes of one instance of ``spec`` in ``session``: ``ask`` first, then the
        config's in config order (a repeated name, or ``ask`` itself, is skipped as in Shelly)."""
        out = [self.responder.toolbox(spec.options.question_timeout)]
        seen = {"ask"}
        for name, tools in spec.toolbox_refs():
            if name not in seen:
                seen.add(name)
                out.append(self.named(name, session, agent=spec.name).filter(tools))
        _no_python_tool_twice(spec.name, out)
        return out

    def named(self, name: str, session: str, *, agent: str = USER) -> ToolBox:
        """The toolbox ``name`` for ``session`` (``team``: as member ``agent``, by default the
        outside ``user``)."""
        if name == "team":
            return team_tools(self.stores.workspace(session), agent)
        if name == "ask":
            return self.responder.toolbox()
        if name == "state":
            return state_tools(self.stores.store(session))
        if name == "tasks":
            return task_tools(self.stores.board(session))
        from shelly_dist.tools.builtin import BUILTIN_NAMES

        if name in self.mcp and name not in BUILTIN_NAMES:
            return self.mcp[name]
        if name in REGISTRY.toolboxes and name not in BUILTIN_NAMES:
            return REGISTRY.toolbox(name)
        return self._builtin(name)

    def _builtin(self, name: str) -> ToolBox:
        from shelly_dist.tools.builtin import BUILTIN_NAMES, builtin_toolbox

        if name not in BUILTIN_NAMES:
            raise ConfigError(f'engine: unknown toolbox "{name}"', field="toolboxes")
        with self._lock:
            if name not in self._builtins:
                self._builtins[name] = builtin_toolbox(
                    name, self._perms(), root=self.root, notes_dir=self.shelly_dir.notes
                )
            return self._builtins[name]

    @property
    def root(self) -> Path:
        """The project root tools work in: ``git.work_dir`` when set, else the CWD."""
        return Path(self.config.git.work_dir or os.getcwd()).resolve()

    def _perms(self):  # type: ignore[no-untyped-def]  # Permissions, imported lazily
        from shelly_dist.tools import control_files
        from shelly_dist.tools.permissions import Permissions

        if self._permissions is None:
            p = self.config.permissions
            store = self.permissions_file
            if not self.shelly_dir.exists() and self.config.filesystem.permissions_file:
                store = Path(self.config.filesystem.permissions_file)
            self._permissions = Permissions.load(
                store,
                root=os.getcwd(),
                fs_directories=p.fs_directories,
                trusted_commands=p.trusted_commands,
                trusted_domains=p.trusted_domains,
                exec_env=p.exec_env,
                approver=self.approver,  # type: ignore[arg-type]
                protected=(self.shelly_dir.root, self.shelly_dir.local),
                controls=control_files.project_files(self.shelly_dir.project_root),
                writable=((self.shelly_dir.root / "context.md", self.shelly_dir.root / "knowledge")
                          if self.config.knowledge_writes else ()),
            )
        return self._permissions


def _no_python_tool_twice(agent: str, boxes: list[ToolBox]) -> None:
    """A Python tool must not share its name with another tool of the agent (which one would the
    model call?); built-ins and MCP servers keep Shelly's rule (the first one wins)."""
    owner: dict[str, str] = {}
    for box in boxes:
        python = box.name in REGISTRY.toolboxes
        for tool in box:
            other = owner.get(tool.name)
            if other is not None and (python or other in REGISTRY.toolboxes):
                raise ConfigError(
                    f'agent "{agent}": two tools named "{tool.name}" (toolboxes "{other}" and "{box.name}")',
                    field="toolboxes",
                )
            owner.setdefault(tool.name, box.name)
