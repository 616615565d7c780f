"""The engine's completers: one per agent instance, built from the config's providers.

Two rules shape this module. A ``kind: scripted`` provider gets a **fresh**
:class:`~shelly_dist.providers.scripted.ScriptedCompleter` per spawned agent instance, holding that
agent's script (``script_for(agent)``), because a script is per agent and every instance replays
it from the start. Every other provider is built **once** per engine through
:func:`~shelly_dist.providers.factory.create_completer` and shared by the agents using it, so its
rate limiter, key rotation and usage total cover all of them. A provider with ``fallback:`` is
wrapped in a chain with the named providers, sharing one cooldown store.

Each provider's completer is wrapped in a :class:`~shelly_dist.models.pricing.PricedCompleter`
at the price of its kind and model, *inside* the fallback chain, so a call is priced at the model
that answered it.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import TYPE_CHECKING, Any

from shelly_dist.chats import Chat, Message
from shelly_dist.engine.config import NO_KEY
from shelly_dist.engine.config_models import Batch, Config, ProviderConfig
from shelly_dist.errors import ConfigError, ModelError
from shelly_dist.events import EventSink, discard
from shelly_dist.models import Completer, ToolSpec
from shelly_dist.models.batching import BatchSettings
from shelly_dist.models.context import ContextWindow
from shelly_dist.models.cooldown import CooldownStore, MemoryCooldownStore
from shelly_dist.models.governor import GovernorStore, MemoryGovernorStore
from shelly_dist.models.governor.spend import MemorySpendLedger, SpendLedger
from shelly_dist.models.observed import ObservedCompleter
from shelly_dist.models.pricing import PricedCompleter, PriceEntry, PriceTable, price_reply
from shelly_dist.models.ratelimit import RateLimitSettings
from shelly_dist.providers.factory import create_completer, default_max_tokens, with_fallback
from shelly_dist.providers.scripted import ScriptedCompleter

if TYPE_CHECKING:
    from shelly_dist.runtime.celery.children.batch_layer import PoolBatching

SCRIPTED = "scripted"

log = logging.getLogger(__name__)


def batch_settings(provider: ProviderConfig, *, force: bool = False) -> BatchSettings | None:
    """The provider's ``batch:`` block with Shelly's defaults, when its calls go through a batch API
    (``force``: would go, with ``batch.enabled``)."""
    if provider.batch_api(force=force) is None:
        return None
    b = provider.batch
    if b is None:
        return BatchSettings()
    return BatchSettings.of(b.collect_window, b.poll_interval, b.timeout, b.max_batch_size)


def with_provider_batches(config: Config) -> Config:
    """``config`` with ``batch.enabled`` on every provider that has a batch API (``shelly batch
    --provider-batch`` in one process); the others are left as they are (their calls go direct)."""
    providers = []
    for p in config.providers:
        if p.batch_api(force=True) is not None and p.batch_api() is None:
            batch = p.batch.model_copy(update={"enabled": True}) if p.batch is not None else Batch(enabled=True)
            p = p.model_copy(update={"batch": batch})
        providers.append(p)
    return config.model_copy(update={"providers": providers})


def rate_limit_settings(provider: ProviderConfig) -> RateLimitSettings | None:
    """The provider's ``rate_limit`` block for the factory (``None`` when absent)."""
    rl = provider.rate_limit
    if rl is None:
        return None
    data: dict[str, object] = {"input_tpm": rl.input_tpm, "output_tpm": rl.output_tpm, "rpm": rl.rpm,
                               "max_concurrent": rl.max_concurrent}
    if rl.max_retries is not None:
        data["max_retries"] = rl.max_retries
    if rl.base_delay is not None:
        data["base_delay"] = rl.base_delay
    return RateLimitSettings.model_validate(data)


class Providers:
    """Completers by provider name for the agents of one config. Thread-safe."""

    def __init__(
        self,
        config: Config,
        *,
        cooldowns: CooldownStore | None = None,
        governor: GovernorStore | None = None,
        on_event: EventSink = discard,
        prices: PriceTable | None = None,
    ) -> None:
        self.config = config
        self.cooldowns: CooldownStore = cooldowns or MemoryCooldownStore()
        self.governor: GovernorStore = governor or MemoryGovernorStore()
        """The API keys' accounts (the provider governor): this process's, or Redis on a pool."""
        self.spend: SpendLedger = MemorySpendLedger()
        """What keys and labels spent (``spend:`` limits): this process's, or Redis on a pool."""
        self.prices = prices if prices is not None else PriceTable.default(config.pricing)
        self._on_event = on_event
        self.pool_batching: PoolBatching | None = None
        """The pool's batch layer (a worker's): a provider's calls then suspend their run instead of
        waiting in this process (Shelly's collector), and every provider with a batch API gets it,
        for the runs of ``--provider-batch`` sessions. Set before any agent is built."""
        self._shared: dict[str, Completer] = {}
        self._windows: dict[str, ContextWindow] = {}
        self._lock = threading.RLock()  # _build (under it) asks window() for the provider's window
        self._base: Providers | None = None

    def widened(self, config: Config) -> Providers:
        """Providers for ``config``, a widening of this one's (a workflow's inline agents added, and
        a provider per model they override): a provider both configs have, unchanged, is this
        one's completer, so its rate limiter, key rotation and cooldowns still cover every agent
        using it; the added providers are built for the widened set alone (their names, such as
        ``main@helper``, may mean another model in another session)."""
        other = Providers(config, cooldowns=self.cooldowns, governor=self.governor, on_event=self._on_event,
                          prices=self.prices)
        other.spend = self.spend
        other.pool_batching = self.pool_batching
        other._base = self
        return other

    def for_agent(self, agent: str) -> Completer:
        """A completer for an instance of config agent ``agent`` (its provider, then fallbacks).

        Raises ``ConfigError`` for an unknown agent or provider kind.
        """
        spec = self.config.agent(agent)
        if spec is None:
            raise ConfigError(f'engine: unknown agent "{agent}"', field="agent")
        primary = self.config.provider_for(spec)
        completer = self._one(primary, agent)
        if not primary.fallback:
            return completer
        chain = []
        for name in primary.fallback:
            other = self.config.provider(name)
            if other is None:  # config_rules reject this; keep the error precise anyway
                raise ConfigError(f'provider "{primary.name}": unknown fallback "{name}"', field="fallback")
            chain.append((name, self._one(other, agent)))
        return with_fallback((primary.name, completer), chain, cooldowns=self.cooldowns, on_event=self._on_event)

    def for_team(self, team: str, provider: str) -> Completer:
        """The completer of team ``team``'s LLM coordinator: ``provider``'s model (a scripted
        provider answers from the script keyed by the team's name)."""
        config = self.config.provider(provider)
        if config is None:
            raise ConfigError(f'team "{team}": unknown provider "{provider}"', field="provider")
        return self._one(config, team)

    def window_for(self, agent: str) -> ContextWindow:
        """The context window of ``agent``'s provider as this process knows it: configured, or
        learned from the server by the provider's completer (:mod:`shelly_dist.models.context`)."""
        spec = self.config.agent(agent)
        if spec is None:
            raise ConfigError(f'engine: unknown agent "{agent}"', field="agent")
        return self.window(self.config.provider_for(spec))

    def window(self, provider: ProviderConfig) -> ContextWindow:
        """``provider``'s context window, one per provider name (shared as its completer is)."""
        if self._base is not None and self._base.config.provider(provider.name) == provider:
            return self._base.window(provider)
        with self._lock:
            window = self._windows.get(provider.name)
            if window is None:
                learn = self.config.learns_window(provider)
                configured = 0 if learn else self.config.context_window(provider)
                window = self._windows[provider.name] = ContextWindow(
                    configured, source="config" if provider.context_window is not None else "default",
                    learn=learn, fallback=self.config.context_window(provider) if learn else 0)
            return window

    def chain(self, agent: str) -> list[ProviderConfig]:
        """The providers an instance of ``agent`` may call: its own, then its fallbacks."""
        spec = self.config.agent(agent)
        if spec is None:
            raise ConfigError(f'engine: unknown agent "{agent}"', field="agent")
        primary = self.config.provider_for(spec)
        return [primary, *(p for p in map(self.config.provider, primary.fallback) if p is not None)]

    def price_bound(self, agent: str) -> PriceEntry | None:
        """The dearest price of each kind of token over ``agent``'s chain (for reservations that
        must hold whichever provider answers); ``None`` when no provider of the chain is priced."""
        known = [p for p in (self.prices.lookup(c.kind, c.model) for c in self.chain(agent)) if p is not None]
        if not known:
            return None
        return PriceEntry(provider="*", input=max(p.input for p in known), output=max(p.output for p in known),
                          cache_read=max(p.cache_read for p in known),
                          cache_creation=max(p.cache_creation for p in known))

    def max_output_tokens(self, agent: str) -> int:
        """The most output tokens one call of ``agent`` can ask for, over its chain."""
        return max((c.max_tokens or default_max_tokens(c.kind) for c in self.chain(agent)), default=0)

    def _one(self, provider: ProviderConfig, agent: str) -> Completer:
        if provider.kind == SCRIPTED:
            replies = provider.script_for(agent) or []
            return self._priced(provider, ScriptedCompleter(
                [r if isinstance(r, str) else r.model_dump() for r in replies], name=provider.name
            ))
        if self._base is not None and self._base.config.provider(provider.name) == provider:
            return self._base._one(provider, agent)
        with self._lock:
            built = self._shared.get(provider.name)
            if built is None:
                built = self._priced(provider, self._build(provider))
                self._shared[provider.name] = built
            return built

    def _missing_key(self, provider: ProviderConfig) -> str | None:
        """``provider "claude": ANTHROPIC_API_KEY is not set`` when the loader found the provider's
        only key variables unset or empty (its warning), else None."""
        if provider.keys():
            return None
        named = f'provider "{provider.name}": '
        for warning in self.config.warnings:
            if warning.endswith(NO_KEY) and named in warning:
                return warning[warning.index(named):].removesuffix(f" {NO_KEY}")
        return None

    def _priced(self, provider: ProviderConfig, completer: Completer) -> Completer:
        """``completer`` priced at its model, and observed (metrics) outside the pricing; a model the
        table does not know is left unpriced (its calls cost 0), which is said at DEBUG only."""
        price = self.prices.lookup(provider.kind, provider.model)
        if price is None:
            log.debug("pricing: no price for provider %s (%s %r): its calls cost 0",
                      provider.name, provider.kind, provider.model)
        else:
            completer = PricedCompleter(completer, price,
                                        batch=self.prices.batch_multiplier(provider.kind, provider.model))
        return ObservedCompleter(completer, provider=provider.name, model=provider.model, kind=provider.kind)

    def _build(self, provider: ProviderConfig) -> Completer:
        missing = self._missing_key(provider)
        if missing is not None:
            return _NoKey(provider.name, provider.model, missing)
        return create_completer(
            provider.kind,
            name=provider.name,
            model=provider.model,
            base_url=provider.base_url or None,
            api_key=provider.api_key,
            api_keys=provider.api_keys,
            max_tokens=provider.max_tokens,
            timeout=provider.timeout,
            headers=provider.headers or None,
            prompt_cache=provider.prompt_cache,
            stream=provider.stream,
            rate_limit=rate_limit_settings(provider),
            options=provider.options,
            cooldowns=self.cooldowns,
            governor=self.governor,
            spend=provider.spend,
            spend_labels=self.config.spend,
            spend_ledger=self.spend,
            price=self.prices.lookup(provider.kind, provider.model),
            window=self.window(provider),
            on_event=self._on_event,
            **self._batching(provider),
        )

    def _batching(self, provider: ProviderConfig) -> dict[str, Any]:
        """The batch arguments of ``provider``'s ``create_completer``: none when its calls never
        batch; Shelly's collector when ``batch.enabled`` (in one process); on a worker the pool's
        layer for every provider with a batch API (``enabled`` says whether its config asks for it)."""
        pool = self.pool_batching
        force = pool is not None
        vendor = provider.batch_api(force=force)
        if vendor is None:
            return {}
        out: dict[str, Any] = {"batch": batch_settings(provider, force=force), "batch_vendor": vendor}
        if pool is not None:
            price = self.prices.lookup(provider.kind, provider.model)
            share = self.prices.batch_multiplier(provider.kind, provider.model)
            keys = provider.keys()

            def priced(reply: Message) -> Message:
                return price_reply(reply, price, share) if price is not None else reply

            out["batching"] = functools.partial(pool, price=priced, enabled=provider.batch_api() is not None,
                                                base_url=provider.base_url, model=provider.model,
                                                key=keys[0] if keys else "")
        return out

    def build_batch_desks(self) -> list[str]:
        """Build every provider that may batch now (a worker, at start), so this process can work
        their desks whether or not one of its runs has used them yet; their names."""
        built = []
        for provider in self.config.providers:
            if provider.kind != SCRIPTED and provider.batch_api(force=self.pool_batching is not None) is not None:
                self._one(provider, "")
                built.append(provider.name)
        return built


class _NoKey:
    """The completer of a provider whose key variable is unset or empty: every call fails at once
    with the loader's words (``provider "claude": ANTHROPIC_API_KEY is not set``), a model error no
    retry repeats. Before, the request went out without a key, was retried three times, and ended
    in a 401 or a DNS error that named nothing."""

    def __init__(self, name: str, model: str, message: str) -> None:
        self.name = name
        self.model = model
        self.message = message

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        raise ModelError(self.message, provider=self.name, model=self.model)
