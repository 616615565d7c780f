"""A click group whose commands are imported when run, not when listed (STYLE lesson 21).

``shelly --help`` and ``shelly state get`` would otherwise import every command module and with
them aiohttp, the providers, every tool, MCP, A2A and Celery: over a second of CPU before anything
happens. :class:`LazyGroup` knows each command by a :class:`LazyCommand` — where it lives, its
one-line help for the listing, and whether it may start programs (which decides the clean-env
re-exec in :mod:`shelly_dist.cli.main`) — and imports the module only when click resolves that
command. ``tests/unit/cli/test_lazy_commands.py`` checks each listed help line against the command's own.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import click


@dataclass(frozen=True)
class LazyCommand:
    """A command known by where it lives: ``target`` is ``"module:attribute"``."""

    target: str
    help: str
    starts_programs: bool = True
    """Whether the command may start programs that could read the process's initial environment
    (tools, MCP servers, a worker pool, Flower): such commands run on a clean environment block
    (:func:`shelly_dist.cleanenv.reexec_without_secrets`). Unknown commands count as yes."""

    def load(self) -> click.Command:
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"cli: {self.target} is not a click command")
        return command


class LazyGroup(click.Group):
    """A group of :class:`LazyCommand`; ``add_command`` still takes ready commands."""

    def __init__(self, *args: object, lazy: dict[str, LazyCommand] | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self.lazy:
            command = self.lazy[cmd_name].load()
            self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The listing from the table, so ``--help`` imports no command module."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in self.commands:
                rows.append((name, self.commands[name].get_short_help_str(limit)))
            else:
                rows.append((name, click.Command(name, help=self.lazy[name].help).get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def starts_programs(self, name: str | None) -> bool:
        """Whether running command ``name`` may start programs (unknown names: yes)."""
        entry = self.lazy.get(name or "")
        return entry is None or entry.starts_programs
