"""The ``shelly`` command: a click group, one module per command.

``main`` loads ``.env`` from the working directory first (real environment variables win), then
hands over to click. Logging is configured here and only here: a rich handler on stderr, WARNING
by default, ``-v`` for INFO, ``-vv`` for DEBUG. Commands stay thin (parse, open the engine,
``asyncio.run``, render) and map failures to exit codes through :mod:`shelly_dist.cli.errors`.
"""

from __future__ import annotations

import logging

import click

from shelly_dist import __version__
from shelly_dist.cli.agents import agents_command
from shelly_dist.cli.batch import batch_command
from shelly_dist.cli.cancel import cancel_command
from shelly_dist.cli.doctor import doctor_command
from shelly_dist.cli.dotenv import load_dotenv
from shelly_dist.cli.errors import fail
from shelly_dist.cli.events import events_command
from shelly_dist.cli.flower import flower_command
from shelly_dist.cli.index import index_command
from shelly_dist.cli.init import init_command
from shelly_dist.cli.mcp import mcp_group
from shelly_dist.cli.questions import answer_command, questions_command
from shelly_dist.cli.run import run_command
from shelly_dist.cli.runs import runs_command
from shelly_dist.cli.state import state_group
from shelly_dist.cli.tasks import tasks_group
from shelly_dist.cli.worker import worker_command
from shelly_dist.cli.workflow import workflow_group


def configure_logging(verbose: int) -> None:
    """Rich log lines on stderr; the level from the number of ``-v``."""
    from rich.console import Console
    from rich.logging import RichHandler

    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)
    logging.basicConfig(level=level, format="%(message)s", handlers=[handler], force=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="shelly")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """shelly: teams of LLM agents, embedded or on a Celery worker pool."""
    configure_logging(verbose)


cli.add_command(init_command)
cli.add_command(index_command)
cli.add_command(run_command)
cli.add_command(agents_command)
cli.add_command(batch_command)
cli.add_command(state_group)
cli.add_command(tasks_group)
cli.add_command(worker_command)
cli.add_command(events_command)
cli.add_command(runs_command)
cli.add_command(cancel_command)
cli.add_command(questions_command)
cli.add_command(answer_command)
cli.add_command(flower_command)
cli.add_command(mcp_group)
cli.add_command(doctor_command)
cli.add_command(workflow_group)


def main() -> None:
    """Console-script entry point: whatever escapes a command (an import inside Celery's worker,
    say) is mapped to its one line and exit code here, never a traceback."""
    load_dotenv(".env")
    try:
        cli(prog_name="shelly")
    except Exception as exc:
        fail(exc)


if __name__ == "__main__":
    main()
