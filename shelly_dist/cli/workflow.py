"""``shelly workflow run|start|stop|status|replay``: teams from a YAML file (docs/workflows.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import click
from rich.console import Console

from shelly_dist.cli.backend import echo_json, shared_stores
from shelly_dist.cli.errors import run_async
from shelly_dist.cli.live import LiveView
from shelly_dist.cli.options import config_options, session_scoped
from shelly_dist.engine.config import find_config, load_config
from shelly_dist.engine.engine import Engine
from shelly_dist.engine.workflow import load_workflow, team_config
from shelly_dist.engine.workflow_run import final_output, start_workflow, unschedule, wait_idle, wait_stopped
from shelly_dist.errors import UsageError
from shelly_dist.runtime.schedules import Scheduler
from shelly_dist.tools.builtin.ask import NoAnswerer

EXIT_DEAD_LETTERS = 1


def parse_params(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"workflow: --param {pair!r} must be NAME=VALUE")
        out[name] = value
    return out


async def _tail(engine: Engine, session: str) -> None:
    """Replay the session's stream into the engine's bus, so the live view shows every worker's
    posts and wakes."""
    from shelly_dist.runtime.celery.client.events import read_entries

    async for _, batch in read_entries(engine.stores.client(), engine.stores.keys, session, follow=True):
        for event in batch:
            engine.bus.publish(event)


async def _run(file: str, params: dict[str, str], tag: str, config_path: str | None, shelly_dir: str,
               *, until_stopped: bool, quiet: bool = False) -> tuple[str, int]:
    workflow = load_workflow(file)
    config = load_config(find_config(config_path, shelly_dir))
    widened = team_config(config, workflow)  # an unknown ref or provider fails here, naming the agent
    if not config.distributed.broker_url:
        config = widened  # on a pool, workers widen their own config from the session's workspace
    console = Console(stderr=True)
    async with await Engine.open(config, shelly_dir=shelly_dir, answerer=NoAnswerer()) as engine:
        due = engine.stores.due_index()
        # Embedded, this process ticks the schedules; on a pool every worker does.
        scheduler = Scheduler(due, engine.stores.workspace) if engine.runtime.name == "local" else None
        early = engine.bus.subscribe(buffer=4096)  # the kickoff post too, as the pool's stream holds it
        session, ws = await start_workflow(engine.stores.workspace, workflow, params=params, tag=tag, due=due,
                                           exec_env=config.permissions.exec_env, source=file)
        console.print(f"session {session} (workflow {workflow.name})", markup=False, highlight=False)
        if scheduler is not None:
            scheduler.start()
        tail = asyncio.create_task(_tail(engine, session)) if engine.stores.shared else None
        try:
            async with LiveView(engine.bus, console, "quiet" if quiet else "auto", early):
                if until_stopped:
                    await wait_stopped(ws)
                else:
                    await wait_idle(ws)
        finally:
            if tail is not None:
                tail.cancel()
            if scheduler is not None:
                await scheduler.aclose()
            await unschedule(workflow, session, due)
        output = await final_output(ws)
        dead = await ws.dead_letters()
        paused = await ws.wakes_paused()
    for letter in dead:
        console.print(f"dead letter: {letter.agent} messages {letter.after + 1}..{letter.up_to} after "
                      f"{letter.attempts} attempts: {letter.error}", markup=False, highlight=False)
    if paused:
        console.print(f"workflow paused: {paused} (raise wake_budget in {file}, or send a message as the user "
                      f"to session {session} to resume)", markup=False, highlight=False, soft_wrap=True)
    return output, EXIT_DEAD_LETTERS if dead or paused else 0


def _run_options(f: Any) -> Any:
    f = click.option("--quiet", is_flag=True, help="No progress lines on stderr.")(f)
    f = click.option("--tag", default="", help="A label for this run (${{ workflow.tag }}).")(f)
    f = click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="A workflow parameter.")(f)
    return click.argument("file", type=click.Path(dir_okay=False))(config_options(f))


@click.group("workflow")
def workflow_group() -> None:
    """Run a team of agents that talk through a channel (a workflow file)."""


@workflow_group.command("run")
@_run_options
def run_cmd(file: str, params: tuple[str, ...], tag: str, quiet: bool, config_path: str | None,
            shelly_dir: str) -> None:
    """Run FILE until the team is idle; print the document (or the last word); exit 1 on dead letters."""
    output, code = run_async(_run(file, parse_params(params), tag, config_path, shelly_dir, until_stopped=False,
                                  quiet=quiet))
    click.echo(output)
    raise SystemExit(code)


@workflow_group.command("start")
@_run_options
def start_cmd(file: str, params: tuple[str, ...], tag: str, quiet: bool, config_path: str | None,
              shelly_dir: str) -> None:
    """Run FILE until `shelly workflow stop --session S` (schedules keep firing meanwhile)."""
    output, code = run_async(_run(file, parse_params(params), tag, config_path, shelly_dir, until_stopped=True,
                                  quiet=quiet))
    click.echo(output)
    raise SystemExit(code)


@workflow_group.command("stop")
@session_scoped
def stop_cmd(session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Ask the `workflow start` of a session to end."""

    async def main() -> None:
        async with shared_stores(config_path, shelly_dir, "workflow stop") as stores:
            await stores.workspace(session_id).request_stop()

    run_async(main())
    echo_json({"session": session_id, "stop": True})


@workflow_group.command("status")
@session_scoped
def status_cmd(session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Print the team's status, inbox sizes, proposals and dead letters as JSON."""

    async def main() -> dict[str, Any]:
        async with shared_stores(config_path, shelly_dir, "workflow status") as stores:
            ws = stores.workspace(session_id)
            statuses = await ws.statuses()
            return {
                "session": session_id,
                "agents": {m: {**(statuses[m].model_dump() if m in statuses else {"state": "idle"}),
                               "inbox": len(await ws.inbox(m))} for m in await ws.members()},
                "proposals": [p.model_dump() for p in await ws.proposals()],
                "dead_letters": [d.model_dump() for d in await ws.dead_letters()],
                "idle": await ws.idle(),
            }

    echo_json(run_async(main()))


@workflow_group.command("replay")
@click.argument("agent", required=False)
@session_scoped
def replay_cmd(agent: str | None, session_id: str, config_path: str | None, shelly_dir: str) -> None:
    """Run the dead-lettered messages (of AGENT, or of every agent) again, on the pool."""

    async def main() -> list[dict[str, Any]]:
        from shelly_dist.engine.config_runtime import runtime_settings
        from shelly_dist.runtime.celery.children.wakes import PoolWakes

        cfg = load_config(find_config(config_path, shelly_dir))
        if not cfg.distributed.broker_url:
            raise UsageError("workflow replay: needs a pool (distributed.broker_url)")
        async with shared_stores(config_path, shelly_dir, "workflow replay") as stores:
            wakes = PoolWakes(runtime_settings(cfg))
            letters = [d for d in await stores.workspace(session_id).dead_letters() if agent in (None, d.agent)]
            for letter in letters:
                await wakes.replay(session_id, letter)
            return [d.model_dump() for d in letters]

    echo_json(run_async(main()))
