"""Usage: sums, the round trip through a message's metadata, and a thread-safe tracker."""

from __future__ import annotations

import threading

from shelly_dist.chats import Message, Role
from shelly_dist.models import Usage, UsageTracker


def test_usages_add_field_by_field() -> None:
    a = Usage(input_tokens=1, output_tokens=2, cache_creation_tokens=3, cache_read_tokens=4)
    b = Usage(input_tokens=10, output_tokens=20, cache_creation_tokens=30, cache_read_tokens=40)
    assert a + b == Usage(input_tokens=11, output_tokens=22, cache_creation_tokens=33, cache_read_tokens=44)


def test_total_tokens_counts_all_four_kinds() -> None:
    assert Usage(input_tokens=1, output_tokens=2, cache_creation_tokens=3, cache_read_tokens=4).total_tokens == 10


def test_attach_then_of_round_trips_through_a_message() -> None:
    usage = Usage(input_tokens=5, output_tokens=7, cache_read_tokens=2)
    msg = usage.attach(Message.text("a", Role.ASSISTANT, "hi"))
    assert Usage.of(msg) == usage


def test_attached_usage_survives_message_json() -> None:
    usage = Usage(input_tokens=5, output_tokens=7)
    msg = usage.attach(Message.text("a", Role.ASSISTANT, "hi"))
    assert Usage.of(Message.model_validate_json(msg.model_dump_json())) == usage


def test_of_a_message_without_usage_is_zero() -> None:
    assert Usage.of(Message.text("a", Role.ASSISTANT, "hi")) == Usage()


def test_tracker_keeps_total_count_and_last() -> None:
    tracker = UsageTracker()
    tracker.add(Usage(input_tokens=1))
    tracker.add(Usage(output_tokens=2))
    assert tracker.total() == Usage(input_tokens=1, output_tokens=2)
    assert tracker.count() == 2
    assert tracker.last() == Usage(output_tokens=2)


def test_tracker_reset_zeroes_everything() -> None:
    tracker = UsageTracker()
    tracker.add(Usage(input_tokens=1))
    tracker.reset()
    assert (tracker.total(), tracker.count(), tracker.last()) == (Usage(), 0, None)


def test_tracker_total_is_a_copy() -> None:
    tracker = UsageTracker()
    tracker.add(Usage(input_tokens=1))
    tracker.total().input_tokens = 99
    assert tracker.total().input_tokens == 1


def test_tracker_totals_are_exact_under_concurrent_threads() -> None:
    tracker = UsageTracker(keep=5)
    threads, per_thread = 8, 500
    start = threading.Barrier(threads)

    def work() -> None:
        start.wait()
        for _ in range(per_thread):
            tracker.add(Usage(input_tokens=1, output_tokens=2, cache_creation_tokens=3, cache_read_tokens=4))

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    n = threads * per_thread
    assert tracker.count() == n
    assert tracker.total() == Usage(
        input_tokens=n, output_tokens=2 * n, cache_creation_tokens=3 * n, cache_read_tokens=4 * n
    )
