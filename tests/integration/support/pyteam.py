"""A worker bootstrap for runtime tests that need no config file: a team of scripted agents.

The team comes from ``$SHELLY_TEST_TEAM`` (JSON: ``{agent: {"replies": [...], "max_delegation_depth": n,
"max_iterations": n, "block_loop": true}}``) and the runtime settings from ``$SHELLY_TEST_*`` variables, so a
test can start real workers with ``SHELLY_WORKER_BOOTSTRAP=tests.integration.support.pyteam:worker_spec``.

``block_loop`` gives the agent a tool of that name that blocks its event loop (a synchronous sleep of
``seconds``, as a CPU-heavy or sync tool would) and appends a line to ``$SHELLY_TEST_TOOL_LOG`` per run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shelly_dist import Agent, AgentOptions, Registry, ScriptedCompleter, Tool, ToolBox
from shelly_dist.runtime.celery import RuntimeSettings, WorkerSpec

if TYPE_CHECKING:
    from tests.integration.cluster import Cluster

REPO = Path(__file__).resolve().parents[3]


async def block_loop(arguments: str) -> str:
    """Hold the event loop for ``seconds`` (no await), logging each start in ``$SHELLY_TEST_TOOL_LOG``."""
    seconds = float(json.loads(arguments or "{}").get("seconds", 1))
    with open(os.environ["SHELLY_TEST_TOOL_LOG"], "a") as log:  # noqa: ASYNC230 (blocking is the point)
        log.write(f"{os.getpid()}\n")
    time.sleep(seconds)  # noqa: ASYNC251 (blocking is the point)
    return f"blocked the loop for {seconds:g}s"


BLOCK_LOOP = Tool("block_loop", "block the event loop",
                  {"type": "object", "properties": {"seconds": {"type": "number"}}}, block_loop)


def build_registry(team: dict[str, Any]) -> Registry:
    registry = Registry()
    for name, spec in team.items():
        def factory(name: str = name, spec: dict[str, Any] = spec) -> Agent:
            agent = Agent(
                name,
                spec.get("description", f"the {name}"),
                completer=ScriptedCompleter(spec["replies"], name=name, repeat_last=spec.get("repeat_last", False)),
                options=AgentOptions(
                    max_delegation_depth=spec.get("max_delegation_depth", 0),
                    max_iterations=spec.get("max_iterations", 0),
                ),
            )
            if spec.get("block_loop"):
                agent.add_toolboxes(ToolBox([BLOCK_LOOP], name="blocking"))
            return agent

        registry.register(name, spec.get("description", f"the {name}"), factory)
    return registry


def delegate_reply(agent: str) -> dict[str, Any]:
    """A scripted reply delegating one task to ``agent``."""
    task = {"agent": agent, "task": "t", "context": ""}
    return {"tool_calls": [{"name": "delegate", "arguments": {"tasks": [task]}}]}


def worker_env(cluster: Cluster, team: dict[str, Any], **settings: str) -> dict[str, str]:
    """The environment of a ``shelly worker`` of ``cluster`` running ``team`` through this bootstrap;
    ``settings`` sets ``SHELLY_TEST_<NAME>`` (``lease="2"``, ``requeue_after="3600"``, ``tool_log=…``)."""
    return {"SHELLY_WORKER_BOOTSTRAP": "tests.integration.support.pyteam:worker_spec", "PYTHONPATH": str(REPO),
            "SHELLY_TEST_TEAM": json.dumps(team), "SHELLY_TEST_BROKER": cluster.broker_url,
            "SHELLY_TEST_REDIS": cluster.redis_url, "SHELLY_TEST_QUEUE": cluster.queue,
            "SHELLY_TEST_PREFIX": cluster.prefix,
            **{f"SHELLY_TEST_{name.upper()}": value for name, value in settings.items()}}


def settings_from_env() -> RuntimeSettings:
    return RuntimeSettings(
        broker_url=os.environ["SHELLY_TEST_BROKER"],
        redis_url=os.environ["SHELLY_TEST_REDIS"],
        queue=os.environ["SHELLY_TEST_QUEUE"],
        key_prefix=os.environ["SHELLY_TEST_PREFIX"],
        step_time_limit=float(os.environ.get("SHELLY_TEST_STEP_LIMIT", "20")),
        visibility_timeout=float(os.environ.get("SHELLY_TEST_VISIBILITY", "30")),
        lease=float(os.environ.get("SHELLY_TEST_LEASE", "10")),
        requeue_after=float(os.environ.get("SHELLY_TEST_REQUEUE_AFTER", "30")),
        poll_interval=0.5,
    )


class _Context:
    def __init__(self, team: dict[str, Any]) -> None:
        self.fingerprint = os.environ.get("SHELLY_TEST_FINGERPRINT", "test-team")
        self._registry = build_registry(team)

    async def registry(self, session: str) -> Registry:
        return self._registry

    async def aclose(self) -> None:
        return None


def worker_spec() -> WorkerSpec:
    team = json.loads(os.environ["SHELLY_TEST_TEAM"])

    async def open_ctx() -> _Context:
        return _Context(team)

    return WorkerSpec(settings=settings_from_env(), fingerprint=os.environ.get("SHELLY_TEST_FINGERPRINT", "test-team"),
                      open=open_ctx)
