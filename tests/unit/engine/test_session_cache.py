"""The per-session cache: least recently used out beyond its size, idle entries out after a TTL."""

from __future__ import annotations

from shelly_dist.engine.session_cache import SessionCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_builds_once_per_session_and_returns_the_same_object() -> None:
    cache: SessionCache[object] = SessionCache()
    first = cache.get("s", object)
    assert cache.get("s", object) is first and len(cache) == 1


def test_beyond_its_size_the_least_recently_used_session_goes() -> None:
    cache: SessionCache[str] = SessionCache(max_size=2)
    cache.get("a", lambda: "A")
    cache.get("b", lambda: "B")
    cache.get("a", lambda: "A")  # a is now the most recent
    cache.get("c", lambda: "C")
    assert "a" in cache and "c" in cache and "b" not in cache


def test_a_session_unused_for_longer_than_the_ttl_goes() -> None:
    clock = Clock()
    cache: SessionCache[str] = SessionCache(ttl=10, clock=clock)
    cache.get("old", lambda: "O")
    clock.now = 5
    cache.get("recent", lambda: "R")
    clock.now = 11
    cache.get("recent", lambda: "R")
    assert "old" not in cache and "recent" in cache


def test_setting_limits_evicts_what_is_over_them_at_once() -> None:
    cache: SessionCache[int] = SessionCache()
    for i in range(5):
        cache.get(str(i), lambda i=i: i)
    cache.set_limits(max_size=2, ttl=None)
    assert len(cache) == 2 and "4" in cache
