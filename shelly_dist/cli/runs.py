"""``shelly runs``: the run trees of a session and where each run stands."""

from __future__ import annotations

import json
from typing import Any

import click

from shelly_dist.cli.distributed import redis_for
from shelly_dist.cli.errors import run_async
from shelly_dist.cli.options import config_options, json_option, session_option


async def load_runs(client: Any, keys: Any, session: str) -> list[dict[str, Any]]:
    """Every run of the session's trees, roots first then by creation, as records."""
    roots = await client.zrange(keys.session_runs(session), 0, -1)
    out: list[dict[str, Any]] = []
    for root in roots:
        ids = await client.smembers(keys.tree_runs(root))
        async with client.pipeline(transaction=False) as pipe:
            for rid in ids:
                pipe.hgetall(keys.run(rid))
            records = await pipe.execute()
        records = sorted((r for r in records if r), key=lambda r: (int(r.get("depth", 0)), float(r.get("created", 0))))
        out.extend(records)
    return out


def _tree_lines(records: list[dict[str, Any]]) -> list[str]:
    children: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        children.setdefault(r.get("parent", ""), []).append(r)
    lines: list[str] = []

    def walk(parent: str, indent: int) -> None:
        for r in children.get(parent, []):
            usage = json.loads(r.get("usage") or "{}")
            tokens = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
            name = r.get("instance") or r.get("agent", "?")
            lines.append(f"{'  ' * indent}{r['id']}  {name}  {r.get('status', '?')}  "
                         f"worker={r.get('worker', '-') or '-'}  tokens={tokens}"
                         + (f"  error={r['error']}" if r.get("error") else "")
                         + (f"  handed off to {r['handoff']}" if r.get("handoff") else ""))
            walk(r["id"], indent + 1)

    walk("", 0)
    return lines


@click.command("runs")
@session_option
@json_option
@config_options
def runs_command(session_id: str, as_json: bool, config_path: str | None, shelly_dir: str) -> None:
    """Show the session's run tree: agent, status, worker and tokens of every run."""

    async def main() -> None:
        async with redis_for(config_path, shelly_dir) as (client, keys):
            records = await load_runs(client, keys, session_id)
        if as_json:
            fields = ("id", "agent", "instance", "depth", "parent", "root", "status", "worker", "error", "handoff")
            click.echo(json.dumps([{k: r.get(k, "") for k in fields} for r in records], ensure_ascii=False))
        elif not records:
            click.echo(f"no runs in session {session_id}", err=True)
        else:
            click.echo("\n".join(_tree_lines(records)))

    run_async(main())
