"""``shelly questions`` and ``shelly answer``: the ``ask_user`` questions of runs on the pool.

A run that asks the user with no terminal attached (on a worker, in a batch, a piped ``shelly
run``) waits in Redis holding no worker. These commands list the open questions of a session and
answer one, from any machine that reaches the config's Redis and broker.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from shelly_dist.cli.distributed import load_settings
from shelly_dist.cli.errors import run_async
from shelly_dist.cli.options import config_options, json_option, session_option

if TYPE_CHECKING:
    from rich.console import Console

    from shelly_dist.engine.eventbus import Subscription


def _line(q: dict[str, Any]) -> str:
    options = f"  [{' / '.join(q['options'])}]" if q.get("options") else ""
    return f"{q['id']}  {q.get('agent', '?')}  run={q.get('run', '?')}  {q.get('text', '')}{options}"


async def _with_pool(config_path: str | None, shelly_dir: str, fn: Any) -> Any:
    from shelly_dist.runtime.celery.client.coordinator import CeleryRuntime

    runtime = CeleryRuntime(load_settings(config_path, shelly_dir), fingerprint="")
    try:
        return await fn(runtime)
    finally:
        await runtime.aclose()


async def announce_questions(events: Subscription, console: Console, session: str, asked_here: str | None) -> None:
    """Print, on stderr, how to answer each ``ask_user`` question nobody here is prompted for
    (every question of a run without a terminal; on a terminal, those of remote runs: every
    agent but ``asked_here``)."""
    try:
        async for event in events:
            if event.kind != "ask_user" or event.agent == asked_here or not event.data.get("id"):
                continue
            q = {"id": event.data["id"], "agent": event.agent, "run": event.run_id or "?", **event.data}
            console.print(f"question {_line(q)}\n  answer it with: shelly answer --session {session} {q['id']} TEXT",
                          markup=False, highlight=False, soft_wrap=True)
    finally:
        events.close()


@click.command("questions")
@session_option
@json_option
@config_options
def questions_command(session_id: str, as_json: bool, config_path: str | None, shelly_dir: str) -> None:
    """List the session's open ask_user questions (id, agent, run, text, options)."""

    async def main() -> None:
        found = await _with_pool(config_path, shelly_dir, lambda rt: rt.questions(session_id))
        if as_json:
            keep = ("id", "agent", "run", "text", "options", "header", "multiSelect", "maxSelections")
            click.echo(json.dumps([{k: q[k] for k in keep if k in q} for q in found], ensure_ascii=False))
            return
        if not found:
            click.echo(f"no open questions in session {session_id}", err=True)
        for q in found:
            click.echo(_line(q))

    run_async(main())


@click.command("answer")
@session_option
@click.argument("question_id")
@click.argument("text")
@config_options
def answer_command(session_id: str, question_id: str, text: str, config_path: str | None, shelly_dir: str) -> None:
    """Answer ask_user question QUESTION_ID with TEXT; the asking run resumes on any worker."""

    async def main() -> None:
        done = await _with_pool(config_path, shelly_dir, lambda rt: rt.respond(session_id, question_id, text))
        click.echo(f"answered {question_id}; run {done.run} resumes", err=True)

    run_async(main())
