"""Instance names of spawned agents: ``<config>-<slug>-<n>``, with Shelly's slug rules."""

from __future__ import annotations

import pytest

from shelly_dist.agent import instance_name, task_slug

STOP_WORDS = "the and for with from that this into onto over some then than also just".split()


def test_slug_is_the_first_word_lowercased() -> None:
    assert task_slug("Refactor the parser") == "refactor"


@pytest.mark.parametrize("stop", STOP_WORDS)
def test_slug_skips_every_stop_word(stop: str) -> None:
    assert task_slug(f"{stop.capitalize()} parser") == "parser"


def test_slug_skips_several_stop_words_in_a_row() -> None:
    assert task_slug("and then also just the tests") == "tests"


def test_slug_skips_words_shorter_than_three_characters() -> None:
    assert task_slug("go do it now") == "now"


def test_slug_accepts_a_word_of_exactly_three_characters() -> None:
    assert task_slug("a fix") == "fix"


def test_slug_trims_non_alphanumeric_edges() -> None:
    assert task_slug("**Deploy**: now") == "deploy"


def test_slug_treats_non_ascii_letters_as_alphanumeric() -> None:
    assert task_slug("Überprüfe den Code") == "überprüfe"
    assert task_slug("«café»") == "café"


def test_slug_trims_underscores_at_the_edges() -> None:
    assert task_slug("__init__ cleanup") == "init"


def test_slug_keeps_inner_punctuation() -> None:
    assert task_slug("re-run tests") == "re-run"


def test_slug_drops_inner_characters_a_name_cannot_hold() -> None:
    assert task_slug("Summarise the team's notes") == "summarise"
    assert task_slug("team's notes") == "teams"
    assert task_slug("path/to:file") == "pathtofile"


def test_slug_measures_length_after_trimming_edges() -> None:
    assert task_slug("(a) ...ok... review") == "review"


def test_slug_is_cut_to_twelve_characters() -> None:
    assert task_slug("Internationalization everywhere") == "internationa"


def test_slug_of_digits_counts_as_a_word() -> None:
    assert task_slug("issue 1234") == "issue"
    assert task_slug("#1234 fix") == "1234"


@pytest.mark.parametrize("task", ["", "   ", "a to be", "the and for", "!!! ?? --"])
def test_slug_falls_back_to_task(task: str) -> None:
    assert task_slug(task) == "task"


def test_instance_name_is_config_slug_and_number() -> None:
    assert instance_name("coder", "Refactor the parser", 1) == "coder-refactor-1"


def test_instance_name_uses_the_fallback_slug() -> None:
    assert instance_name("worker", "", 7) == "worker-task-7"
