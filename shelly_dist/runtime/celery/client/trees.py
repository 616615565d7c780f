"""Reading a session's run trees from the journal, for the processes that show them
(``shelly runs``, the console): every record parsed once, roots first.

A session's roots are its index (``…:s:{S}:runs``); each root's runs are its tree set. An id
whose record is gone (past its retention) is skipped.
"""

from __future__ import annotations

from typing import Any

from shelly_dist.redisio.keys import Keys
from shelly_dist.runtime.celery.journal import RunRecord


async def load_runs(client: Any, keys: Keys, session: str) -> list[RunRecord]:
    """Every run of the session's trees: root by root (oldest first), each tree by depth and
    creation. One round trip per tree."""
    roots = await client.zrange(keys.session_runs(session), 0, -1)
    out: list[RunRecord] = []
    for root in roots:
        ids = sorted(await client.smembers(keys.tree_runs(root)))
        async with client.pipeline(transaction=False) as pipe:
            for rid in ids:
                pipe.hgetall(keys.run(rid))
            raw = await pipe.execute()
        records = [RunRecord.parse({"id": rid, **r}) for rid, r in zip(ids, raw, strict=True) if r]
        out.extend(sorted(records, key=lambda r: (r.depth, r.created)))
    return out
