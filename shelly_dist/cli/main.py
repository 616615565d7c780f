"""The ``shelly`` command: a click group, one module per command.

Commands are imported when run (:class:`~shelly_dist.cli.lazy.LazyGroup`), so ``--help`` and the
small commands start in a fraction of a second. ``main`` first re-executes itself on a clean
environment block when the command may start programs, so that none a tool starts can read the
process's secrets in ``/proc/<ppid>/environ`` (:mod:`shelly_dist.cleanenv`), then loads ``.env``
from the working directory, or the file ``--env-file`` names (real environment variables win; an
implicit ``.env`` may not choose the config, state, proxies or CA files: :mod:`.dotenv`), then
hands over to click. Logging is
configured here and only here: a rich handler on stderr, WARNING by default, ``-v`` for INFO,
``-vv`` for DEBUG. Commands stay thin (parse, open the engine, ``asyncio.run``, render) and map
failures to exit codes through :mod:`shelly_dist.cli.errors`.
"""

from __future__ import annotations

import logging
import sys

import click

from shelly_dist import __version__
from shelly_dist.cleanenv import reexec_without_secrets
from shelly_dist.cli.dotenv import load_dotenv, skipped_warning
from shelly_dist.cli.errors import fail
from shelly_dist.cli.lazy import LazyCommand, LazyGroup

COMMANDS = {
    "a2a": LazyCommand(
        "shelly_dist.cli.a2a:a2a_group", "Agent2Agent (A2A v1.0): serve an agent to other agent platforms."
    ),
    "agents": LazyCommand("shelly_dist.cli.agents:agents_command", "List the configured agents."),
    "answer": LazyCommand(
        "shelly_dist.cli.questions:answer_command",
        "Answer decision QUESTION_ID with TEXT (an ask_user question; an approval with yes or no [reason]); the "
        "asking run resumes on any worker.",
        starts_programs=False,
    ),
    "approve": LazyCommand(
        "shelly_dist.cli.decisions:approve_command",
        "Approve gated tool call DECISION_ID (or --all matching): it runs, on any worker.",
        starts_programs=False,
    ),
    "batch": LazyCommand(
        "shelly_dist.cli.batch:batch_command",
        "Run every task of a JSONL file, each in its own session, writing one line per result.",
    ),
    "cancel": LazyCommand(
        "shelly_dist.cli.cancel:cancel_command",
        "Cancel RUN_ID's whole tree (or all of --session): in-flight steps stop, queued ones never start.",
        starts_programs=False,
    ),
    "chat": LazyCommand(
        "shelly_dist.cli.chat.command:chat_command",
        "Talk with the team in the terminal (what `shelly` opens on a terminal).",
    ),
    "channel": LazyCommand(
        "shelly_dist.cli.team:channel_command",
        "Print the session's channel (every kind: what people may see).",
        starts_programs=False,
    ),
    "config": LazyCommand(
        "shelly_dist.cli.config_wizard:config_command",
        "Create or change .shelly/config.yaml with a few questions (keys as ${VAR} references).",
        starts_programs=False,
    ),
    "decisions": LazyCommand(
        "shelly_dist.cli.decisions:decisions_command",
        "List every decision waiting for a person: questions (ask_user) and approvals of gated tool calls, across "
        "all sessions and batches (id, kind, session, run path, agent, tool and arguments, asked at, times out at).",
        starts_programs=False,
    ),
    "docs": LazyCommand(
        "shelly_dist.cli.team:docs_command", "Print the document NAME, or list the documents.", starts_programs=False
    ),
    "doctor": LazyCommand(
        "shelly_dist.cli.doctor:doctor_command", "Check the config, Redis, the broker and the workers on the queue."
    ),
    "events": LazyCommand(
        "shelly_dist.cli.events:events_command",
        "Print the events of a session (runs started, messages, tool calls, warnings, finished): from Redis on "
        "a pool, else from the state directory where embedded runs record them.",
        starts_programs=False,
    ),
    "flower": LazyCommand("shelly_dist.cli.flower:flower_command", "Run Flower (extra arguments go to Flower)."),
    "inbox": LazyCommand(
        "shelly_dist.cli.team:inbox_command", "Print AGENT's unacked messages as JSON.", starts_programs=False
    ),
    "index": LazyCommand(
        "shelly_dist.cli.index:index_command",
        "Build or update the project knowledge graph (.shelly/context.md and .shelly/knowledge/).",
    ),
    "init": LazyCommand(
        "shelly_dist.cli.init:init_command",
        "Create .shelly/ (config, context, skills) from a template; existing files are kept.",
        starts_programs=False,
    ),
    "mcp": LazyCommand(
        "shelly_dist.cli.mcp:mcp_group", "Model Context Protocol: serve shelly's toolboxes and agents to MCP clients."
    ),
    "questions": LazyCommand(
        "shelly_dist.cli.questions:questions_command",
        "List the session's open ask_user questions (id, agent, run, text, options).",
        starts_programs=False,
    ),
    "reject": LazyCommand(
        "shelly_dist.cli.decisions:reject_command",
        "Reject gated tool call DECISION_ID (or --all matching): the tool never runs; the model reads that it "
        "was rejected, and why.",
        starts_programs=False,
    ),
    "run": LazyCommand(
        "shelly_dist.cli.run:run_command", "Run TASK (or stdin) through the team and print the final answer."
    ),
    "runs": LazyCommand(
        "shelly_dist.cli.runs:runs_command",
        "Show the session's run tree: agent, status, worker, and what each run and its subtree spent.",
        starts_programs=False,
    ),
    "send": LazyCommand(
        "shelly_dist.cli.team:send_command",
        "Post MESSAGE to the session's channel as `user` (@mentions wake those agents).",
        starts_programs=False,
    ),
    "serve": LazyCommand(
        "shelly_dist.cli.serve:serve_command",
        "Serve the REST API, the event streams and the web console (http://127.0.0.1:8700/).",
    ),
    "sessions": LazyCommand(
        "shelly_dist.cli.sessions:sessions_command",
        "List the saved sessions: id, agent, last update, messages and the last task.",
        starts_programs=False,
    ),
    "state": LazyCommand(
        "shelly_dist.cli.state:state_group",
        "Read and write a session's blackboard (needs the Redis backend).",
        starts_programs=False,
    ),
    "steer": LazyCommand(
        "shelly_dist.cli.decisions:steer_command",
        "Say TEXT to a run while it works (the session's top-level run unless --agent or --run): it joins the "
        "run's chat before its next model call, on whatever worker continues it.",
        starts_programs=False,
    ),
    "tasks": LazyCommand(
        "shelly_dist.cli.tasks:tasks_group",
        "Inspect and change a session's task board (needs the Redis backend).",
        starts_programs=False,
    ),
    "worker": LazyCommand(
        "shelly_dist.cli.worker:worker_command", "Run a worker that advances delegated runs from the queue."
    ),
    "workflow": LazyCommand(
        "shelly_dist.cli.workflow:workflow_group", "Run a team of agents that talk through a channel (a workflow file)."
    ),
}
"""Every command, imported only when run. Small commands (``starts_programs=False``) start no
tool, MCP server or pool, so they skip the clean-environment re-exec."""


class RichOnFirstLine(logging.Handler):
    """A rich handler on stderr, built when the first line is logged: most commands log nothing,
    and importing rich would cost each of them tens of milliseconds at start."""

    def __init__(self) -> None:
        super().__init__()
        self._rich: logging.Handler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self._rich is None:
            from rich.console import Console
            from rich.logging import RichHandler

            self._rich = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False)
            self._rich.setFormatter(self.formatter)
        self._rich.emit(record)


def configure_logging(verbose: int) -> None:
    """Rich log lines on stderr, or JSON lines with ``SHELLY_LOG_FORMAT=json``; the level from
    the number of ``-v``."""
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
        handler = RichOnFirstLine()
    logging.basicConfig(level=level, format="%(message)s", handlers=[handler], force=True)


CHAT_OPTIONS = ("--agent", "--session", "--config", "--shelly-dir", "--env-file")
"""The group's own options that take a value: the chat's, when no command is given, and
``--env-file``."""


@click.group(cls=LazyGroup, lazy=COMMANDS, invoke_without_command=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="shelly")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-v info, -vv debug).")
@click.option("--agent", default=None, help="The chat: agent to talk with (default: the entry agent).")
@click.option("--session", "session_id", default=None, help="The chat: continue a saved session by id.")
@click.option("--config", "config_path", default=None, help="The chat: config file.")
@click.option("--shelly-dir", default=".shelly", help="The chat: the .shelly directory.")
@click.option("--env-file", default=None, metavar="PATH",
              help="Read variables from PATH instead of ./.env, all of them (an implicit .env may not set "
                   "SHELLY_CONFIG, SHELLY_STATE_DIR, proxies or CA files).")
@click.pass_context
def cli(ctx: click.Context, verbose: int, agent: str | None, session_id: str | None, config_path: str | None,
        shelly_dir: str, env_file: str | None) -> None:
    """shelly: teams of LLM agents, embedded or on a Celery worker pool.

    With no command, on a terminal: the chat with the entry agent (/help inside lists its commands).
    """
    configure_logging(verbose)
    configure_tracing()
    if ctx.invoked_subcommand is not None:
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()):  # a pipe, CI, a script: the help, as before
        raise click.exceptions.NoArgsIsHelpError(ctx)
    from shelly_dist.cli.chat.command import open_chat

    open_chat(agent=agent, session_id=session_id, config_path=config_path, shelly_dir=shelly_dir)


def configure_tracing() -> None:
    """OpenTelemetry from the standard ``OTEL_*`` variables (a no-op without them); the spans still
    buffered are exported when the process exits."""
    import atexit

    from shelly_dist.observability import tracing

    if tracing.configure_from_env("shelly"):
        atexit.register(tracing.shutdown)


def command_of(argv: list[str]) -> str | None:
    """The command ``argv`` (without the program name) runs: its first word that is neither an
    option nor an option's value; ``"chat"`` when there is none; ``None`` for ``--help`` or
    ``--version`` before it, which start no program."""
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help", "--version"):
            return None
        if word in CHAT_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return "chat"


def env_file_of(argv: list[str]) -> str | None:
    """The path ``--env-file`` names among the group's options (before the command), if any."""
    words = iter(argv)
    for word in words:
        if word == "--env-file":
            return next(words, None)
        if word.startswith("--env-file="):
            return word.partition("=")[2]
        if word in CHAT_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            return None
    return None


def load_env(argv: list[str]) -> None:
    """Load ``--env-file`` (every variable) or ``./.env`` (not the refused ones: a warning names
    them); either file becomes a control file of the process, which no tool may change."""
    import os

    from shelly_dist.tools import control_files

    named = env_file_of(argv)
    if named is not None and not os.path.isfile(named):
        from shelly_dist.errors import UsageError

        fail(UsageError(f"--env-file: no such file: {named}"))
    path = named or ".env"
    control_files.register(os.path.abspath(path), "the environment file shelly loads at start")
    skipped: list[str] = []
    load_dotenv(path, explicit=named is not None, skipped=skipped)
    if skipped:
        sys.stderr.write(skipped_warning(path, skipped) + "\n")


def needs_clean_environment(argv: list[str]) -> bool:
    """Whether ``argv`` runs a command that may start programs, which must not find the secrets in
    this process's initial environment block (``/proc/<ppid>/environ``): tools, MCP servers, a
    worker pool. ``--help``, ``--version`` and the small commands that only read or write Redis
    skip the re-exec and start in a fraction of a second."""
    name = command_of(argv)
    return name is not None and cli.starts_programs(name)  # type: ignore[attr-defined]


def main() -> None:
    """Console-script entry point: whatever escapes a command (an import inside Celery's worker,
    say) is mapped to its one line and exit code here, never a traceback."""
    if needs_clean_environment(sys.argv[1:]):
        reexec_without_secrets()
    load_env(sys.argv[1:])
    try:
        cli(prog_name="shelly")
    except Exception as exc:
        fail(exc)


if __name__ == "__main__":
    main()
