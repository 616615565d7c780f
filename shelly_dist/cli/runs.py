"""``shelly runs``: the run trees of a session, where each run stands, and what it spent.

Each run shows its own usage (tokens, cost, model requests) and its subtree's (itself and every
run it delegated, at any depth). Subtree totals are summed here, at read time, from the run
records the journal already keeps, so spending costs no extra write on the hot path. A finished
run's usage is its final ``usage`` field; a running one's comes from its last checkpointed state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from shelly_dist.cli.distributed import redis_for
from shelly_dist.cli.errors import run_async
from shelly_dist.cli.options import config_options, json_option, session_option

if TYPE_CHECKING:  # the pool's modules import Celery: only once a command reads them
    from shelly_dist.runtime.celery.journal import RunRecord


async def load_runs(client: Any, keys: Any, session: str) -> list[RunRecord]:
    """Every run of the session's trees, roots first then by depth and creation, parsed once."""
    from shelly_dist.runtime.celery.journal import RunRecord

    roots = await client.zrange(keys.session_runs(session), 0, -1)
    out: list[RunRecord] = []
    for root in roots:
        ids = sorted(await client.smembers(keys.tree_runs(root)))
        async with client.pipeline(transaction=False) as pipe:
            for rid in ids:
                pipe.hgetall(keys.run(rid))
            raw = await pipe.execute()
        records = [RunRecord.parse({"id": rid, **r}) for rid, r in zip(ids, raw, strict=True) if r]
        out.extend(sorted(records, key=lambda r: (r.depth, r.created)))
    return out


@dataclass
class Spent:
    """Tokens (input + output + cache), cost in USD and model requests of a run or a subtree."""

    total_tokens: int = 0
    cost_usd: float = 0.0
    model_requests: int = 0

    def __add__(self, other: Spent) -> Spent:
        return Spent(self.total_tokens + other.total_tokens, self.cost_usd + other.cost_usd,
                     self.model_requests + other.model_requests)

    def to_json(self) -> dict[str, Any]:
        return {"total_tokens": self.total_tokens, "cost_usd": round(self.cost_usd, 6),
                "model_requests": self.model_requests}

    def text(self) -> str:
        return f"tokens={self.total_tokens} cost=${self.cost_usd:.4f} requests={self.model_requests}"


def own_spent(record: RunRecord) -> Spent:
    """What one run spent itself, from its record."""
    usage = record.spent()
    tokens = sum(int(usage.get(k, 0) or 0) for k in
                 ("input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens"))
    return Spent(tokens, float(usage.get("cost_usd", 0) or 0), int(usage.get("model_requests", 0) or 0))


def spent_by_run(records: list[RunRecord]) -> dict[str, tuple[Spent, Spent]]:
    """(own, subtree) of every run in ``records``, by run id; a subtree counts only the runs
    present in ``records`` (records past their retention are gone)."""
    own = {r.id: own_spent(r) for r in records}
    children: dict[str, list[str]] = {}
    for r in records:
        children.setdefault(r.parent, []).append(r.id)
    tree: dict[str, Spent] = {}

    def total(rid: str) -> Spent:
        if rid not in tree:
            out = own[rid]
            for child in children.get(rid, []):
                out = out + total(child)
            tree[rid] = out
        return tree[rid]

    return {rid: (own[rid], total(rid)) for rid in own}


def tree_lines(records: list[RunRecord]) -> list[str]:
    children: dict[str, list[RunRecord]] = {}
    for r in records:
        children.setdefault(r.parent, []).append(r)
    spent = spent_by_run(records)
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
                         + ("  (spawned)" if r.spawned else ""))
            walk(r.id, indent + 1)

    walk("", 0)
    return lines


def runs_json(records: list[RunRecord]) -> list[dict[str, Any]]:
    """The ``--json`` rows: each run's identity and status, its own and its subtree's spending
    (every identity field a string, as the record holds it)."""
    spent = spent_by_run(records)
    return [{"id": r.id, "agent": r.agent, "instance": r.instance, "depth": str(r.depth), "parent": r.parent,
             "root": r.root, "status": str(r.status), "worker": r.worker, "error": r.error, "handoff": r.handoff,
             "spawned": r.spawned,
             "own": spent[r.id][0].to_json(), "tree": spent[r.id][1].to_json()} for r in records]


@click.command("runs")
@session_option
@json_option
@config_options
def runs_command(session_id: str, as_json: bool, config_path: str | None, shelly_dir: str) -> None:
    """Show the session's run tree: agent, status, worker, and what each run and its subtree spent."""

    async def main() -> None:
        async with redis_for(config_path, shelly_dir) as (client, keys):
            records = await load_runs(client, keys, session_id)
        if as_json:
            click.echo(json.dumps(runs_json(records), ensure_ascii=False))
        elif not records:
            click.echo(f"no runs in session {session_id}", err=True)
        else:
            click.echo("\n".join(tree_lines(records)))

    run_async(main())
