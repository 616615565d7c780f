"""Every Lua script of the pool, registered once per Redis client.

:func:`registered` answers one :class:`Scripts` per client (kept as long as the client lives):
``register_script`` only hashes the text, and the first call of each script loads it (``EVALSHA``
after that, ``SCRIPT LOAD`` again on a restarted Redis), so no call of the pool sends a script's
text twice or registers one per call. This is the only module of ``runtime/celery`` that calls
``register_script``; the texts live in :mod:`.scripts` (the journal's) and :mod:`.control_scripts`
(stops, questions, interactive rounds, handoff, due index) — ``tests/unit/runtime/
test_script_registry.py`` fails on a script defined or registered anywhere else. It works for the
renewer's synchronous client too (its scripts are then synchronous). On a Redis Cluster the
scripts publish the tree's wake-ups sharded (``SPUBLISH``, :mod:`shelly_dist.redisio.sharded`): one
text per script, rewritten at registration.
"""

from __future__ import annotations

from typing import Any

from shelly_dist.redisio.per_client import PerClient
from shelly_dist.redisio.sharded import script_text
from shelly_dist.runtime.celery.journal import control_scripts, scripts


def _register(client: Any, text: str) -> Any:
    """``text`` registered on ``client`` to run without the due index's hint in it (a script that
    calls ``due_hint()`` gets it as a no-op: :func:`.control_scripts.plain_text`; :meth:`Scripts.hinted`
    is the variant with it); on a cluster its ``PUBLISH``es are ``SPUBLISH``es
    (:func:`~shelly_dist.redisio.sharded.script_text`): every channel these scripts publish on is a
    run tree's, in the slot of the tree's keys the script is given."""
    return client.register_script(script_text(client, control_scripts.plain_text(text)))


class JournalScripts:
    """The journal's scripts (:mod:`.scripts`): claims, checkpoints, finishes, leases, spawns."""

    def __init__(self, client: Any) -> None:
        self.expect = _register(client, scripts.EXPECT)
        self.checkpoint = _register(client, scripts.CHECKPOINT)
        self.claim = _register(client, scripts.CLAIM)
        self.renew = _register(client, scripts.RENEW)
        self.release = _register(client, scripts.RELEASE)
        self.drop = _register(client, scripts.DROP)
        self.finish = _register(client, scripts.FINISH)
        self.reap = _register(client, scripts.REAP)
        self.sent = _register(client, scripts.SENT)
        self.received = _register(client, scripts.RECEIVED)
        self.pull = _register(client, scripts.PULL)
        self.spawn_start = _register(client, scripts.SPAWN_START)
        self.spawn_announce = _register(client, scripts.SPAWN_ANNOUNCE)
        self.spawn_suspend = _register(client, scripts.SPAWN_SUSPEND)


class ControlScripts:
    """The control paths' scripts (:mod:`.control_scripts`)."""

    def __init__(self, client: Any) -> None:
        self.mark_if_exists = _register(client, control_scripts.MARK_IF_EXISTS)
        self.stop = _register(client, control_scripts.STOP)
        self.cancel = _register(client, control_scripts.CANCEL)
        self.handoff = _register(client, control_scripts.HANDOFF)
        self.ask = _register(client, control_scripts.ASK)
        self.answer = _register(client, control_scripts.ANSWER)
        self.steer = _register(client, control_scripts.STEER)
        self.model_suspend = _register(client, control_scripts.MODEL_SUSPEND)
        self.model_deliver = _register(client, control_scripts.MODEL_DELIVER)
        self.ask_parent = _register(client, control_scripts.ASK_PARENT)
        self.answer_child = _register(client, control_scripts.ANSWER_CHILD)
        self.round_expire = _register(client, control_scripts.ROUND_EXPIRE)
        self.elect = _register(client, control_scripts.ELECT)
        self.settle = _register(client, control_scripts.SETTLE)
        self.resign = _register(client, control_scripts.RESIGN)
        self.batch_join = _register(client, control_scripts.BATCH_JOIN)
        self.batch_open = _register(client, control_scripts.BATCH_OPEN)
        self.batch_save = _register(client, control_scripts.BATCH_SAVE)
        self.batch_lock = _register(client, control_scripts.BATCH_LOCK)
        self.batch_unlock = _register(client, control_scripts.BATCH_UNLOCK)
        self.batch_drop = _register(client, control_scripts.BATCH_DROP)


class Scripts:
    """Every script of the pool for one client."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.journal = JournalScripts(client)
        self.control = ControlScripts(client)
        self._hinted: dict[str, Any] = {}

    def hinted(self, script: Any) -> Any:
        """``script``'s single-Redis variant with the due index's hint inside it
        (:func:`.control_scripts.hinted_text`: :meth:`.DueIndex.run`), registered on first use."""
        found = self._hinted.get(script.sha)
        if found is None:
            body = script.script.removeprefix(control_scripts.NO_HINT)
            found = self._hinted[script.sha] = self._client.register_script(control_scripts.hinted_text(body))
        return found


registered: PerClient[Scripts] = PerClient(Scripts)
"""``registered(client)``: the scripts of ``client``, registered on its first use (the same object
every time)."""
