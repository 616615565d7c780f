"""The direct send to a Redis broker (``runtime/celery/fast_send.py``) on a real Redis: it pushes,
field by field, the message kombu's own ``app.send_task`` pushes (ids apart), to the same list;
a real ``shelly worker`` runs the tasks so sent; a send while the broker Redis is down is refused,
not raised, and the next after its restart is taken."""

from __future__ import annotations

import base64
import json
import logging
import re
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from prometheus_client.parser import text_string_to_metric_families

from shelly_dist.runtime.celery import broker as broker_module
from shelly_dist.runtime.celery import fast_send
from shelly_dist.runtime.celery.broker import create_app, run_task_sender, send_run_task
from shelly_dist.runtime.celery.fast_send import RedisSend
from shelly_dist.runtime.celery.names import RESUME_AGENT, RUN_AGENT
from shelly_dist.runtime.celery.settings import RuntimeSettings
from tests.conftest import free_port

from .cluster import BROKER_DB, Cluster, complete, delegate, scripted, wait_until
from .ops import run_json
from .support.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.fixture
def broker(redis_url: str) -> Iterator[redis.Redis]:
    """The tests' broker database of the shared Redis; every key naming a ``fs-`` queue of this
    test is deleted afterwards."""
    client = redis.Redis.from_url(f"{redis_url.rsplit('/', 1)[0]}/{BROKER_DB}", decode_responses=True)
    tag = uuid.uuid4().hex[:8]
    client.tag = tag  # type: ignore[attr-defined]
    yield client
    for key in client.scan_iter(match=f"*fs-{tag}*", count=1000):
        client.delete(key)
    client.close()


def app_on(broker: redis.Redis, queue: str, **transport: Any) -> Celery:
    url = f"redis://127.0.0.1:{broker.connection_pool.connection_kwargs['port']}/{BROKER_DB}"
    app = create_app(RuntimeSettings(broker_url=url, redis_url=url, queue=queue))
    if transport:
        app.conf.broker_transport_options = {**app.conf.broker_transport_options, **transport}
    return app


def normalized(raw: str) -> dict[str, Any]:
    """The pushed envelope with its body decoded, and its ids (the task's, the delivery tag), which
    each send draws afresh, checked and replaced by placeholders."""
    message = json.loads(raw)
    headers, properties = message["headers"], message["properties"]
    task_id = headers["id"]
    assert UUID.match(task_id) and UUID.match(properties["delivery_tag"]), message
    assert headers["root_id"] == properties["correlation_id"] == task_id, message
    headers["id"] = headers["root_id"] = properties["correlation_id"] = "<task id>"
    properties["delivery_tag"] = "<delivery tag>"
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


async def both_ways(broker: redis.Redis, app: Celery, queue: str, key: str, name: str, args: list[Any],
                    kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The message kombu pushes for the task, then the one the direct send pushes (from this
    thread both: Celery's ``reply_to`` names the sending thread)."""
    assert send_run_task(app, name, args, kwargs, queue=queue)
    (kombu_raw,) = broker.lrange(key, 0, -1)
    broker.delete(key)
    send = RedisSend(app, queue)
    try:
        assert await send(name, args, kwargs)
    finally:
        await send.aclose()
    (direct_raw,) = broker.lrange(key, 0, -1)
    broker.delete(key)
    return normalized(kombu_raw), normalized(direct_raw)


@pytest.mark.parametrize(("name", "kwargs"), [
    (RUN_AGENT, {"agent": "researcher", "depth": 2, "session": "s-1", "preview": "naïve \"quoted\" ünïcödé ✓ " * 4}),
    (RESUME_AGENT, {"agent": "lead", "depth": 0, "session": "s-1", "preview": ""}),
    (RUN_AGENT, {}),  # no agent: no shadow
])
async def test_the_direct_send_pushes_kombus_message_field_by_field(broker: redis.Redis, name: str,
                                                                    kwargs: dict[str, Any]):
    queue = f"fs-{broker.tag}"  # type: ignore[attr-defined]
    app = app_on(broker, queue)
    try:
        kombu_msg, direct_msg = await both_ways(broker, app, queue, queue, name, ["run-1", "root-1"], kwargs)
    finally:
        app.close()
    for part in ("headers", "properties"):
        assert sorted(direct_msg[part]) == sorted(kombu_msg[part]), part
        for field, value in kombu_msg[part].items():
            assert direct_msg[part][field] == value, f"{part}.{field}"
    assert direct_msg == kombu_msg
    assert list(direct_msg) == list(kombu_msg) and list(direct_msg["headers"]) == list(kombu_msg["headers"])


async def test_with_a_global_keyprefix_both_push_to_the_prefixed_list(broker: redis.Redis):
    queue = f"fs-{broker.tag}"  # type: ignore[attr-defined]
    prefix = f"fs-{broker.tag}-prefix:"  # type: ignore[attr-defined]
    app = app_on(broker, queue, global_keyprefix=prefix)
    try:
        kombu_msg, direct_msg = await both_ways(broker, app, queue, prefix + queue, RUN_AGENT, ["r", "r"],
                                                {"agent": "a"})
    finally:
        app.close()
    assert direct_msg == kombu_msg
    assert not broker.exists(queue)


async def test_the_first_direct_send_declares_the_queue_as_kombus_first_send_does(broker: redis.Redis):
    tag = broker.tag  # type: ignore[attr-defined]
    by_kombu, direct = f"fs-{tag}-k", f"fs-{tag}-d"
    app = app_on(broker, by_kombu)
    send = RedisSend(app, direct)
    try:
        assert send_run_task(app, RUN_AGENT, ["r", "r"], {}, queue=by_kombu)
        assert await send(RUN_AGENT, ["r", "r"], {})
    finally:
        await send.aclose()
        app.close()
    for template in ("_kombu.binding.{}", "_kombu.binding_permanent.{}"):
        declared = broker.smembers(template.format(by_kombu))
        assert declared, template
        assert broker.smembers(template.format(direct)) == {m.replace(by_kombu, direct) for m in declared}


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sent(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], path: str, outcome: str) -> float:
    return samples.get(("shelly_tasks_sent_total", frozenset({"path": path, "outcome": outcome}.items())), 0.0)


async def test_an_unchecked_celery_version_falls_back_to_celerys_send_and_still_delivers(
        broker: redis.Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    monkeypatch.setattr(fast_send, "installed_versions", lambda: ("9.9.0", "9.9.0"))
    monkeypatch.setattr(broker_module, "_version_warned", set())
    queue = f"fs-{broker.tag}"  # type: ignore[attr-defined]
    app = app_on(broker, queue)
    with caplog.at_level(logging.DEBUG, logger="shelly_dist.runtime.celery"):
        send = run_task_sender(app, queue)
    try:
        assert await send(RUN_AGENT, ["run-1", "root-1"], {"agent": "a"})
    finally:
        await send.aclose()
        app.close()
    assert [r.getMessage() for r in caplog.records if r.name.startswith("shelly_dist")] == [
        "broker: tasks go through Celery's send_task: Celery 9.9.0 / kombu 9.9.0 are not a version "
        "the direct send was checked against (5.7.0/5.7.0)"]
    (raw,) = broker.lrange(queue, 0, -1)
    message = normalized(raw)
    assert message["headers"]["task"] == RUN_AGENT
    assert message["body"][0] == ["run-1", "root-1"]


def test_a_worker_runs_a_delegation_whose_tasks_it_pushed_directly(cluster: Cluster):
    """lead (the CLI's coordinator) delegates to fan on the worker, which fans out to five leaves
    and is resumed: the leaves' tasks and fan's resume are the worker's sends, all direct pushes
    (its metrics say so), all consumed by the worker (the run completes)."""
    cluster.write_config(
        [scripted(lead=[delegate(("fan", "spread")), "lead done"],
                  fan=[delegate(*[("leaf", f"job {i}") for i in range(5)]), complete("fanned")],
                  leaf=[complete("leaf {task}")])],
        [{"name": "lead", "options": {"max_delegation_depth": 2}},
         {"name": "fan", "options": {"max_delegation_depth": 2}},
         {"name": "leaf"}],
    )
    port = free_port()
    cluster.start_worker("w1", env={"SHELLY_METRICS_PORT": str(port)})
    out = run_json(cluster, "go")
    assert out["reply"] == "lead done"
    assert {r["status"] for r in cluster.runs(out["session"])} == {"done"}

    def six_sent() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
        samples = scrape(port)
        return samples if sent(samples, "redis", "taken") >= 6 else None

    samples = wait_until(six_sent, 30, "the worker's six direct sends (five leaves, fan's resume)")
    assert sent(samples, "kombu", "taken") == sent(samples, "kombu", "refused") == 0
    assert sent(samples, "redis", "refused") == 0


async def test_a_send_while_the_broker_redis_is_down_is_refused_and_one_after_its_restart_taken(
        tmp_path: Path, caplog: pytest.LogCaptureFixture):
    server = RedisServer(tmp_path / "broker")
    server.start()
    url = server.url()
    app = create_app(RuntimeSettings(broker_url=url, redis_url=url, queue="q"))
    send = RedisSend(app, "q")
    try:
        assert await send(RUN_AGENT, ["before", "before"], {})
        server.kill()
        started = time.monotonic()
        with caplog.at_level(logging.WARNING):
            assert await send(RUN_AGENT, ["during", "during"], {}) is False
        assert time.monotonic() - started < 10
        assert any(r.getMessage().startswith("broker: did not take shelly.run_agent of run during")
                   for r in caplog.records)
        server.start()
        assert await send(RUN_AGENT, ["after", "after"], {})
        queued = [json.loads(base64.b64decode(json.loads(m)["body"]))[0][0] for m in server.client().lrange("q", 0, -1)]
        assert queued == ["after", "before"]
    finally:
        await send.aclose()
        app.close()
        server.stop()
