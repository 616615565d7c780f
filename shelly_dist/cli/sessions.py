"""``shelly sessions``: the saved sessions, most recent first, to continue with ``--session``.

Saved sessions live where ``shelly run`` keeps them: in Redis when the config has one (every
machine of a deployment sees them), else in the state directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from shelly_dist.cli.errors import run_async
from shelly_dist.cli.options import config_options, json_option


@click.command("sessions")
@json_option
@config_options
def sessions_command(as_json: bool, config_path: str | None, shelly_dir: str) -> None:
    """List the saved sessions: id, agent, last update, messages and the last task."""

    async def main() -> None:
        from shelly_dist.engine.config import find_config, load_config
        from shelly_dist.engine.engine import session_store
        from shelly_dist.engine.shellydir import ShellyDir, state_dir
        from shelly_dist.engine.stores import SessionStores

        config = load_config(find_config(config_path, shelly_dir))
        stores = SessionStores.from_config(config.distributed)
        where = ShellyDir(Path(shelly_dir), state=state_dir(shelly_dir, os.environ))
        try:
            infos = await session_store(stores, where).list()
        finally:
            await stores.aclose()
        if as_json:
            click.echo(json.dumps([i.model_dump(mode="json") for i in infos], ensure_ascii=False))
        elif not infos:
            click.echo("no saved sessions", err=True)
        for info in [] if as_json else infos:
            when = info.updated_at.astimezone().strftime("%Y-%m-%d %H:%M")
            click.echo(f"{info.id}  {info.agent:<16} {when}  {info.msg_count:>4} msgs  {info.preview}".rstrip())

    run_async(main())
