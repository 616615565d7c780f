"""The console's page in a real headless Chromium (the distribution's package, driven over the
DevTools protocol): the tree of a session on the pool appears, updates when a child ends without
a reload, and the Cancel button — pressed from the keyboard — cancels the tree; behind a token
the page asks for it and then lists the sessions."""

from __future__ import annotations

import json
import threading

import pytest
import yaml

from shelly_dist.testing.model_server import ModelServer, Reply

from .cluster import NEVER_IN_TIME, Cluster, complete, delegate, scripted, slow_team, wait_until
from .ops import Processes
from .support.browser import browser_page
from .support.console import call, start_console
from .test_console_pool import holding_two, runs_of, team

pytestmark = pytest.mark.integration

ROWS = "[...document.querySelectorAll('[data-run-id]')]"


def rows_js(condition: str) -> str:
    """A page expression: ``condition`` over the tree's rows as ``{name, status, depth}``."""
    return (f"(() => {{ const rows = {ROWS}.map((li) => ({{ name: li.querySelector('button.open').textContent, "
            "status: li.dataset.status, depth: li.parentElement.closest('li') ? 1 : 0 })); "
            f"return {condition}; }})()")


async def test_the_session_page_shows_the_agents_of_the_tree_and_updates_when_a_child_ends(
        cluster: Cluster, procs: Processes) -> None:
    release = threading.Event()
    with holding_two(release) as server:
        team(cluster, server)
        cluster.start_worker("w1")
        url = start_console(procs)
        session = call(f"{url}api/sessions", "POST", {"task": "go"})[1]["session"]
        wait_until(lambda: any(r["instance"].startswith("helper-two") and r["status"] == "running"
                               for r in runs_of(url, session)), 120, f"helper two running\n{cluster.worker_log()}")
        async with browser_page() as page:
            await page.goto(f"{url}sessions/{session}")
            await page.wait_for(rows_js(
                "rows.length === 3 && rows[0].name === 'lead' && rows[0].depth === 0 && "
                "rows.some((r) => r.name.startsWith('helper-one') && r.depth === 1 && r.status === 'done') && "
                "rows.some((r) => r.name.startsWith('helper-two') && r.depth === 1 && r.status === 'running')"),
                "the lead and both children, helper two running")
            await page.evaluate("window.notReloaded = true")
            release.set()
            await page.wait_for(rows_js("rows.every((r) => r.status === 'done')"), "every run done")
            await page.wait_for("document.querySelector('#session-status').dataset.status === 'done'",
                                "the session done")
            assert await page.evaluate("window.notReloaded === true")  # updated in place, from the stream
            assert "lead done" in await page.evaluate("document.querySelector('#reply').textContent")
            assert page.errors == []


async def test_cancel_in_the_page_cancels_the_tree(cluster: Cluster, procs: Processes) -> None:
    with ModelServer(format="openai", default=Reply(text="never in time", delay=NEVER_IN_TIME)) as server:
        slow_team(cluster, server)
        cluster.start_worker("w1")
        url = start_console(procs)
        session = call(f"{url}api/sessions", "POST", {"task": "go"})[1]["session"]
        async with browser_page() as page:
            await page.goto(f"{url}sessions/{session}")
            await page.wait_for(rows_js("rows.filter((r) => r.depth === 1 && r.status === 'running').length === 2"),
                                "both children running")
            await page.press("#cancel")  # from the keyboard: focus, Enter
            await page.wait_for(rows_js("rows.length === 3 && rows.every((r) => r.status === 'canceled')"),
                                "every run canceled")
            await page.wait_for("document.querySelector('#session-status').dataset.status === 'canceled'",
                                "the session canceled")
        assert {r["status"] for r in runs_of(url, session)} == {"canceled"}


async def test_behind_a_token_the_page_asks_for_it_then_lists_the_sessions(cluster: Cluster, procs: Processes) -> None:
    config = cluster.write_config([scripted(solo=["hi there"])], [{"name": "solo"}])
    data = yaml.safe_load(config.read_text())
    data.pop("distributed")  # no broker: the sessions run in the server's own process
    config.write_text(yaml.safe_dump(data))
    url = start_console(procs, env={"SHELLY_SERVE_TOKEN": "t0ken"})
    session = call(f"{url}api/sessions", "POST", {"task": "say hi"}, token="t0ken")[1]["session"]
    async with browser_page() as page:
        await page.goto(url)
        await page.wait_for("!!document.querySelector('#login #token')", "the token form")
        await page.evaluate(f"document.querySelector('#token').value = {json.dumps('t0ken')}")
        await page.press("#login button[type=submit]")
        await page.wait_for(f"!!document.querySelector('tr[data-session=\"{session}\"] [data-status=\"done\"]')",
                            "the session listed as done")
        assert await page.evaluate("document.body.innerText.includes('say hi')")


async def test_a_tree_of_forty_agents_reads_at_a_glance(cluster: Cluster, procs: Processes) -> None:
    """40 runs: a count by status at the top, each failure with its reason on its row, and a
    keyboard-reachable filter that leaves only what needs a look (in-process: no broker)."""
    tasks = [("helper", f"part {n}") for n in range(37)] + [("flaky", "part x"), ("flaky", "part y")]
    config = cluster.write_config(
        [scripted(lead=[delegate(*tasks), "lead done"], helper=[complete("did {task}")],
                  flaky=[{"error": "quota exceeded"}])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}}, {"name": "helper"}, {"name": "flaky"}])
    data = yaml.safe_load(config.read_text())
    data.pop("distributed")
    config.write_text(yaml.safe_dump(data))
    url = start_console(procs)
    session = call(f"{url}api/sessions", "POST", {"task": "go"})[1]["session"]
    async with browser_page() as page:
        await page.goto(f"{url}sessions/{session}")
        await page.wait_for("document.querySelector('#session-status')?.dataset.status === 'done'", "the lead done")
        await page.wait_for(f"{ROWS}.length === 40", "40 rows")
        assert await page.evaluate("document.querySelector('#counts').textContent") == "40 runs: 38 done, 2 failed"
        reasons = await page.evaluate(f"{ROWS}.filter((li) => li.dataset.status === 'failed')"
                                      ".map((li) => li.querySelector('.reason').textContent)")
        assert len(reasons) == 2 and all("quota exceeded" in r for r in reasons)
        await page.press("#only-open", " ")  # a checkbox toggled from the keyboard
        visible = await page.evaluate(f"{ROWS}.filter((li) => !li.hidden).map((li) => li.dataset.status)")
        assert sorted(visible) == ["done", "failed", "failed"]  # the lead (a failure under it) and the two


async def _gated_session(cluster: Cluster, procs: Processes) -> tuple[str, str]:
    """A session on the pool whose deployer waits for a person on its gated ``deploy`` call."""
    from .test_approvals import project

    project(cluster)
    cluster.start_worker("w1")
    url = start_console(procs)
    session = call(f"{url}api/sessions", "POST", {"task": "ship it"})[1]["session"]
    wait_until(lambda: call(f"{url}api/decisions?session={session}")[1]["decisions"], 120,
               f"the gated call waiting\n{cluster.worker_log()}")
    return url, session


async def test_approve_in_the_page_runs_the_gated_call_once_and_the_session_ends(
        cluster: Cluster, procs: Processes) -> None:
    from .test_approvals import deploys

    url, session = await _gated_session(cluster, procs)
    async with browser_page() as page:
        await page.goto(f"{url}sessions/{session}")
        await page.wait_for("document.querySelector('[data-kind=approval] code.tool')?.textContent === 'deploy' && "
                            "document.querySelector('[data-kind=approval] .arguments').textContent.includes('prod')",
                            "the deploy call waiting, with its arguments")
        assert deploys(cluster) == []  # nothing ran before the person said so
        await page.press("[data-kind=approval] button.approve")  # from the keyboard: focus, Enter
        await page.wait_for("document.querySelector('#session-status').dataset.status === 'done'", "the session done")
        await page.wait_for("document.querySelectorAll('[data-kind=approval]').length === 0", "the decision gone")
        assert "deployed to prod" in await page.evaluate("document.querySelector('#reply').textContent")
        assert page.errors == []
    assert [line.split()[0] for line in deploys(cluster)] == ["prod"]


async def test_reject_in_the_page_gives_the_model_the_reason_and_the_tool_never_runs(
        cluster: Cluster, procs: Processes) -> None:
    from .test_approvals import deploys

    url, session = await _gated_session(cluster, procs)
    async with browser_page() as page:
        await page.goto(f"{url}sessions/{session}")
        await page.wait_for("!!document.querySelector('[data-kind=approval] input')", "the reject reason box")
        await page.evaluate("document.querySelector('[data-kind=approval] input').value = 'freeze week'")
        await page.press("[data-kind=approval] button.danger")
        await page.wait_for("document.querySelector('#session-status').dataset.status === 'done'", "the session done")
        assert "freeze week" in await page.evaluate("document.querySelector('#reply').textContent")
        assert page.errors == []
    assert deploys(cluster) == []
