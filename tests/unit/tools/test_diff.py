"""Bounded diffs: large ones off the event loop and killed at a deadline, huge ones summarised."""

from __future__ import annotations

import random
from pathlib import Path

from shelly_dist.tools.builtin import filesystem_toolbox
from shelly_dist.tools.builtin._diff import MAX_INPUT, bounded_diff
from shelly_dist.tools.builtin._unified import unified_diff
from shelly_dist.tools.permissions import Permissions
from tests.unit.tools.conftest import call, longest_loop_stall


def slow_pair(lines: int) -> tuple[str, str]:
    """Two texts of short lines from ~lines/120 values, each too rare to be junked: difflib's
    quadratic case (16,000 lines: ~1 s; 32,000: ~2.5 s)."""
    rng = random.Random(1)
    values = lines // 120

    def text() -> str:
        return "".join(f"{rng.randint(0, values)}\n" for _ in range(lines))

    return text(), text()


async def test_a_large_diff_leaves_the_event_loop_running(perms: Permissions, project: Path) -> None:
    old, new = slow_pair(16_000)
    (project / "a").write_text(old)
    (project / "b").write_text(new)
    outcome, stall = await longest_loop_stall(call(filesystem_toolbox(perms), "fs_diff", file_a="a", file_b="b"))
    assert isinstance(outcome, str) and outcome.startswith("--- a\n+++ b\n@@")
    assert stall < 0.3


async def test_a_diff_past_its_deadline_is_summarised() -> None:
    old, new = slow_pair(32_000)
    out = await bounded_diff("fs_diff", old, new, a="a/x", b="b/x", time_limit=0.2)
    assert out == "--- a/x\n+++ b/x\n[diff not shown: not computed within 0.2s; " \
                  f"32000 lines, {len(old):,} characters -> 32000 lines, {len(new):,} characters]\n"


async def test_texts_over_the_input_limit_are_summarised(perms: Permissions, project: Path) -> None:
    (project / "a").write_text("a\n" * (MAX_INPUT // 4 + 1))
    (project / "b").write_text("b\n" * (MAX_INPUT // 4 + 1))
    out = await call(filesystem_toolbox(perms), "fs_diff", file_a="a", file_b="b")
    assert out.startswith("--- a\n+++ b\n[diff not shown: over 8 MB; ")


async def test_a_diff_computed_by_the_program_is_the_same_diff() -> None:
    old = "".join(f"line {i}\n" for i in range(5_000))
    new = old.replace("line 2500\n", "changed\n")
    out = await bounded_diff("fs_diff", old, new, a="a/x", b="b/x")
    assert out == unified_diff(old, new, "a/x", "b/x") and "+changed\n" in out
