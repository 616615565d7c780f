"""Every Lua script of the pool lives in one place and is registered once per client (issue 21,
part 4): a module of ``runtime/celery`` that defines or registers a script of its own, or a path
that registers one per call, fails here."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.children import cancel, policy
from shelly_dist.runtime.celery.journal import registry
from shelly_dist.runtime.celery.journal.due import DueIndex
from shelly_dist.runtime.celery.journal.store import RunStore
from shelly_dist.runtime.celery.settings import RuntimeSettings

CELERY = Path(registry.__file__).parent
TEXTS = {"scripts.py", "control_scripts.py"}
"""The modules that hold the scripts' text."""
LUA = re.compile(r"redis\.call\(|redis\.pcall\(|redis\.error_reply|KEYS\[\d")


def test_no_module_of_the_pool_but_the_registry_registers_a_script():
    offenders = [p.name for p in CELERY.glob("*.py")
                 if p.name != "registry.py" and "register_script" in p.read_text()]
    assert offenders == []


def test_no_module_of_the_pool_but_the_script_modules_holds_lua():
    offenders = [p.name for p in CELERY.glob("*.py") if p.name not in TEXTS and LUA.search(p.read_text())]
    assert offenders == []


def test_no_module_of_the_pool_sends_a_scripts_text_with_eval():
    offenders = [p.name for p in CELERY.glob("*.py") if re.search(r"\.eval\(", p.read_text())]
    assert offenders == []


def counting(client: Any) -> list[str]:
    """Make ``client`` record every script registered on it."""
    seen: list[str] = []
    original = client.register_script

    def register(text: str) -> Any:
        seen.append(text)
        return original(text)

    client.register_script = register
    return seen


@pytest.fixture
def client() -> fakeredis.FakeAsyncRedis:
    return fakeredis.FakeAsyncRedis(decode_responses=True)


def test_the_registry_answers_the_same_scripts_for_one_client(client):
    assert registry.registered(client) is registry.registered(client)
    assert registry.registered(client) is not registry.registered(fakeredis.FakeAsyncRedis())


async def test_the_scripts_are_registered_once_per_client_not_per_call(client):
    seen = counting(client)
    keys = Keys(f"t:{uuid.uuid4().hex[:6]}:")
    settings = RuntimeSettings(broker_url="memory://", redis_url="redis://", key_prefix=keys.prefix)
    await client.hset(keys.run("root"), mapping={"status": "running", "root": "root"})
    for _ in range(3):
        RunStore(client, settings)
        DueIndex(client, keys, 60)
        await cancel.cancel_tree(client, keys, "root")
        await policy.stop_runs(client, keys, ["root"], "stopped")
    assert len(seen) == len(set(seen))  # each text once
    everything = registry.registered(client)
    assert len(seen) == len(vars(everything.journal)) + len(vars(everything.control))


def test_every_channel_the_registrys_scripts_publish_on_is_a_tree_channel():
    """On a cluster the registry makes each of these ``PUBLISH``es a sharded ``SPUBLISH`` in the
    script's slot (``redisio/sharded.py``): right only for a tree's own ``:changed``/``:ended``."""
    published = [m for name in TEXTS
                 for m in re.findall(r"redis\.call\('PUBLISH', ([^,]+),", (CELERY / name).read_text())]
    assert published and all(re.fullmatch(r"\w+ \.\. ':(changed|ended)'", p.strip()) for p in published), published
