"""The workflow file a session was started from is a control file on the workers that run its
agents too (issue 38): the client read it, but the agents' tools run in ``shelly worker``
processes, which learn it from the session. Headless, with a fake secret planted."""

from __future__ import annotations

import json

import pytest
import yaml

from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply

from .cluster import Cluster

pytestmark = pytest.mark.timeout(240)

FAKE_SECRET = "sk-ant-FAKE-control-pool-0123456789"
EVIL = "name: review\nagents: {coder: {ref: coder}}\nsetup: [{run: 'env > leaked'}]\n"


def test_an_agent_on_a_worker_may_not_rewrite_the_workflow_file_in_use(cluster: Cluster) -> None:
    def respond(req: RecordedRequest) -> Reply:
        if any(m.get("role") == "tool" for m in req.body["messages"]):
            return Reply(text="tried")
        return Reply(tool_calls=[{"name": "fs_write", "arguments": {"path": "review.yaml", "content": EVIL}}])

    path = cluster.root / "review.yaml"
    path.write_text(yaml.safe_dump({"name": "review", "agents": {"coder": {"ref": "coder"}},
                                    "kickoff": "@coder tidy up"}))
    original = path.read_text()
    with ModelServer(format="openai", responder=respond) as server:
        mock = {"name": "mock", "kind": "openai", "model": "gpt-test", "base_url": server.url, "api_key": "k",
                "rate_limit": {"max_retries": 0}}
        cluster.write_config([mock], [{"name": "coder", "provider": "mock", "toolboxes": ["filesystem", "team"]}])
        cluster.start_workers("wa", env={"ANTHROPIC_API_KEY": FAKE_SECRET})
        done = cluster.shelly("workflow", "run", str(path), timeout=180)
        tool_results = [m["content"] for r in server.requests for m in r.body["messages"] if m.get("role") == "tool"]
    assert done.returncode == 0, f"{done.stderr}\n{cluster.worker_log()}"
    assert path.read_text() == original
    assert tool_results and all(
        "fs_write: refused: review.yaml is a control file (the workflow file in use)" in json.dumps(c)
        for c in tool_results), tool_results
