"""What must hold after any fault: every root ended, no journaled reply requested twice, no
finished tool executed twice, no key without a TTL."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import redis

from tests.chaos.workload import Workload
from tests.integration.keys import assert_all_keys_have_ttl

__all__ = ["assert_all_keys_have_ttl", "assert_no_journaled_reply_requested_again", "assert_no_tool_ran_twice",
           "journal_text"]


def journal_text(client: redis.Redis, prefix: str) -> str:
    """Every journaled message under ``prefix``, as raw JSON text."""
    parts = []
    for key in client.scan_iter(match=prefix + "*", count=1000):
        if client.type(key) == "list":
            parts.extend(client.lrange(key, 0, -1))
    return "\n".join(parts)


def assert_no_journaled_reply_requested_again(workload: Workload, journal: str) -> None:
    """For each request identity, only the reply to its last request may be in a journal: an
    earlier reply in a journal means the model was asked again for a step already journaled."""
    by_identity: dict[str, list[str]] = defaultdict(list)
    for served in workload.served:
        by_identity[served.identity].append(served.nonce)
    repeated = []
    for identity, nonces in by_identity.items():
        for nonce in nonces[:-1]:
            if nonce in journal:
                repeated.append((identity[:10], nonces))
    assert not repeated, f"journaled replies requested again (seed {workload.seed}): {repeated}"


def assert_no_tool_ran_twice(marker: Path) -> None:
    lines = marker.read_text().split() if marker.exists() else []
    twice = {n: c for n, c in Counter(lines).items() if c > 1}
    assert not twice, f"tool calls executed more than once: {twice}"
