"""Attachments in the journal by content hash: each image's or document's bytes stored once.

A batch of 10,000 items that attach the same 5 MB picture journaled it 10,000 times, inline in
each root's input (6.7 MB of base64 a run, 67 GB in Redis). An image or document part of more
than :data:`INLINE` base64 characters is journaled as a reference instead —
``shelly-blob:sha256:<hex>`` in its ``data`` (no base64 text holds ``:``) — and its bytes under
``Keys.blob(<hex>)``, written once (``SET NX``), their expiry renewed to ``retention`` by each run
that writes them. Reading the journal (a rebuild on any worker) puts the bytes back, so a
provider request is built from them wherever the run continues; the file itself is read only
where the user gave it (``chats/attachments.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from shelly_dist.chats import Message
from shelly_dist.chats.parts import Document, Image
from shelly_dist.errors import StoreError
from shelly_dist.redisio.connection import redis_errors
from shelly_dist.redisio.keys import Keys

INLINE = 4096
"""Base64 characters a part's data may have and still be journaled inline."""

REF = "shelly-blob:sha256:"


def stash(messages: Sequence[Message]) -> tuple[list[Message], dict[str, str]]:
    """``messages`` with each large image's or document's data replaced by its reference, and
    the data by digest (what :func:`put` must write before the messages are journaled)."""
    blobs: dict[str, str] = {}
    out: list[Message] = []
    for m in messages:
        if not any(_large(p) for p in m.parts):
            out.append(m)
            continue
        parts = []
        for p in m.parts:
            if _large(p):
                digest = hashlib.sha256(p.data.encode()).hexdigest()  # type: ignore[union-attr]
                blobs[digest] = p.data  # type: ignore[union-attr]
                p = p.model_copy(update={"data": REF + digest})
            parts.append(p)
        out.append(m.model_copy(update={"parts": parts}))
    return out, blobs


def _large(part: Any) -> bool:
    return isinstance(part, Image | Document) and len(part.data) > INLINE and not part.data.startswith(REF)


async def put(client: Any, keys: Keys, blobs: dict[str, str], retention: int) -> None:
    """Store ``blobs`` (each once) and renew their expiry: one pipeline, before the journal write
    that references them."""
    if not blobs:
        return
    with redis_errors("journal"):
        async with client.pipeline(transaction=False) as pipe:
            for digest, data in blobs.items():
                pipe.set(keys.blob(digest), data, nx=True, ex=retention)
                pipe.expire(keys.blob(digest), retention)
            await pipe.execute()


def _refs(messages: Iterable[Message]) -> set[str]:
    return {p.data.removeprefix(REF) for m in messages for p in m.parts
            if isinstance(p, Image | Document) and p.data.startswith(REF)}


async def fill(client: Any, keys: Keys, messages: list[Message]) -> list[Message]:
    """``messages`` with every reference replaced by its bytes (one round trip when any)."""
    wanted = sorted(_refs(messages))
    if not wanted:
        return messages
    with redis_errors("journal"):
        async with client.pipeline(transaction=False) as pipe:
            for digest in wanted:
                pipe.get(keys.blob(digest))
            found = dict(zip(wanted, await pipe.execute(), strict=True))
    gone = [d for d, data in found.items() if data is None]
    if gone:
        raise StoreError(f"journal: the attachment sha256:{gone[0]} is gone from Redis (kept for "
                         "distributed.retention after its last use)")
    out = []
    for m in messages:
        parts = [p.model_copy(update={"data": found[p.data.removeprefix(REF)]})
                 if isinstance(p, Image | Document) and p.data.startswith(REF) else p for p in m.parts]
        out.append(m.model_copy(update={"parts": parts}) if parts != m.parts else m)
    return out
