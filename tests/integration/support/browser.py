"""Headless Chromium driven over the DevTools protocol, for the console's tests.

The distribution's ``chromium`` (no browser download at test time; ``.ci/run`` installs it) runs
headless with a fresh profile; this speaks the DevTools protocol to it over a websocket with
aiohttp (already a dependency): navigate, evaluate JavaScript in the page, press keys, take a
screenshot. A test waits on conditions in the page's DOM with a deadline, never a fixed sleep.
The browser is always killed and its profile removed, even when a test fails.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-port=0"]
"""What works on this project's machines (a container without a user namespace, no GPU, no
network beyond loopback)."""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("no chromium on PATH: install the distribution's package (apt-get install chromium); "
                    ".ci/run does when it is missing")
    return found


class Page:
    """One tab, spoken to over its DevTools websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self.errors: list[str] = []
        """Uncaught exceptions and console errors of the page (shown when a wait fails)."""
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            data = json.loads(message.data)
            if "id" in data:
                future = self._waiting.pop(data["id"], None)
                if future is not None and not future.done():
                    future.set_result(data)
            elif data.get("method") == "Runtime.exceptionThrown":
                self.errors.append(json.dumps(data["params"]["exceptionDetails"])[:500])
            elif data.get("method") == "Runtime.consoleAPICalled" and data["params"]["type"] == "error":
                self.errors.append(json.dumps(data["params"]["args"])[:500])

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        call = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[call] = future
        await self.ws.send_json({"id": call, "method": method, "params": params})
        answer = await asyncio.wait_for(future, 30)
        if "error" in answer:
            raise AssertionError(f"devtools: {method}: {answer['error']}")
        return dict(answer.get("result") or {})

    async def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the page (a promise is awaited)."""
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"page: {expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete'", "the page to load")

    async def wait_for(self, expression: str, what: str, timeout: float = 60) -> Any:  # noqa: ASYNC109
        """Poll ``expression`` until it is truthy; fail naming ``what`` (and the page's errors)."""
        deadline = time.monotonic() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                body = await self.evaluate("document.body.innerText")
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; page errors: {self.errors}; "
                                     f"page text:\n{body[:3000]}")
            await asyncio.sleep(0.1)

    async def press(self, selector: str, key: str = "Enter") -> None:
        """Focus the element and press ``key`` on it (a keyboard user's activation)."""
        assert await self.evaluate(f"(() => {{ const el = document.querySelector({json.dumps(selector)}); "
                                   "if (!el) return false; el.focus(); return document.activeElement === el; })()"), \
            f"{selector} is not focusable"
        codes = {"Enter": 13, " ": 32}
        text = "\r" if key == "Enter" else key
        for kind in ("keyDown", "keyUp"):
            await self.send("Input.dispatchKeyEvent", type=kind, key=key, code=key if key != " " else "Space",
                            windowsVirtualKeyCode=codes[key], text=text if kind == "keyDown" else "")

    async def screenshot(self, path: Path, width: int = 1400, height: int = 900) -> None:
        await self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                        mobile=False)
        shot = await self.send("Page.captureScreenshot", format="png")
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader
        await self.ws.close()


@contextlib.asynccontextmanager
async def browser_page() -> AsyncIterator[Page]:
    """A fresh headless Chromium with one blank tab; killed (and its profile removed) on exit."""
    profile = Path(tempfile.mkdtemp(prefix="shelly-chromium-"))
    proc = subprocess.Popen([chromium(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],  # noqa: ASYNC220
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    session = aiohttp.ClientSession()
    page: Page | None = None
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"chromium did not start (exit {proc.poll()})")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
            targets = await answer.json(content_type=None)
        target = next(t for t in targets if t["type"] == "page")
        ws = await session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
        page = Page(ws)
        await page.send("Runtime.enable")
        await page.send("Page.enable")
        yield page
    finally:
        if page is not None:
            await page.close()
        await session.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(profile, ignore_errors=True)
