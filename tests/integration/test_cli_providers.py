"""``shelly run`` end to end against real HTTP servers on loopback speaking each vendor's wire
format: the model asks for a tool, the tool runs, the model answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration


def _turns(req: RecordedRequest, kind: str) -> int:
    body = req.body or {}
    if kind == "gemini":
        return sum(1 for c in body.get("contents", []) if c.get("role") == "model")
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def respond_with_tool_then_text(kind: str):
    def respond(req: RecordedRequest) -> Reply:
        if _turns(req, kind) == 0:
            return Reply(text="", tool_calls=[{"name": "shared_state_set",
                                               "arguments": {"key": "colour", "value": "blue"}}],
                         usage={"input": 20, "output": 5})
        return Reply(text="The sky is blue.", usage={"input": 30, "output": 6})

    return respond


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini", "grok"])
def test_run_with_a_real_provider_wire_format_completes_a_tool_call(tmp_path: Path, kind: str):
    fmt = "openai" if kind == "grok" else kind
    with ModelServer(format=fmt, responder=respond_with_tool_then_text(fmt)) as server:
        shelly_dir = tmp_path / ".shelly"
        shelly_dir.mkdir()
        (shelly_dir / "config.yaml").write_text(yaml.safe_dump({
            "providers": [{"name": "vendor", "kind": kind, "model": "test-model", "base_url": server.url,
                           "api_key": "sk-test", "rate_limit": {"max_retries": 0}}],
            "agents": [{"name": "assistant", "toolboxes": ["state"]}],
        }))
        out = subprocess.run([sys.executable, "-m", "shelly_dist.cli.main", "run", "Why is the sky blue?", "--json"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert result["reply"] == "The sky is blue."
        assert result["usage"]["input_tokens"] == 50 and result["usage"]["output_tokens"] == 11
        requests = server.requests
        assert len(requests) == 2
        second = json.dumps(requests[1].body)
        assert '"ok"' in second, "the tool's result is sent back to the model"
