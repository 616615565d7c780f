"""Key hygiene checks shared by the integration and chaos suites."""

from __future__ import annotations

import redis


def keys_without_ttl(client: redis.Redis, prefix: str) -> list[str]:
    """Every key under ``prefix`` that has no expiry (``TTL`` of -1), sorted."""
    found = []
    for key in client.scan_iter(match=prefix + "*", count=1000):
        if client.ttl(key) == -1:
            found.append(key.decode() if isinstance(key, bytes) else key)
    return sorted(found)


def assert_all_keys_have_ttl(client: redis.Redis, prefix: str) -> None:
    """Fail naming every key under ``prefix`` that would live forever (DESIGN §3 rule 10: every
    key carries a retention TTL set by its writer)."""
    missing = keys_without_ttl(client, prefix)
    assert not missing, f"{len(missing)} keys without a TTL under {prefix!r}: {missing[:20]}"
