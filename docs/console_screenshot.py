"""Make docs/console.png: a real team on a real pool, caught with runs in every state.

    .venv/bin/python docs/console_screenshot.py docs/console.png

Needs the local Redis (127.0.0.1:6379) and chromium. Starts two real workers and ``shelly serve``
in a temporary project (reaped, its keys deleted) against a model server whose replies are chosen
by the asking agent, and takes the screenshot in headless Chromium once the tree has runs done,
running, waiting and failed.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply, speaker
from tests.integration.cluster import Cluster, wait_until
from tests.integration.ops import Processes
from tests.integration.support.browser import browser_page
from tests.integration.support.console import call, start_console

TASK = "The nightly build fails on the YAML parser: find out why, fix it, test it and tell me what it cost."
release = threading.Event()
calls: collections.Counter[str] = collections.Counter()
lock = threading.Lock()


def delegating(*tasks: tuple[str, str]) -> Reply:
    return Reply(tool_calls=[{"name": "delegate", "arguments": {
        "tasks": [{"agent": a, "task": t, "context": ""} for a, t in tasks]}}], usage={"input": 1800, "output": 120})


def done(summary: str, held: bool = False) -> Reply:
    return Reply(tool_calls=[{"name": "task_complete", "arguments": {"status": "completed", "summary": summary}}],
                 usage={"input": 2400, "output": 310}, release=release if held else None)


def respond(request: RecordedRequest) -> Reply:
    name = speaker(request)
    with lock:
        calls[name] += 1
        n = calls[name]
    if name == "lead":
        return delegating(
            ("researcher", "Survey the failing CI logs"), ("coder", "Fix the YAML parser crash"),
            ("coder", "Add regression tests for the parser"), ("reviewer", "Review the parser change"),
            ("writer", "Draft the release notes"), ("analyst", "Estimate the cost of the fix"),
        ) if n == 1 else Reply(text="All done.")
    if name.startswith("coder-fix") and n == 1:
        return delegating(("tester", "Run the parser suite"), ("tester", "Run the integration suite"))
    if name.startswith("writer"):
        return Reply.error(500)
    return done("ok", held=True) if name.startswith(("reviewer", "analyst")) else done(f"finished: {name}")


def runs(url: str, session: str) -> list[dict[str, Any]]:
    return list(call(f"{url}api/sessions/{session}/runs")[1]["runs"])


async def shoot(url: str, session: str, out: Path) -> None:
    async with browser_page() as page:
        await page.goto(f"{url}sessions/{session}")
        await page.wait_for("document.querySelectorAll('[data-run-id]').length >= 9", "the tree")
        await page.evaluate("[...document.querySelectorAll('button.open')]"
                            ".find((b) => b.textContent.startsWith('coder-fix')).click()")
        await page.wait_for("document.querySelector('#chat h2')?.textContent.includes('coder-fix')", "the chat")
        await page.evaluate("document.activeElement.blur(); window.scrollTo(0, 0)")
        await page.screenshot(out, width=1400, height=1000)


def main(out: Path) -> None:
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="shelly-console-shot-")), redis_url="redis://127.0.0.1:6379/0")
    procs = Processes(cluster)
    server = ModelServer(format="openai", responder=respond).start()
    try:
        model = {"name": "m", "kind": "openai", "model": "gpt-4o-mini", "base_url": server.url, "api_key": "k",
                 "rate_limit": {"max_retries": 0}}
        agents = [{"name": "lead", "description": "plans and delegates", "options": {"max_delegation_depth": 2}},
                  {"name": "coder", "description": "writes code", "options": {"max_delegation_depth": 2}},
                  *({"name": n, "description": n} for n in ("researcher", "reviewer", "writer", "analyst", "tester"))]
        cluster.write_config([model], agents, distributed={"step_time_limit": 600, "visibility_timeout": 660})
        cluster.start_workers("w1", "w2")
        url = start_console(procs)
        session = call(f"{url}api/sessions", "POST", {"task": TASK})[1]["session"]
        wait_until(lambda: len(rs := runs(url, session)) >= 9 and sum(r["status"] == "done" for r in rs) >= 5
                   and any(r["status"] == "failed" for r in rs), 180, "a tree in every state")
        asyncio.run(shoot(url, session, out))
    finally:
        release.set()
        procs.close()
        cluster.stop()
        server.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
