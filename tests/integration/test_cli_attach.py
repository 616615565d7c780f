"""Attachments (issue 37): ``shelly run --attach`` and a batch item's ``attachments`` send the file
as the vendor's part — an OpenAI-compatible server gets an ``image_url`` data URL, Anthropic an
``image`` block — read once, by the process the user started: on the pool the worker sends the
bytes it finds in the journal, even when the file is gone."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shelly_dist.testing.model_server import ModelServer, Reply

from .cluster import Cluster, wait_until

pytestmark = pytest.mark.integration

SHELLY = [sys.executable, "-m", "shelly_dist.cli.main"]
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
DATA = base64.b64encode(PNG).decode()


def project(root: Path, server: ModelServer, kind: str) -> None:
    (root / ".shelly").mkdir(exist_ok=True)
    config = {"providers": [{"name": "v", "kind": kind, "model": "m", "base_url": server.url, "api_key": "k",
                             "rate_limit": {"max_retries": 0}}],
              "agents": [{"name": "looker", "provider": "v"}]}
    (root / ".shelly" / "config.yaml").write_text(yaml.safe_dump(config))
    (root / "picture.png").write_bytes(PNG)


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SHELLY, "run", *args], cwd=root, capture_output=True, text=True, timeout=120)


def test_run_attach_sends_an_image_part_to_an_openai_compatible_server(tmp_path: Path) -> None:
    with ModelServer(default=Reply(text="a red dot")) as server:
        project(tmp_path, server, "openai")
        out = run(tmp_path, "--attach", "picture.png", "What is in this picture?")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "a red dot"
    user = server.requests[0].body["messages"][-1]  # the instance's <identity> comes first (openai.py)
    assert user["content"][-2:] == [{"type": "text", "text": "What is in this picture?"},
                                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{DATA}"}}]


def test_run_attach_sends_anthropic_its_image_block(tmp_path: Path) -> None:
    with ModelServer(default=Reply(text="a red dot")) as server:
        project(tmp_path, server, "anthropic")
        out = run(tmp_path, "--attach", "picture.png", "What is in this picture?")
    assert out.returncode == 0, out.stderr
    assert server.requests[0].body["messages"][-1]["content"] == [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": DATA}}]


def test_a_pdf_to_a_provider_that_takes_none_is_refused_naming_it(tmp_path: Path) -> None:
    with ModelServer() as server:
        project(tmp_path, server, "grok")
        (tmp_path / "report.pdf").write_bytes(b"%PDF-1.4\n%%EOF\n")
        out = run(tmp_path, "--attach", "report.pdf", "Summarise it")
        assert server.requests == []  # refused before any request
    assert out.returncode != 0
    assert 'provider "v": bad request: a grok provider takes no document parts (report.pdf)' in out.stderr


def test_a_missing_file_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    with ModelServer() as server:
        project(tmp_path, server, "openai")
        out = run(tmp_path, "--attach", "nope.png", "look")
    assert out.returncode == 2 and "attach: nope.png: no such file" in out.stderr


def test_a_batch_items_attachment_reaches_the_model_from_the_journal_on_a_worker(cluster: Cluster) -> None:
    with ModelServer(default=Reply(text="a red dot")) as server:
        cluster.write_config([{"name": "v", "kind": "openai", "model": "m", "base_url": server.url, "api_key": "k",
                               "rate_limit": {"max_retries": 0}}], [{"name": "looker", "provider": "v"}])
        inbox = cluster.root / "inbox"
        inbox.mkdir()
        (inbox / "picture.png").write_bytes(PNG)
        (inbox / "items.jsonl").write_text(json.dumps(
            {"id": "one", "task": "What is in this picture?", "attachments": ["picture.png"]}) + "\n")
        batch = cluster.popen("batch", "--tasks", "inbox/items.jsonl", "--output", "out.jsonl", "--quiet")
        try:
            cluster.run_record("looker")  # submitted: the bytes are in the journal, no worker has run it
            (inbox / "picture.png").unlink()  # the worker could not read the file if it tried
            cluster.start_worker("w1")
            _, err = batch.communicate(timeout=120)
        finally:
            if batch.poll() is None:
                batch.kill()
                batch.communicate()
        assert batch.returncode == 0, err + cluster.worker_log()
        [record] = [json.loads(line) for line in (cluster.root / "out.jsonl").read_text().splitlines()]
        assert record["status"] == "completed" and record["reply"] == "a red dot"
        content = wait_until(lambda: server.requests, 10, "the request")[0].body["messages"][-1]["content"]
        assert content[-1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{DATA}"}}


def test_an_attachment_is_journaled_once_by_content_hash_and_reaches_the_model_from_it(cluster: Cluster) -> None:
    big = PNG + b"\0" * 30_000  # past what is journaled inline; the magic bytes keep it an image
    data = base64.b64encode(big).decode()
    digest = hashlib.sha256(data.encode()).hexdigest()
    with ModelServer(default=Reply(text="a red dot")) as server:
        cluster.write_config([{"name": "v", "kind": "openai", "model": "m", "base_url": server.url, "api_key": "k",
                               "rate_limit": {"max_retries": 0}}], [{"name": "looker", "provider": "v"}])
        inbox = cluster.root / "inbox"
        inbox.mkdir()
        (inbox / "picture.png").write_bytes(big)
        (inbox / "items.jsonl").write_text("".join(json.dumps(
            {"id": i, "task": "What is in this picture?", "attachments": ["picture.png"]}) + "\n" for i in ("a", "b")))
        batch = cluster.popen("batch", "--tasks", "inbox/items.jsonl", "--output", "out.jsonl", "--quiet")
        try:
            wait_until(lambda: len(roots_with_input(cluster)) == 2, 60, "both items submitted")
            (inbox / "picture.png").unlink()  # the worker could not read the file if it tried
            inputs = roots_with_input(cluster)
            cluster.start_worker("w1")
            _, err = batch.communicate(timeout=120)
        finally:
            if batch.poll() is None:
                batch.kill()
                batch.communicate()
        assert batch.returncode == 0, err + cluster.worker_log()
        assert all(data not in i and f"shelly-blob:sha256:{digest}" in i for i in inputs)  # a reference each
        blob = f"{cluster.prefix}blob:{digest}"
        assert cluster.redis.get(blob) == data and cluster.redis.ttl(blob) > 0  # stored once, expiring
        assert len(list(cluster.redis.scan_iter(match=f"{cluster.prefix}blob:*"))) == 1
        journaled = [m for key in cluster.redis.scan_iter(match=cluster.prefix + "run:*:msgs")
                     for m in cluster.redis.lrange(key, 0, -1)]
        assert any(digest in m for m in journaled) and not any(data in m for m in journaled)  # checkpoints too
        images = [r.body["messages"][-1]["content"][-1] for r in server.requests]
        assert images == [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}] * 2


def roots_with_input(cluster: Cluster) -> list[str]:
    """The ``input`` field of every root run record that has one (a batch item's messages)."""
    out = []
    for key in cluster.redis.scan_iter(match=cluster.prefix + "run:*"):
        if key.count(":") == cluster.prefix.count(":") + 1 and cluster.redis.type(key) == "hash":
            value = cluster.redis.hget(key, "input")
            if value:
                out.append(value)
    return out
