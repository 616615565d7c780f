"""``shelly decisions``, ``approve``, ``reject`` and ``steer``: people in the loop of a worker pool.

Every decision waiting for a person — ``ask_user`` questions and approvals of gated tool calls —
waits in Redis holding no worker, indexed across all sessions and batches. These commands list
them and decide them from any machine that reaches the config's Redis and broker (``shelly
answer`` answers a question, or an approval with ``yes``/``no``); ``steer`` says something to a
run while it works. Each is a thin shell over :class:`~shelly_dist.engine.decisions.Decisions`,
the API a web console and ``Session`` use too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from shelly_dist.cli.errors import fail, run_async
from shelly_dist.cli.options import config_options, json_option
from shelly_dist.errors import UsageError

if TYPE_CHECKING:
    from shelly_dist.engine.decisions import Decisions
    from shelly_dist.tools.decisions import Verdict


async def with_decisions(config_path: str | None, shelly_dir: str, fn: Any) -> Any:
    """Run ``fn(decisions)`` over the config's pool (no engine built: nothing but Redis and the
    broker is opened)."""
    from shelly_dist.cli.distributed import load_settings
    from shelly_dist.engine.decisions import Decisions
    from shelly_dist.runtime.celery.client.coordinator import CeleryRuntime

    runtime = CeleryRuntime(load_settings(config_path, shelly_dir), fingerprint="")
    try:
        return await fn(Decisions(pool=runtime))
    finally:
        await runtime.aclose()


def batch_of(value: str | None) -> str | None:
    """``--batch``: a batch's output file (its journal, whose path names the batch) or its label
    (``--batch-id``)."""
    if value is None:
        return None
    from shelly_dist.cli.batch_pool import batch_identity

    return batch_identity(Path(value)) if Path(value).is_file() else value


def _ago(t: float) -> str:
    s = max(0, int(time.time() - t))
    return f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s // 3600}h"


def line(d: dict[str, Any]) -> str:
    """One decision on one line (``shelly decisions``)."""
    from shelly_dist.tools.decisions import path_text

    what = (f"{d['tool']} {json.dumps(d.get('arguments'), ensure_ascii=False)}" if d["kind"] == "approval"
            else d.get("text", "") + (f"  [{' / '.join(d['options'])}]" if d.get("options") else ""))
    due = f"  times out in {max(0, int(d['times_out'] - time.time()))}s" if d.get("times_out") else ""
    return (f"{d['id']}  {d['kind']}  session={d['session']}  {path_text(d.get('path') or [d['agent']])}  {what}"
            f"  asked {_ago(d['asked'])} ago{due}")


@click.command("decisions")
@click.option("--session", "session_id", default=None, help="Only this session's decisions.")
@click.option("--agent", default=None, help="Only those asked by this agent (config or instance name, or on its path).")
@click.option("--kind", type=click.Choice(["question", "approval"]), default=None, help="Only this kind.")
@json_option
@config_options
def decisions_command(session_id: str | None, agent: str | None, kind: str | None, as_json: bool,
                      config_path: str | None, shelly_dir: str) -> None:
    """List every decision waiting for a person: questions (ask_user) and approvals of gated tool
    calls, across all sessions and batches (id, kind, session, run path, agent, tool and arguments,
    asked at, times out at)."""

    async def main(decisions: Decisions) -> None:
        found = await decisions.list(session=session_id, agent=agent, kind=kind)
        if as_json:
            click.echo(json.dumps(found, ensure_ascii=False))
            return
        if not found:
            click.echo("no pending decisions" + (f" in session {session_id}" if session_id else ""), err=True)
        for d in found:
            click.echo(line(d))

    run_async(with_decisions(config_path, shelly_dir, main))


def _bulk_options(f: Any) -> Any:
    f = click.option("--batch", default=None,
                     help="With --all: only this batch's (its --output file or --batch-id).")(f)
    f = click.option("--tool", default=None, help="With --all: only approvals of this tool.")(f)
    f = click.option("--all", "all_", is_flag=True, help="Decide every pending approval matching the filters.")(f)
    f = click.option("--always", is_flag=True,
                     help="Sticky: this tool's later calls in the session (or batch) get the same verdict at once.")(f)
    return click.option("--session", "session_id", default=None, help="The session id (16 hex characters).")(f)


def _target(what: str, decision_id: str | None, session_id: str | None, all_: bool, tool: str | None,
            batch: str | None) -> None:
    """Usage problems of an approve/reject command line, each a one-line error."""
    if all_ and decision_id:
        raise UsageError(f"{what}: give a decision id or --all, not both")
    if not all_ and not decision_id:
        raise UsageError(f"{what}: give the decision id (see `shelly decisions`) or --all")
    if not all_ and not session_id:
        raise UsageError(f"{what}: --session is required with a decision id")
    if not all_ and (tool or batch):
        raise UsageError(f"{what}: --tool and --batch filter --all")


def _decide(verb: str, verdict_of: Callable[[str], Verdict], decision_id: str | None, session_id: str | None,
            all_: bool, tool: str | None, batch: str | None, config_path: str | None, shelly_dir: str) -> None:
    """``shelly approve``/``reject``: one decision, or ``--all`` matching (printing how many)."""
    from shelly_dist.engine.decisions import who

    past = f"{verb}d" if verb.endswith("e") else f"{verb}ed"

    async def main(decisions: Decisions) -> None:
        verdict = verdict_of(who("cli"))
        if all_:
            n = await decisions.decide_all(verdict, tool=tool, session=session_id, batch=batch_of(batch))
            click.echo(f"{past} {n}")
            return
        assert decision_id is not None and session_id is not None
        await decisions.decide(session_id, decision_id, verdict)
        click.echo(f"{past} {decision_id}", err=True)

    run_async(with_decisions(config_path, shelly_dir, main))


@click.command("approve")
@click.argument("decision_id", required=False)
@click.option("--args", "arguments", default=None, help="Run it with these arguments (a JSON object) instead.")
@_bulk_options
@config_options
def approve_command(decision_id: str | None, arguments: str | None, session_id: str | None, always: bool, all_: bool,
                    tool: str | None, batch: str | None, config_path: str | None, shelly_dir: str) -> None:
    """Approve gated tool call DECISION_ID (or --all matching): it runs, on any worker."""
    from shelly_dist.tools.decisions import Verdict, check_arguments

    try:
        _target("approve", decision_id, session_id, all_, tool, batch)
        if all_ and arguments:
            raise UsageError("approve: --args edits one call: give a decision id, not --all")
        edited = check_arguments(arguments) if arguments is not None else None
    except (UsageError, ValueError) as exc:
        fail(exc if isinstance(exc, UsageError) else UsageError(f"approve: {exc}"))
    _decide("approve", lambda by: Verdict.approve(arguments=edited, by=by, always=always), decision_id, session_id,
            all_, tool, batch, config_path, shelly_dir)


@click.command("reject")
@click.argument("decision_id", required=False)
@click.option("--reason", default="", help="Why: the model reads it in the call's result.")
@_bulk_options
@config_options
def reject_command(decision_id: str | None, reason: str, session_id: str | None, always: bool, all_: bool,
                   tool: str | None, batch: str | None, config_path: str | None, shelly_dir: str) -> None:
    """Reject gated tool call DECISION_ID (or --all matching): the tool never runs; the model reads
    that it was rejected, and why."""
    from shelly_dist.tools.decisions import Verdict

    try:
        _target("reject", decision_id, session_id, all_, tool, batch)
    except UsageError as exc:
        fail(exc)
    _decide("reject", lambda by: Verdict.reject(reason, by=by, always=always), decision_id, session_id, all_, tool,
            batch, config_path, shelly_dir)


@click.command("steer")
@click.argument("text")
@click.option("--session", "session_id", required=True, help="The session id (16 hex characters).")
@click.option("--agent", default=None, help="The live run of this agent (config or instance name).")
@click.option("--run", "run_id", default=None, help="This run (see `shelly runs`).")
@click.option("--interrupt", is_flag=True, help="Also skip the step's tool calls not started yet.")
@config_options
def steer_command(text: str, session_id: str, agent: str | None, run_id: str | None, interrupt: bool,
                  config_path: str | None, shelly_dir: str) -> None:
    """Say TEXT to a run while it works (the session's top-level run unless --agent or --run): it
    joins the run's chat before its next model call, on whatever worker continues it."""
    from shelly_dist.engine.decisions import who

    if agent and run_id:
        fail(UsageError("steer: give --agent or --run, not both"))

    async def main(decisions: Decisions) -> None:
        target = await decisions.steer(session_id, text, agent=agent, run=run_id, interrupt=interrupt, by=who("cli"))
        click.echo(f"steered run {target}", err=True)

    run_async(with_decisions(config_path, shelly_dir, main))
