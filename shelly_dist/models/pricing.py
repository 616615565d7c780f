"""Model prices: USD per million tokens, looked up by provider kind and model-name prefix.

Go Shelly's table (``pricing.yaml``, shipped as package data) is the default. Entries are matched
by provider kind and the **longest** model prefix, case-insensitively, so ``gpt-4.1-mini-…`` gets
the mini price and not ``gpt-4.1``'s. Overrides replace the default entry with the same provider
and prefix and add the others (Go's ``mergeEntries``). A model no entry matches costs 0.

A row may also set ``batch``, the share of its prices a request made through the vendor's batch
API costs (ours; OpenAI's Batch API and Anthropic's Message Batches bill 0.5, cache tokens
included). A row that sets ``batch`` and no price (``{provider: openai, batch: 0.5}``) is a
batch-only row: it gives no prices, and its multiplier holds for every model of its prefix unless
a longer prefix sets one. The default table has one per provider kind with a batch API.

:class:`PricedCompleter` is the thin wrapper that writes the cost of each call into the reply's
usage. The engine puts one around each provider's completer *inside* the fallback chain, so a call
answered by a fallback provider is priced at the model that answered.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from shelly_dist.errors import ConfigError
from shelly_dist.models.batching.api import BATCH_KEY
from shelly_dist.models.usage import Usage

if TYPE_CHECKING:  # annotations only: the config schema imports prices without the chat types
    from shelly_dist.chats import Chat, Message
    from shelly_dist.models.completer import Completer, ToolSpec

PER = 1_000_000


class PriceEntry(BaseModel):
    """One row of the table, in Go's ``pricing.yaml`` keys: prices in USD per million tokens."""

    model_config = ConfigDict(extra="forbid")

    provider: str = Field(min_length=1)
    """Provider kind (``anthropic``, ``openai``, ``grok``, ``gemini``, …), not the provider's name."""
    prefix: str = ""
    """Model-name prefix; "" matches every model of the kind."""
    input: float = Field(0.0, ge=0)
    output: float = Field(0.0, ge=0)
    cache_read: float = Field(0.0, ge=0)
    cache_creation: float = Field(0.0, ge=0)
    batch: float | None = Field(None, gt=0, le=1)
    """The share of these prices a batch-API request costs (ours; see the module docstring)."""

    def key(self) -> tuple[str, str]:
        return self.provider.lower(), self.prefix.lower()

    def cost(self, usage: Usage) -> float:
        """USD for ``usage`` at this price (Go's ``CalculateCost``)."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_creation_tokens * self.cache_creation
        ) / PER

    def gives_prices(self) -> bool:
        """Whether this row prices tokens (a row that sets only ``batch`` does not)."""
        return bool(self.model_fields_set & {"input", "output", "cache_read", "cache_creation"}) or self.batch is None

    def upper_bound(self, input_tokens: int, output_tokens: int) -> float:
        """The most a call of ``input_tokens`` in and ``output_tokens`` out can cost: the input at
        the dearer of the input and cache-write prices (a cache write costs more than plain input)."""
        return (input_tokens * max(self.input, self.cache_creation) + output_tokens * self.output) / PER


def parse_entries(data: Any, where: str) -> list[PriceEntry]:
    """Entries from a parsed YAML list; a bad entry is a ``ConfigError`` naming ``where[i].field``."""
    if data is None:
        return []
    if not isinstance(data, list):
        raise ConfigError(f"{where}: must be a list of price entries", field=where)
    out = []
    for i, raw in enumerate(data):
        try:
            out.append(PriceEntry.model_validate(raw))
        except ValueError as exc:
            errors = getattr(exc, "errors", lambda: [])()
            loc = ".".join(str(p) for p in errors[0]["loc"]) if errors else ""
            msg = errors[0]["msg"] if errors else str(exc)
            at = f"{where}[{i}]" + (f".{loc}" if loc else "")
            raise ConfigError(f"{at}: {msg}", field=at) from None
    return out


@functools.cache
def _defaults() -> tuple[PriceEntry, ...]:
    text = resources.files("shelly_dist.models").joinpath("pricing.yaml").read_text(encoding="utf-8")
    return tuple(parse_entries(yaml.safe_load(text), "pricing.yaml"))


def default_entries() -> list[PriceEntry]:
    """Go Shelly's embedded table (``shelly_dist/models/pricing.yaml``), read once per process."""
    return list(_defaults())


def merge(defaults: Iterable[PriceEntry], overrides: Iterable[PriceEntry]) -> list[PriceEntry]:
    """``defaults`` with each entry of the same provider and prefix replaced by its override, then
    the overrides that replaced nothing (Go's ``mergeEntries``)."""
    by_key = {o.key(): o for o in overrides}
    out = []
    seen = set()
    for d in defaults:
        out.append(by_key.get(d.key(), d))
        seen.add(d.key())
    out.extend(o for k, o in by_key.items() if k not in seen)
    return out


@dataclass
class PriceTable:
    """Prices by provider kind and longest model prefix. Immutable once built; safe to share."""

    entries: list[PriceEntry] = field(default_factory=list)

    @classmethod
    def default(cls, *overrides: Iterable[PriceEntry]) -> PriceTable:
        """The default table with each list of ``overrides`` merged on top, in order."""
        entries = default_entries()
        for more in overrides:
            entries = merge(entries, more)
        return cls(entries)

    def lookup(self, kind: str, model: str) -> PriceEntry | None:
        """The priced entry of ``kind`` with the longest prefix of ``model`` (case-insensitive), or None."""
        return self._longest(kind, model, PriceEntry.gives_prices)

    def batch_multiplier(self, kind: str, model: str) -> float:
        """The share of the price a batch-API request of ``kind``/``model`` costs: the ``batch`` of
        the longest prefix that sets one, else 1."""
        found = self._longest(kind, model, lambda e: e.batch is not None)
        return found.batch if found is not None and found.batch is not None else 1.0

    def _longest(self, kind: str, model: str, wanted: Callable[[PriceEntry], bool]) -> PriceEntry | None:
        kind, model = kind.lower(), model.lower()
        best: PriceEntry | None = None
        for e in self.entries:
            provider, prefix = e.key()
            if (provider == kind and model.startswith(prefix) and wanted(e)
                    and (best is None or len(prefix) > len(best.prefix))):
                best = e
        return best


def price_reply(reply: Message, price: PriceEntry, batch: float = 1.0) -> Message:
    """``reply`` with the cost of its usage written in (``usage.cost_usd``): at ``price``, times
    ``batch`` when the reply came from a provider batch (its metadata holds :data:`BATCH_KEY`)."""
    usage = Usage.of(reply)
    usage.cost_usd = price.cost(usage) * (batch if reply.metadata.get(BATCH_KEY) else 1.0)
    return usage.attach(reply)


class PricedCompleter:
    """Writes the cost of each reply into its usage (``usage.cost_usd``), at one model's price
    (times ``batch`` for a reply from a provider batch)."""

    def __init__(self, inner: Completer, price: PriceEntry, *, batch: float = 1.0) -> None:
        self.inner = inner
        self.price = price
        self.batch = batch

    @property
    def usage(self) -> Any:
        """The wrapped completer's usage total (fallback chains compare it by identity)."""
        return getattr(self.inner, "usage", None)

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        return price_reply(await self.inner.complete(chat, tools), self.price, self.batch)

