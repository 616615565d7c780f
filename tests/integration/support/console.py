"""``shelly serve`` as a test runs it: a real subprocess in a cluster's project directory, on a
free port, reaped with the test's other processes; and a small JSON client for its API."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

from tests.integration.cluster import wait_until
from tests.integration.ops import SHELLY, Processes

LISTENING = re.compile(r"shelly console on (http://\S+/)")


def start_console(procs: Processes, *args: str, name: str = "serve", env: dict[str, str] | None = None) -> str:
    """Start ``shelly serve --port 0 ARGS`` and return its URL once it listens."""
    proc = procs.start(name, [*SHELLY, "serve", "--port", "0", *args], env=env)

    def listening() -> str | None:
        if proc.poll() is not None:
            raise AssertionError(f"shelly serve exited with {proc.returncode}:\n{procs.log(name)}")
        found = LISTENING.search(procs.log(name))
        return found[1] if found else None

    return str(wait_until(listening, 90, "shelly serve to listen", interval=0.2))


def call(url: str, method: str = "GET", body: Any = None, token: str | None = None,
         timeout: float = 30) -> tuple[int, Any]:
    """``(status, JSON body)`` of one request to the console's API."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
