"""``shelly batch --provider-batch`` in one process: every model call of the batch goes through its
provider's batch API without editing the provider, and costs the batch price."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from shelly_dist.testing.model_server import ModelServer, Reply


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer(batch_delay=0.1, default=Reply(text="the answer", usage={"input": 1000, "output": 100})) as s:
        yield s


def openai_config(workdir: Path, server: ModelServer) -> None:
    data = {"providers": [{"name": "vendor", "kind": "openai", "model": "gpt-4o", "base_url": server.url,
                           "api_key": "k", "batch": {"enabled": False, "api": "openai", "collect_window": "0.2s",
                                                     "poll_interval": "0.1s"}}],
            "agents": [{"name": "solo"}]}
    (workdir / ".shelly").mkdir()
    (workdir / ".shelly" / "config.yaml").write_text(yaml.safe_dump(data))
    lines = [json.dumps({"id": f"t{i}", "task": f"job {i}"}) for i in range(4)]
    (workdir / "in.jsonl").write_text("\n".join(lines) + "\n")


def direct(server: ModelServer) -> int:
    return sum(1 for r in server.requests if r.path.endswith("/chat/completions"))


def test_provider_batch_sends_every_call_of_the_batch_through_the_providers_batch_api(
        invoke, workdir: Path, server: ModelServer) -> None:  # type: ignore[no-untyped-def]
    openai_config(workdir, server)
    result = invoke("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet", "--provider-batch")
    assert result.exit_code == 0, result.output
    out = [json.loads(line) for line in (workdir / "out.jsonl").read_text().splitlines()]
    assert {r["reply"] for r in out} == {"the answer"} and len(out) == 4
    assert direct(server) == 0 and sum(b["requests"] for b in server.batches.batches()) == 4


def test_without_provider_batch_a_provider_whose_batch_is_off_calls_directly(
        invoke, workdir: Path, server: ModelServer) -> None:  # type: ignore[no-untyped-def]
    openai_config(workdir, server)
    assert invoke("batch", "--tasks", "in.jsonl", "--output", "out.jsonl", "--quiet").exit_code == 0
    assert direct(server) == 4 and server.batches.batches() == []
