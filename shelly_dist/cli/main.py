"""The ``shelly`` command: a click group, one module per command.

``main`` first re-executes itself on a clean environment block, so that no program a tool starts
can read the process's secrets in ``/proc/<ppid>/environ`` (:mod:`shelly_dist.cleanenv`), then
loads ``.env`` from the working directory (real environment variables win), then
hands over to click. Logging is configured here and only here: a rich handler on stderr, WARNING
by default, ``-v`` for INFO, ``-vv`` for DEBUG. Commands stay thin (parse, open the engine,
``asyncio.run``, render) and map failures to exit codes through :mod:`shelly_dist.cli.errors`.
"""

from __future__ import annotations

import logging

import click

from shelly_dist import __version__
from shelly_dist.cleanenv import reexec_without_secrets
from shelly_dist.cli.a2a import a2a_group
from shelly_dist.cli.agents import agents_command
from shelly_dist.cli.batch import batch_command
from shelly_dist.cli.cancel import cancel_command
from shelly_dist.cli.decisions import approve_command, decisions_command, reject_command, steer_command
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
from shelly_dist.cli.serve import serve_command
from shelly_dist.cli.sessions import sessions_command
from shelly_dist.cli.state import state_group
from shelly_dist.cli.tasks import tasks_group
from shelly_dist.cli.team import channel_command, docs_command, inbox_command, send_command
from shelly_dist.cli.worker import worker_command
from shelly_dist.cli.workflow import workflow_group


def configure_logging(verbose: int) -> None:
    """Rich log lines on stderr, or JSON lines with ``SHELLY_LOG_FORMAT=json``; the level from
    the number of ``-v``."""
    from rich.console import Console
    from rich.logging import RichHandler

    from shelly_dist.observability.logs import JsonFormatter, log_format

    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    try:
        structured = log_format() == "json"
    except Exception as exc:
        fail(exc)
    handler: logging.Handler
    if structured:
        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter())
    else:
        handler = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)
    logging.basicConfig(level=level, format="%(message)s", handlers=[handler], force=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="shelly")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """shelly: teams of LLM agents, embedded or on a Celery worker pool."""
    configure_logging(verbose)
    configure_tracing()


def configure_tracing() -> None:
    """OpenTelemetry from the standard ``OTEL_*`` variables (a no-op without them); the spans still
    buffered are exported when the process exits."""
    import atexit

    from shelly_dist.observability import tracing

    if tracing.configure_from_env("shelly"):
        atexit.register(tracing.shutdown)


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
cli.add_command(sessions_command)
cli.add_command(cancel_command)
cli.add_command(questions_command)
cli.add_command(answer_command)
cli.add_command(decisions_command)
cli.add_command(approve_command)
cli.add_command(reject_command)
cli.add_command(steer_command)
cli.add_command(flower_command)
cli.add_command(mcp_group)
cli.add_command(a2a_group)
cli.add_command(serve_command)
cli.add_command(doctor_command)
cli.add_command(workflow_group)
for _team_command in (send_command, channel_command, inbox_command, docs_command):
    cli.add_command(_team_command)


def main() -> None:
    """Console-script entry point: whatever escapes a command (an import inside Celery's worker,
    say) is mapped to its one line and exit code here, never a traceback."""
    reexec_without_secrets()
    load_dotenv(".env")
    try:
        cli(prog_name="shelly")
    except Exception as exc:
        fail(exc)


if __name__ == "__main__":
    main()
