"""``shelly runs``: the run trees of a session, where each run stands, and what it spent.

Each run shows its own usage (tokens, cost, model requests) and its subtree's (itself and every
run it delegated, at any depth). Subtree totals are summed here, at read time, from the run
records the journal already keeps, so spending costs no extra write on the hot path. A finished
run's usage is its final ``usage`` field; a running one's comes from its last checkpointed state.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from shelly_dist.cli.distributed import redis_for
from shelly_dist.cli.errors import run_async
from shelly_dist.cli.options import config_options, json_option, session_option
from shelly_dist.errors import UsageError
from shelly_dist.runtime.spending import Spent, spent_by_run

if TYPE_CHECKING:  # the pool's modules import Celery: only once a command reads them
    from shelly_dist.runtime.celery.journal import RunRecord


def spent_by_record(records: list[RunRecord]) -> dict[str, tuple[Spent, Spent]]:
    """(own, subtree) of every run in ``records``, by run id (:func:`~shelly_dist.runtime.spending.spent_by_run`)."""
    return spent_by_run((r.id, r.parent, r.spent()) for r in records)


def tree_lines(records: list[RunRecord]) -> list[str]:
    children: dict[str, list[RunRecord]] = {}
    for r in records:
        children.setdefault(r.parent, []).append(r)
    spent = spent_by_record(records)
    lines: list[str] = []

    def walk(parent: str, indent: int) -> None:
        for r in children.get(parent, []):
            own, tree = spent[r.id]
            name = r.instance or r.agent or "?"
            subtree = f"  tree: {tree.text()}" if children.get(r.id) else ""
            lines.append(f"{'  ' * indent}{r.id}  {name}  {r.status}  "
                         f"worker={r.worker or '-'}  {own.text()}{subtree}"
                         + (f"  error={r.error}" if r.error else "")
                         + (f"  handed off to {r.handoff}" if r.handoff else "")
                         + ("  (spawned)" if r.spawned else "")
                         + (f"  waiting for {r.waiting_for}" if r.waiting_for and r.status == "waiting" else ""))
            walk(r.id, indent + 1)

    walk("", 0)
    return lines


def runs_json(records: list[RunRecord]) -> list[dict[str, Any]]:
    """The ``--json`` rows: each run's identity and status, its own and its subtree's spending
    (every identity field a string, as the record holds it)."""
    spent = spent_by_record(records)
    return [{"id": r.id, "agent": r.agent, "instance": r.instance, "depth": str(r.depth), "parent": r.parent,
             "root": r.root, "status": str(r.status), "worker": r.worker, "error": r.error, "handoff": r.handoff,
             "spawned": r.spawned, "waiting_for": r.waiting_for if r.status == "waiting" else "",
             "own": spent[r.id][0].to_json(), "tree": spent[r.id][1].to_json()} for r in records]


@click.command("runs")
@session_option
@json_option
@config_options
def runs_command(session_id: str, as_json: bool, config_path: str | None, shelly_dir: str) -> None:
    """Show the session's run tree: agent, status, worker, and what each run and its subtree spent."""

    async def main() -> None:
        from shelly_dist.runtime.celery.client.trees import load_runs

        async with redis_for(config_path, shelly_dir, "runs") as (client, keys):
            records = await load_runs(client, keys, session_id)
        if not records:
            raise UsageError(f"runs: no runs in session {session_id} (a session id from `shelly sessions`; "
                             "runs are kept for distributed.retention after they end)")
        if as_json:
            click.echo(json.dumps(runs_json(records), ensure_ascii=False))
        else:
            click.echo("\n".join(tree_lines(records)))

    run_async(main())
