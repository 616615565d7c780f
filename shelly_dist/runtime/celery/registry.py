"""Every Lua script of the pool, registered once per Redis client.

:func:`registered` answers one :class:`Scripts` per client (kept as long as the client lives):
``register_script`` only hashes the text, and the first call of each script loads it (``EVALSHA``
after that, ``SCRIPT LOAD`` again on a restarted Redis), so no call of the pool sends a script's
text twice or registers one per call. This is the only module of ``runtime/celery`` that calls
``register_script``; the texts live in :mod:`.scripts` (the journal's) and :mod:`.control_scripts`
(stops, questions, interactive rounds, handoff, due index) — ``tests/unit/runtime/
test_script_registry.py`` fails on a script defined or registered anywhere else. It works for the
renewer's synchronous client too (its scripts are then synchronous).
"""

from __future__ import annotations

import weakref
from typing import Any

from shelly_dist.runtime.celery import control_scripts, scripts


class JournalScripts:
    """The journal's scripts (:mod:`.scripts`): claims, checkpoints, finishes, leases, spawns."""

    def __init__(self, client: Any) -> None:
        self.expect = client.register_script(scripts.EXPECT)
        self.checkpoint = client.register_script(scripts.CHECKPOINT)
        self.claim = client.register_script(scripts.CLAIM)
        self.renew = client.register_script(scripts.RENEW)
        self.release = client.register_script(scripts.RELEASE)
        self.drop = client.register_script(scripts.DROP)
        self.finish = client.register_script(control_scripts.plain_text(scripts.FINISH))
        self.reap = client.register_script(scripts.REAP)
        self.sent = client.register_script(scripts.SENT)
        self.pull = client.register_script(scripts.PULL)
        self.spawn_start = client.register_script(scripts.SPAWN_START)
        self.spawn_announce = client.register_script(scripts.SPAWN_ANNOUNCE)
        self.spawn_suspend = client.register_script(scripts.SPAWN_SUSPEND)


class ControlScripts:
    """The control paths' scripts (:mod:`.control_scripts`)."""

    def __init__(self, client: Any) -> None:
        self.mark_if_exists = client.register_script(control_scripts.MARK_IF_EXISTS)
        self.stop = client.register_script(control_scripts.STOP)
        self.handoff = client.register_script(control_scripts.HANDOFF)
        self.ask = client.register_script(control_scripts.ASK)
        self.answer = client.register_script(control_scripts.ANSWER)
        self.ask_parent = client.register_script(control_scripts.ASK_PARENT)
        self.answer_child = client.register_script(control_scripts.ANSWER_CHILD)
        self.round_expire = client.register_script(control_scripts.ROUND_EXPIRE)
        self.elect = client.register_script(control_scripts.ELECT)
        self.settle = client.register_script(control_scripts.SETTLE)
        self.resign = client.register_script(control_scripts.RESIGN)


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


_registered: weakref.WeakKeyDictionary[Any, Scripts] = weakref.WeakKeyDictionary()


def registered(client: Any) -> Scripts:
    """The scripts of ``client``, registered on its first use (the same object every time)."""
    found = _registered.get(client)
    if found is None:
        found = _registered[client] = Scripts(client)
    return found
