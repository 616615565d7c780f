"""A script using the Python API with a real provider ends without aiohttp's "Unclosed client
session": the pooled session is closed when ``asyncio.run`` shuts its loop down."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import asyncio
from shelly_dist.agent import Agent
from shelly_dist.providers.openai import OpenAICompleter
from shelly_dist.testing.model_server import ModelServer, Reply
with ModelServer(default=Reply(text="hi")) as server:
    agent = Agent("solo", "", completer=OpenAICompleter(model="m", base_url=server.url))
    print(asyncio.run(agent.run("hello")).text_content())
    print(asyncio.run(agent.run("again")).text_content())
"""


def test_a_script_that_never_closes_the_http_client_ends_without_an_unclosed_session_warning() -> None:
    out = subprocess.run([sys.executable, "-W", "default", "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["hi", "hi"]
    assert "Unclosed" not in out.stderr and "unclosed" not in out.stderr, out.stderr
