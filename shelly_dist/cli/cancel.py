"""``shelly cancel``: cancel a run tree, or every run of a session, from any machine."""

from __future__ import annotations

import asyncio

import click

from shelly_dist.cli.distributed import redis_for
from shelly_dist.cli.errors import run_async
from shelly_dist.cli.options import config_options
from shelly_dist.errors import UsageError


@click.command("cancel")
@click.argument("run_id", required=False)
@click.option("--session", "session_id", default=None, help="Cancel every run of this session.")
@config_options
def cancel_command(run_id: str | None, session_id: str | None, config_path: str | None, shelly_dir: str) -> None:
    """Cancel RUN_ID's whole tree (or all of --session): in-flight steps stop, queued ones never start."""

    async def main() -> None:
        if bool(run_id) == bool(session_id):
            raise UsageError("cancel: give exactly one of RUN_ID or --session")
        from shelly_dist.runtime.celery.children.cancel import cancel_session, cancel_tree, end_orphaned_root

        async with redis_for(config_path, shelly_dir, "cancel") as (client, keys):
            if session_id:
                roots = await cancel_session(client, keys, session_id)
                # a root whose coordinator was killed would stay `running` forever
                await asyncio.gather(*(end_orphaned_root(client, keys, root) for root in roots))
                click.echo(f"canceled {len(roots)} run trees of session {session_id}", err=True)
                return
            assert run_id is not None
            root = await client.hget(keys.run(run_id), "root")
            if not root:
                raise UsageError(f"cancel: run {run_id} not found")
            runs = await cancel_tree(client, keys, root)
            await end_orphaned_root(client, keys, root)
            click.echo(f"canceled run tree {root} ({len(runs)} runs)", err=True)

    run_async(main())
