"""The batch layer of a provider on a worker: a model call joins the provider key's desk in Redis
and the run is suspended, holding no worker slot, until its reply is delivered.

Where the embedded collector (:class:`~shelly_dist.models.batching.BatchCollector`) waits in its
process, this layer journals the request (:meth:`.Desk.join`) and raises
:class:`~shelly_dist.models.suspend.SuspendModel` with no due time: the step machine journals the
wait and the worker lets the run go. The desk's elected holder (``worker/batch_runner.py``) sends the window as
one vendor batch, polls it, and delivers each reply (``model_waits.deliver``) — or, when the batch
fails, makes the call directly and delivers that — and the run resumes on any worker.

A request's ``custom_id`` is derived from the run and what is asked (the vendor's request body),
so a step that runs again after a crash, before its wait was journaled, joins the same request
instead of sending a second one; and a run that finds its reply already there takes it at once.

Calls that cannot suspend (an effect summarising a chat, a team's coordinator: nothing journals
their wait) and runs whose provider does not batch (``batch.enabled`` unset, and no
``--provider-batch`` on the run's session) go direct.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from shelly_dist.chats import Chat, Message
from shelly_dist.identity import agent_name, run_id, session_id
from shelly_dist.models.batching import BatchAPI, BatchSettings
from shelly_dist.models.batching.api import PROVIDER_BATCH
from shelly_dist.models.batching.desk import ProviderDesk, Request
from shelly_dist.models.completer import Completer, ToolSpec
from shelly_dist.models.suspend import SuspendModel, model_call
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.children.batch_desk import RedisDesk, asked_json

logger = logging.getLogger(__name__)

SESSIONS_KEPT = 1024
"""Sessions whose ``--provider-batch`` flag a worker remembers (a session's flag never changes)."""


def desk_id(api: BatchAPI, base_url: str, model: str, key: str) -> str:
    """A provider key's desk: its provider's name and a digest of what the vendor sees (API, base
    URL, model, key), so two configs that differ there never share a vendor batch."""
    digest = hashlib.sha1(f"{api.vendor}\0{base_url}\0{model}\0{key}".encode()).hexdigest()[:12]
    name = "".join(c if c.isascii() and (c.isalnum() or c in "_-.") else "-" for c in api.provider)
    return f"{name}.{digest}"


def custom_id(run: str, line: dict[str, Any]) -> str:
    """The request's ``custom_id``: a digest of the run and its request body (every vendor takes
    ``^[a-zA-Z0-9_-]{1,64}$``)."""
    return "s" + hashlib.sha1(f"{run}\0{json.dumps(line, sort_keys=True)}".encode()).hexdigest()[:40]


class PoolBatching:
    """The pool's batch layer factory (``Providers.batching`` on a worker), and the registry of the
    desks this process can work (every provider it built with a batch API)."""

    def __init__(self, client: aioredis.Redis, keys: Keys, retention: int) -> None:
        self.client = client
        self.keys = keys
        self.retention = retention
        self.desks: dict[str, ProviderDesk] = {}
        self._flags: OrderedDict[str, bool] = OrderedDict()

    def __call__(self, direct: Completer, api: BatchAPI, settings: BatchSettings,
                 price: Callable[[Message], Message], *, enabled: bool = True, base_url: str = "",
                 model: str = "", key: str = "") -> Completer:
        found = ProviderDesk(desk_id(api, base_url, model, key), api, settings, direct, price, model)
        self.desks.setdefault(found.id, found)
        return PoolBatchLayer(self, self.desks[found.id], enabled=enabled)

    def desk(self, desk: str) -> RedisDesk:
        return RedisDesk(self.client, self.keys, desk, self.retention)

    async def session_batches(self, session: str) -> bool:
        """Whether ``session`` asked for provider batches (``shelly batch --provider-batch``)."""
        if not session:
            return False
        if session in self._flags:
            self._flags.move_to_end(session)
            return self._flags[session]
        with redis_errors("provider batches"):
            flag = await self.client.hget(self.keys.session_meta(session), "provider_batch") == "1"
        self._flags[session] = flag
        while len(self._flags) > SESSIONS_KEPT:
            self._flags.popitem(last=False)
        return flag


class PoolBatchLayer:
    """A provider's completer on a worker when its calls may go through vendor batches."""

    def __init__(self, pool: PoolBatching, desk: ProviderDesk, *, enabled: bool) -> None:
        self.pool = pool
        self.desk = desk
        self.enabled = enabled
        """``batch.enabled`` in the config; else only the runs of ``--provider-batch`` sessions batch."""

    @property
    def usage(self) -> Any:
        """The provider's usage total (fallback chains compare it by identity)."""
        return getattr(self.desk.direct, "usage", None)

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        call = model_call()
        if not call.can_suspend or not (self.enabled or await self.pool.session_batches(session_id())):
            return await self.desk.direct.complete(chat, tools)
        api, settings = self.desk.api, self.desk.settings
        messages = list(chat.view())
        run = run_id()
        cid = custom_id(run, api.encode("", messages, tools))
        desk = self.pool.desk(self.desk.id)
        now = time.time()
        _, reply, waiting = await desk.join(cid, Request(run=run, session=session_id(), agent=agent_name()),
                                                asked_json(messages, tools), due=now + settings.collect_window)
        if waiting >= settings.max_batch_size:
            await desk.mark_due(now)
        if reply:  # it came while this step was being run again: take it
            return Message.model_validate_json(reply)
        raise SuspendModel(PROVIDER_BATCH, {"desk": self.desk.id, "custom_id": cid, "vendor": api.vendor}, None,
                           reason=f"{api.vendor} batch")
