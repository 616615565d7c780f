"""The vendors' own key variables, for a provider whose config gives no key.

A provider of a vendor's API (``kind: anthropic`` with no ``api_key:`` line, say) would send its
requests with no key, get a 401 after its retries, and ``shelly doctor`` said ok. The vendors'
SDKs read a standard variable then (``ANTHROPIC_API_KEY``…), and so does the loader: the first
of the kind's variables that is set becomes the provider's key. Only for the vendor's own URL —
a ``base_url`` of one's own (a llama.cpp or vLLM server) is never sent a vendor's key, and needs
none. No key and no variable is a warning (``NO_KEY``: the provider's calls then fail at once
naming the variable), as an unset ``${VAR}`` is.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

VENDOR_KEYS: dict[str, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_API_KEY",),
    "openai": ("OPENAI_API_KEY",),
    "grok": ("GROK_API_KEY", "XAI_API_KEY"),  # Shelly's templates name the first, xAI's SDK the second
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}
"""The variables each vendor's own tools read for its key, in the order they are tried."""

VENDOR_HOSTS: dict[str, str] = {
    "anthropic": "api.anthropic.com",
    "openai": "api.openai.com",
    "grok": "api.x.ai",
    "gemini": "generativelanguage.googleapis.com",
}
"""The vendor's API host: a ``base_url`` elsewhere is a server of one's own."""


def key_variables(kind: str, base_url: str) -> tuple[str, ...]:
    """The variables a provider of ``kind`` at ``base_url`` takes its key from when none is set
    (empty for a server of one's own, or a kind with no vendor variable)."""
    names = VENDOR_KEYS.get(kind, ())
    if names and base_url and urlsplit(base_url).hostname != VENDOR_HOSTS[kind]:
        return ()  # the host itself, not a substring: http://proxy/api.openai.com/ is not OpenAI
    return names


def fill_vendor_keys(
    data: MutableMapping[str, Any], env: Mapping[str, str], skip: set[str]
) -> list[tuple[str, tuple[str, str]]]:
    """Give each vendor provider in ``data`` (the expanded config) with no ``api_key`` nor
    ``api_keys`` the first of its vendor's variables that ``env`` sets; the others, as (provider
    name, (path, problem)). ``skip``: providers whose key names a variable of its own (already
    reported unset: the vendor's variable is not a silent stand-in for it)."""
    out: list[tuple[str, tuple[str, str]]] = []
    providers = data.get("providers")
    for i, provider in enumerate(providers if isinstance(providers, list) else []):
        if not isinstance(provider, dict) or provider.get("api_key") or provider.get("api_keys"):
            continue
        name = str(provider.get("name") or f"#{i}")
        kind, base_url = provider.get("kind"), provider.get("base_url") or ""
        names = key_variables(kind, str(base_url)) if isinstance(kind, str) else ()
        if not names or name in skip:
            continue
        found = next((env[n] for n in names if env.get(n, "").strip()), "")
        if found:
            provider["api_key"] = found.strip()
        else:
            either = " or ".join(names)
            out.append((name, (f"providers[{i}].api_key",
                               f'provider "{name}": no api_key, and {either} is not set')))
    return out
