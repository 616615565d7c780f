"""The price table: Go's defaults, longest-prefix match, overrides, and the cost of a call."""

from __future__ import annotations

import pytest

from shelly_dist.chats import Chat, Message, Role
from shelly_dist.errors import ConfigError
from shelly_dist.models import Usage
from shelly_dist.models.pricing import PricedCompleter, PriceEntry, PriceTable, parse_entries


@pytest.mark.parametrize(("kind", "model", "price"), [
    ("anthropic", "claude-opus-4-5-20251101", 5.0),
    ("anthropic", "claude-opus-4-20250514", 15.0),
    ("anthropic", "claude-sonnet-4-5-20250929", 3.0),
    ("anthropic", "claude-3-haiku-20240307", 0.25),
    ("openai", "gpt-5-mini", 0.25),
    ("openai", "gpt-4.1-mini-2025-04-14", 0.40),
    ("openai", "gpt-4.1", 2.0),
    ("openai", "o3", 2.0),
    ("gemini", "gemini-2.5-flash-lite", 0.10),
    ("gemini", "gemini-2.5-flash", 0.30),
    ("grok", "grok-4-1-fast-reasoning", 0.20),
    ("grok", "grok-4-0709", 3.0),
])
def test_default_table_matches_the_longest_prefix_of_the_providers_kind(kind: str, model: str, price: float) -> None:
    entry = PriceTable.default().lookup(kind, model)
    assert entry is not None and entry.input == pytest.approx(price)


@pytest.mark.parametrize(("kind", "model"), [("anthropic", "unknown-model"), ("unknown", "claude-sonnet-4"), ("", "")])
def test_unknown_models_have_no_price(kind: str, model: str) -> None:
    assert PriceTable.default().lookup(kind, model) is None


def test_lookup_ignores_case() -> None:
    entry = PriceTable.default().lookup("Anthropic", "Claude-Opus-4-6")
    assert entry is not None and entry.input == 5.0


def test_cost_adds_each_kind_of_token_at_its_price_per_million() -> None:
    price = PriceEntry(provider="anthropic", input=3.0, output=15.0, cache_read=0.30, cache_creation=3.75)
    usage = Usage(input_tokens=1_000_000, output_tokens=500_000, cache_read_tokens=200_000,
                  cache_creation_tokens=100_000)
    assert price.cost(usage) == pytest.approx(3.0 + 7.5 + 0.06 + 0.375)


def test_override_replaces_the_default_with_the_same_provider_and_prefix_and_adds_new_ones() -> None:
    table = PriceTable.default([
        PriceEntry(provider="anthropic", prefix="claude-opus-4-6", input=1.0, output=2.0),
        PriceEntry(provider="scripted", prefix="", input=10.0, output=20.0),
    ])
    opus = table.lookup("anthropic", "claude-opus-4-6")
    assert opus is not None and (opus.input, opus.output) == (1.0, 2.0)
    assert sum(1 for e in table.entries if e.key() == ("anthropic", "claude-opus-4-6")) == 1
    assert table.lookup("scripted", "anything") is not None
    sonnet = table.lookup("anthropic", "claude-sonnet-4-6")
    assert sonnet is not None and sonnet.input == 3.0


def test_later_overrides_win_over_earlier_ones() -> None:
    table = PriceTable.default([PriceEntry(provider="openai", prefix="gpt-4o", input=1.0)],
                               [PriceEntry(provider="openai", prefix="gpt-4o", input=9.0)])
    entry = table.lookup("openai", "gpt-4o-2024")
    assert entry is not None and entry.input == 9.0


def test_a_bad_entry_is_a_config_error_naming_where() -> None:
    with pytest.raises(ConfigError, match=r"pricing\[1\]\.input"):
        parse_entries([{"provider": "openai", "input": 1}, {"provider": "openai", "input": "lots"}], "pricing")


def test_upper_bound_prices_input_at_the_dearer_of_input_and_cache_write() -> None:
    price = PriceEntry(provider="anthropic", input=3.0, output=15.0, cache_creation=3.75)
    assert price.upper_bound(1_000_000, 1_000_000) == pytest.approx(3.75 + 15.0)


async def test_priced_completer_writes_the_calls_cost_into_its_usage() -> None:
    class Fixed:
        async def complete(self, chat: Chat, tools: list[object]) -> Message:
            return Usage(input_tokens=2_000_000, output_tokens=1_000_000).attach(
                Message.text("m", Role.ASSISTANT, "hi"))

    priced = PricedCompleter(Fixed(), PriceEntry(provider="openai", input=1.0, output=4.0))
    reply = await priced.complete(Chat(), [])  # type: ignore[list-item]
    assert Usage.of(reply).cost_usd == pytest.approx(6.0)


def test_usage_sums_cost_like_tokens() -> None:
    total = Usage(input_tokens=1, cost_usd=0.25) + Usage(output_tokens=2, cost_usd=0.5)
    assert (total.input_tokens, total.output_tokens, total.cost_usd) == (1, 2, 0.75)


@pytest.mark.parametrize(("kind", "model", "share"), [
    ("openai", "gpt-4o", 0.5), ("anthropic", "claude-sonnet-4-5", 0.5), ("grok", "grok-4", 0.5),
    ("gemini", "gemini-2.5-flash", 1.0), ("openai", "a-model-nobody-prices", 0.5),
])
def test_the_default_table_prices_a_batch_request_at_half_for_the_vendors_with_a_batch_api(
        kind: str, model: str, share: float) -> None:
    assert PriceTable.default().batch_multiplier(kind, model) == share


def test_a_batch_only_row_gives_no_prices() -> None:
    table = PriceTable.default()
    assert table.lookup("openai", "a-model-nobody-prices") is None
    assert table.lookup("openai", "gpt-4o") is not None


def test_a_batch_multiplier_is_overridden_per_provider_or_per_prefix_with_its_prices() -> None:
    table = PriceTable.default(parse_entries(yaml_rows(
        "- {provider: openai, batch: 0.4}\n"
        "- {provider: anthropic, prefix: claude-opus-4-6, input: 5, output: 25, batch: 0.25}\n"), "local"))
    assert table.batch_multiplier("openai", "gpt-4o") == 0.4
    assert table.batch_multiplier("anthropic", "claude-opus-4-6") == 0.25
    assert table.batch_multiplier("anthropic", "claude-sonnet-4-5") == 0.5
    opus = table.lookup("anthropic", "claude-opus-4-6")
    assert opus is not None and opus.output == 25


async def test_a_reply_from_a_provider_batch_costs_the_batch_share_of_the_price() -> None:
    from shelly_dist.models.batching import BATCH_KEY

    class Fixed:
        def __init__(self, batch: bool) -> None:
            self.batch = batch

        async def complete(self, chat: Chat, tools: list[object]) -> Message:
            reply = Usage(input_tokens=2_000_000, output_tokens=1_000_000, cache_read_tokens=1_000_000).attach(
                Message.text("m", Role.ASSISTANT, "hi"))
            if self.batch:
                reply.metadata[BATCH_KEY] = {"vendor": "openai", "batch_id": "b", "custom_id": "c"}
            return reply

    price = PriceEntry(provider="openai", input=1.0, output=4.0, cache_read=0.5)
    direct = await PricedCompleter(Fixed(False), price, batch=0.5).complete(Chat(), [])  # type: ignore[list-item]
    batched = await PricedCompleter(Fixed(True), price, batch=0.5).complete(Chat(), [])  # type: ignore[list-item]
    assert Usage.of(direct).cost_usd == pytest.approx(6.5)
    assert Usage.of(batched).cost_usd == pytest.approx(3.25)


def yaml_rows(text: str) -> object:
    import yaml

    return yaml.safe_load(text)
