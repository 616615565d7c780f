"""Building a provider's completer from its config: the one entry point the engine calls.

``create_completer`` stacks the layers in a fixed order, innermost first::

    vendor completer (one per API key)
    → governor              one per API key and model: ``rate_limit`` (rpm, input_tpm, output_tpm,
                            max_concurrent) reserved before each call and settled after it, a 429
                            pausing the key, limits learned from the vendor's headers; the account
                            is the deployment's (``governor``: in memory, or Redis on a pool)
    → key rotation          only with several ``api_keys``: round-robin, per-key cooldown; a key
                            whose governor would make the call wait long is passed over
    → retry                 always: transient errors, ``rate_limit.max_retries`` (default 3)
    → batch                 only with ``batch: {enabled: true}`` and a known batch API

Retry is outermost of the direct path so that every attempt is reserved again and may land on
another key. The batch layer (Shelly's ``batch.Collector``) sits above it all: its submissions
bypass the governor (a vendor's batch queue has limits of its own), while the calls it falls back
to go through the whole direct stack. Batches go with the first key of ``api_keys`` (a batch can
only be read back with the key that created it). Retry is
on for every provider, not only when ``rate_limit`` is set as in Shelly: a 529 from a healthy
provider is routine and should not fail a whole delegation tree. Fallback between providers is
built separately with :func:`~shelly_dist.models.fallback.with_fallback`, because it needs the
other providers by name, which only the engine knows.

Custom kinds plug in with :func:`register_provider` (Shelly's ``engine.RegisterProvider``); a kind
registered with ``options=True`` (``@shelly_dist.provider``) also gets the provider's ``options:``.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from shelly_dist.errors import ConfigError
from shelly_dist.events import EventSink, discard
from shelly_dist.models.backoff import Backoff
from shelly_dist.models.batching import BatchAPI, BatchCollector, BatchSettings
from shelly_dist.models.completer import Completer
from shelly_dist.models.context import ContextWindow
from shelly_dist.models.cooldown import CooldownStore, MemoryCooldownStore, key_id
from shelly_dist.models.fallback import Candidate, FallbackCompleter, with_fallback
from shelly_dist.models.governor import GovernedCompleter, GovernorStore, KeyLimits, MemoryGovernorStore
from shelly_dist.models.governor.spend import MemorySpendLedger, Spending, SpendLedger, SpendLimit, SpendScope
from shelly_dist.models.pricing import PriceEntry
from shelly_dist.models.ratelimit import RateLimitSettings
from shelly_dist.models.retry import RetryingCompleter
from shelly_dist.models.usage import UsageTracker
from shelly_dist.providers.anthropic import AnthropicCompleter
from shelly_dist.providers.batches import batch_api
from shelly_dist.providers.gemini import GeminiCompleter
from shelly_dist.providers.grok import GrokCompleter
from shelly_dist.providers.openai import OpenAICompleter

__all__ = [
    "ProviderFactory",
    "create_completer",
    "default_max_tokens",
    "provider_kinds",
    "register_provider",
    "with_fallback",
]


class ProviderFactory(Protocol):
    """Builds the bare completer of one API key; keyword arguments as :class:`HTTPCompleter`'s."""

    def __call__(
        self,
        *,
        name: str,
        model: str,
        base_url: str | None,
        api_key: str,
        max_tokens: int | None,
        timeout: float | None,
        headers: dict[str, str] | None,
        temperature: float | None,
        usage: UsageTracker,
    ) -> Completer: ...


_FACTORIES: dict[str, ProviderFactory] = {
    "anthropic": AnthropicCompleter,
    "openai": OpenAICompleter,
    "grok": GrokCompleter,
    "gemini": GeminiCompleter,
}

_TAKE_OPTIONS: set[str] = set()
"""Kinds whose factory is also called with ``options=`` (the provider's ``options:`` mapping)."""

_shared_cooldowns = MemoryCooldownStore()
_shared_governor = MemoryGovernorStore()
_shared_spend = MemorySpendLedger()


def governed_unit(kind: str, base_url: str | None, api_key: str, model: str) -> str:
    """The governor's unit of one API key and model: what a vendor counts against one limit. The
    key itself is never stored, only a hash (with the server, so one key string on two servers is
    two units); providers of two names sharing a key and model share the unit."""
    digest = hashlib.sha256(f"{kind}\0{base_url or ''}\0{api_key}".encode()).hexdigest()[:12]
    return f"{kind}-{digest}:{model}"

Batching = Callable[[Completer, BatchAPI, BatchSettings], Completer]
"""Builds a provider's batch layer over its direct stack: :class:`BatchCollector` in one process;
on a worker pool, the layer that suspends the run instead (the engine passes it)."""


def collect_in_process(on_event: EventSink) -> Batching:
    """The embedded batch layer: Shelly's collector, waiting in this process."""
    return lambda direct, api, settings: BatchCollector(direct, api, settings, on_event=on_event)


def register_provider(kind: str, factory: ProviderFactory, *, options: bool = False) -> None:
    """Make ``kind`` usable in config; registering an existing kind replaces it. ``options``: the
    factory also takes ``options=`` (the config's ``options:`` mapping of that provider)."""
    _FACTORIES[kind] = factory
    if options:
        _TAKE_OPTIONS.add(kind)
    else:
        _TAKE_OPTIONS.discard(kind)


def default_max_tokens(kind: str) -> int:
    """The max output tokens a provider of ``kind`` asks for when its config sets none (0 when
    the kind is unknown or sets no default)."""
    return int(getattr(_FACTORIES.get(kind), "default_max_tokens", 0) or 0)


def provider_kinds() -> list[str]:
    """The kinds ``create_completer`` accepts, sorted."""
    return sorted(_FACTORIES)


def create_completer(
    kind: str,
    *,
    name: str,
    model: str,
    base_url: str | None = None,
    api_key: str = "",
    api_keys: list[str] | None = None,
    max_tokens: int | None = None,
    timeout: float | None = None,
    headers: dict[str, str] | None = None,
    rate_limit: RateLimitSettings | None = None,
    temperature: float | None = None,
    options: dict[str, Any] | None = None,
    prompt_cache: bool = True,
    stream: bool = True,
    cooldowns: CooldownStore | None = None,
    governor: GovernorStore | None = None,
    spend: SpendLimit | None = None,
    spend_labels: dict[str, SpendLimit] | None = None,
    spend_ledger: SpendLedger | None = None,
    price: PriceEntry | None = None,
    window: ContextWindow | None = None,
    on_event: EventSink = discard,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.time,
    batch: BatchSettings | None = None,
    batch_vendor: str | None = None,
    batching: Batching | None = None,
) -> Completer:
    """The completer for one configured provider, with its governor, retry and key rotation, and
    its batch layer when ``batch`` is given with the ``batch_vendor`` API (``openai``/``anthropic``;
    ``batching`` builds the layer, Shelly's in-process collector by default).

    ``cooldowns`` holds per-key cooldowns and ``governor`` the keys' accounts (default: one
    in-process store each); pass the runtime's Redis stores when distributed.
    ``spend`` limits each key's USD per day and month and ``spend_labels`` each label's (the
    tree's share, ``shelly batch --label``), reserved in ``spend_ledger`` (default: in-process) at
    ``price``, without which they cannot hold (a ``ConfigError``). ``window``: the provider's
    context window, which its completers learn into (:mod:`shelly_dist.models.context`).
    ``prompt_cache=False`` (Anthropic: no ``cache_control`` breakpoints) and ``stream=False``
    (never stream, even when a person watches) reach the factory only when set, so a custom
    kind's factory need not accept them. ``sleep`` and ``clock`` are for tests. The result's
    ``usage`` is the provider's running total. An unknown kind raises ``ConfigError``.
    """
    factory = _FACTORIES.get(kind)
    if factory is None:
        raise ConfigError(
            f'provider "{name}": unknown kind {kind!r} (known: {", ".join(provider_kinds())})',
            field=f"providers.{name}.kind",
        )
    settings = rate_limit or RateLimitSettings()
    usage = UsageTracker()
    keys = [k for k in (api_keys or []) if k] or [api_key]
    common: dict[str, Any] = {
        "name": name,
        "model": model,
        "base_url": base_url,
        "max_tokens": max_tokens,
        "timeout": timeout,
        "headers": headers,
        "temperature": temperature,
        "usage": usage,
    }
    if kind in _TAKE_OPTIONS:
        common["options"] = dict(options or {})
    if not prompt_cache:
        common["prompt_cache"] = False
    if not stream:
        common["stream"] = False
    limits = KeyLimits(rpm=settings.rpm, input_tpm=settings.input_tpm, output_tpm=settings.output_tpm,
                       max_concurrent=settings.max_concurrent)
    labels = {k: v for k, v in (spend_labels or {}).items() if v.any()}
    if ((spend is not None and spend.any()) or labels) and price is None:
        raise ConfigError(f'provider "{name}": spend limits need the price of model {model!r} (add it to pricing:)',
                          field=f"providers.{name}.spend")
    members: list[Completer] = []
    vendors: list[Completer] = []
    for i, k in enumerate(keys):
        vendor = factory(api_key=k, **common)
        vendors.append(vendor)
        attach = getattr(vendor, "attach_window", None)
        if window is not None and attach is not None:
            attach(window)
        unit = governed_unit(kind, base_url, k, model)
        key = SpendScope(f"key:{unit.split(':', 1)[0]}", f'provider "{name}" key {i + 1}', spend) \
            if spend is not None and spend.any() else None
        spending = Spending(spend_ledger or _shared_spend, key, labels, price, max_tokens or default_max_tokens(kind)) \
            if price is not None and (key is not None or labels) else None
        members.append(GovernedCompleter(vendor, store=governor or _shared_governor, unit=unit,
                                         provider=name, model=model, limits=limits, timeout=timeout, spend=spending,
                                         clock=clock, sleep=sleep))
    core: Completer = members[0]
    if len(members) > 1:
        core = FallbackCompleter(
            [
                Candidate(f"{name}[key {i + 1}]", m, key_id(name, k))
                for i, (m, k) in enumerate(zip(members, keys, strict=True))
            ],
            cooldowns=cooldowns or _shared_cooldowns,
            on_event=on_event,
            clock=clock,
            rotate=True,
            provider=name,
            usage=usage,
        )
    direct = RetryingCompleter(
        core,
        provider=name,
        max_retries=settings.max_retries,
        backoff=Backoff(base=settings.base_delay),
        sleep=sleep,
        on_event=on_event,
    )
    if batch is None or batch_vendor is None:
        return direct
    api = batch_api(batch_vendor, vendors[0])
    if api is None:  # the config rules name it; a custom kind's completer is not a vendor's
        raise ConfigError(f'provider "{name}": batch: the {batch_vendor} batch API needs a provider of that kind',
                          field=f"providers.{name}.batch")
    return (batching or collect_in_process(on_event))(direct, api, batch)
