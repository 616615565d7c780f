"""The direct send to a Redis broker (``runtime/celery/fast_send.py``) without a Redis: which apps
it serves, how a turn's sends leave in one push, and the library versions its format was read from.
The field-by-field comparison with kombu's own message is ``tests/integration/test_fast_send.py``."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import Any

import celery
import kombu
import pytest
from celery.signals import before_task_publish
from redis.exceptions import ConnectionError as RedisConnectionError

from shelly_dist.runtime.celery import broker as broker_module
from shelly_dist.runtime.celery import fast_send
from shelly_dist.runtime.celery.broker import KombuSend, create_app, run_task_sender
from shelly_dist.runtime.celery.fast_send import CHECKED_VERSIONS, RedisSend, direct_send_refusal, version_refusal
from shelly_dist.runtime.celery.settings import RuntimeSettings

REDIS = "redis://127.0.0.1:6379/3"


def app_for(broker: str = REDIS, **conf: Any) -> celery.Celery:
    app = create_app(RuntimeSettings(broker_url=broker, redis_url=REDIS, queue="q"))
    app.conf.update(conf)
    return app


def test_the_installed_celery_and_kombu_are_a_checked_pair():
    """Our own install sends directly (the benchmarks measure that path): an upgrade here re-reads
    ``celery/app/amqp.py`` and ``kombu/transport/redis.py``, runs tests/integration/test_fast_send.py
    and adds the pair to ``CHECKED_VERSIONS``; a user's other install falls back at run time."""
    assert (celery.__version__, kombu.__version__) in CHECKED_VERSIONS
    assert version_refusal() is None


def test_an_unchecked_celery_or_kombu_keeps_celerys_send_and_says_so_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    monkeypatch.setattr(fast_send, "installed_versions", lambda: ("9.9.0", kombu.__version__))
    monkeypatch.setattr(broker_module, "_version_warned", set())
    with caplog.at_level(logging.DEBUG, logger="shelly_dist.runtime.celery"):
        senders = [run_task_sender(app_for(), "q"), run_task_sender(app_for(), "q")]
    assert all(isinstance(s, KombuSend) for s in senders)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["broker: tasks go through Celery's send_task: Celery 9.9.0 / kombu "
                     f"{kombu.__version__} are not a version the direct send was checked against (5.7.0/5.7.0)"]


def test_an_app_as_create_app_makes_it_sends_directly_to_a_redis_broker():
    assert direct_send_refusal(app_for(), "q") is None
    assert direct_send_refusal(app_for("rediss://127.0.0.1:6380/0"), "q") is None
    assert isinstance(run_task_sender(app_for(), "q"), RedisSend)


@pytest.mark.parametrize(("broker", "conf", "named"), [
    ("amqp://guest:guest@127.0.0.1:5672//", {}, "amqp://"),
    ("redis://a:6379/0;redis://b:6379/0", {}, "not one Redis"),
    (REDIS, {"task_compression": "zlib"}, "task_compression"),
    (REDIS, {"task_serializer": "pickle"}, "task_serializer"),
    (REDIS, {"task_routes": {"shelly.*": {"queue": "other"}}}, "task_routes"),
    (REDIS, {"task_default_priority": 5}, "task_default_priority"),
    (REDIS, {"task_send_sent_event": True}, "task_send_sent_event"),
    (REDIS, {"broker_transport_options": {"priority_steps": [0, 9]}}, "priority_steps"),
    (REDIS, {"broker_use_ssl": {"ssl_cert_reqs": "required"}}, "broker_use_ssl"),
])
def test_an_app_the_copy_does_not_follow_keeps_celerys_send(broker: str, conf: dict[str, Any], named: str):
    app = app_for(broker, **conf)
    assert named in (direct_send_refusal(app, "q") or "")
    assert isinstance(run_task_sender(app, "q"), KombuSend)


def test_a_publish_signal_receiver_keeps_celerys_send():
    def receiver(**_: Any) -> None: ...

    before_task_publish.connect(receiver)
    try:
        assert "before_task_publish" in (direct_send_refusal(app_for(), "q") or "")
    finally:
        before_task_publish.disconnect(receiver)


class FakeBroker:
    """Records each LPUSH (key and values); raises ``error`` instead when set."""

    def __init__(self, error: Exception | None = None) -> None:
        self.pushes: list[tuple[str, tuple[str, ...]]] = []
        self.error = error

    async def lpush(self, key: str, *values: str) -> int:
        if self.error is not None:
            raise self.error
        self.pushes.append((key, values))
        return len(values)


def sender(broker: FakeBroker, **conf: Any) -> RedisSend:
    send = RedisSend(app_for(**conf), "q")
    send._declared = True  # kombu's declaration needs a broker; the integration test covers it
    send._redis = lambda: broker  # type: ignore[method-assign]
    return send


def task_of(message: str) -> tuple[str, list[Any]]:
    envelope = json.loads(message)
    args, _kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
    return envelope["headers"]["task"], args


async def test_tasks_sent_in_one_turn_leave_in_one_push_in_the_order_sent():
    broker = FakeBroker()
    send = sender(broker)
    took = await asyncio.gather(*(send("shelly.run_agent", [f"c{i}", "root"], {"agent": "w"}) for i in range(5)))
    assert took == [True] * 5
    assert len(broker.pushes) == 1
    key, values = broker.pushes[0]
    assert key == "q"
    assert [task_of(v) for v in values] == [("shelly.run_agent", [f"c{i}", "root"]) for i in range(5)]


async def test_tasks_sent_one_after_the_other_each_leave_in_their_own_push():
    broker = FakeBroker()
    send = sender(broker)
    assert await send("shelly.run_agent", ["a", "a"], {}) and await send("shelly.resume_agent", ["b", "b"], {})
    assert [len(values) for _, values in broker.pushes] == [1, 1]


async def test_a_refused_push_reports_every_task_of_it_not_taken_and_names_the_broker(
        caplog: pytest.LogCaptureFixture):
    send = sender(FakeBroker(RedisConnectionError("Connection refused")))
    with caplog.at_level(logging.WARNING):
        took = await asyncio.gather(*(send("shelly.run_agent", [f"c{i}", "root"], {}) for i in range(3)))
    assert took == [False, False, False]
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(" (")[0] for line in lines] == [f"broker: did not take shelly.run_agent of run c{i}"
                                                     for i in range(3)]
    assert all("Connection refused" in line for line in lines)


async def test_the_global_keyprefix_prefixes_the_queues_list():
    broker = FakeBroker()
    send = sender(broker, broker_transport_options={"visibility_timeout": 10, "global_keyprefix": "pfx:"})
    assert await send("shelly.run_agent", ["a", "a"], {})
    assert broker.pushes[0][0] == "pfx:q"


class Parent:
    """A run record as ``enqueue_resume`` reads it."""

    def __init__(self, run_id: str) -> None:
        self.id = self.root = run_id

    def task_kwargs(self) -> dict[str, Any]:
        return {"agent": "lead", "depth": 0, "session": "s", "preview": ""}


class Records:
    async def record(self, run_id: str) -> Parent:
        return Parent(run_id)


async def test_resumes_sent_together_leave_in_one_push():
    from shelly_dist.runtime.celery.children.join import resume_each

    broker = FakeBroker()
    await resume_each(Records(), sender(broker), ["p1", "p2", "p3"])  # type: ignore[arg-type]
    assert len(broker.pushes) == 1
    assert [task_of(v) for v in broker.pushes[0][1]] == [("shelly.resume_agent", [p, p]) for p in ("p1", "p2", "p3")]
