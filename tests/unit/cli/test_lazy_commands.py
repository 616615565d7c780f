"""``shelly`` imports a command's module only when that command runs (STYLE lesson 21)."""

from __future__ import annotations

import subprocess
import sys

import click
import click.testing
import pytest

from shelly_dist.cli.main import COMMANDS, cli, needs_clean_environment

HEAVY = ("celery", "kombu", "aiohttp", "mcp", "a2a", "redis", "textual", "rich")


def test_the_entry_module_imports_no_heavy_dependency() -> None:
    code = (
        "import sys, shelly_dist.cli.main\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == []


def test_help_imports_no_command_module() -> None:
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom shelly_dist.cli.main import cli\n"
        "result = CliRunner().invoke(cli, ['--help'])\nassert result.exit_code == 0, result.output\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('shelly_dist.cli.')"
        " and m not in ('shelly_dist.cli.main', 'shelly_dist.cli.lazy', 'shelly_dist.cli.errors',"
        " 'shelly_dist.cli.explain', 'shelly_dist.cli.dotenv'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listing_shows_each_command_s_own_help(name: str) -> None:
    command = COMMANDS[name].load()
    listed = click.Command(name, help=COMMANDS[name].help).get_short_help_str(1000)
    assert listed == command.get_short_help_str(1000)
    assert command.name == name


def test_help_lists_every_command() -> None:
    result = click.testing.CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    listed = {line.split()[0] for line in result.output.split("Commands:")[1].splitlines() if line.strip()}
    assert listed == set(COMMANDS)


@pytest.mark.parametrize(
    ("argv", "clean"),
    [
        (["run", "hello"], True),
        (["-v", "worker"], True),
        (["mcp", "serve"], True),
        (["no-such-command"], True),
        (["state", "get", "k", "--session", "0123456789abcdef"], False),
        (["-vv", "runs", "--session", "x"], False),
        (["--help"], False),
        (["--version"], False),
        (["-v", "--help", "run"], False),
        ([], True),  # the chat on a terminal: its agents' tools start programs
        (["--agent", "state", "--session", "tasks"], True),  # option values are not commands
    ],
)
def test_only_commands_that_may_start_programs_re_execute_on_a_clean_environment(argv: list[str], clean: bool) -> None:
    assert needs_clean_environment(argv) is clean


def test_no_command_without_a_terminal_prints_the_help_as_before() -> None:
    result = click.testing.CliRunner().invoke(cli, [])
    assert result.exit_code == 2 and "Commands:" in result.output and "chat" in result.output


def test_a_blackboard_read_imports_no_model_machinery() -> None:
    """What ``shelly state get`` loads (its command, the config, the stores) leaves out the chat
    types, the providers and the pool: the CPU test's budget, held without timing."""
    code = (
        "import sys\nimport shelly_dist.cli.state, shelly_dist.engine.stores, shelly_dist.state.redis\n"
        "from shelly_dist.engine.config import parse_config\n"
        "parse_config('providers: [{name: p, kind: openai, model: m}]\\nagents: [{name: a}]\\n', {})\n"
        "heavy = ('celery', 'kombu', 'aiohttp', 'mcp', 'a2a', 'textual', 'prometheus_client', 'rich',\n"
        "         'shelly_dist.chats', 'shelly_dist.providers', 'shelly_dist.runtime')\n"
        "print(' '.join(sorted({h for h in heavy for m in sys.modules if m == h or m.startswith(h + '.')})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == []
