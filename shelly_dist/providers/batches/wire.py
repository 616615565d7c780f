"""The HTTP side every batch client shares: JSON and JSONL over the provider's own API, its key.

Each call goes through :func:`shelly_dist.providers.transport.request`, so a failure is the same
typed model error a completion's would be (``rate_limit``, ``server``, ``auth``…), and the
collectors decide on it the same way.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from shelly_dist.models.classify import SERVER, transport_error
from shelly_dist.providers import transport
from shelly_dist.providers.http import HTTPCompleter

READ_TIMEOUT = 120.0
"""Seconds to wait for a batch endpoint's answer (an upload or a results file can be large)."""

CREATE_TIMEOUT = 20.0
"""Seconds to wait for the answer to a batch's create: the pool re-attaches a create left without
answer only once no such create can still be in flight (``batches.runner.CREATE_GRACE``)."""


class Wire:
    """Requests to the API of ``completer``'s provider, with its headers."""

    def __init__(self, completer: HTTPCompleter) -> None:
        self.completer = completer
        self.provider = completer.name
        self.model = completer.model

    def url(self, path: str) -> str:
        return self.completer.api(path)

    def same_origin(self, url: str) -> bool:
        """Whether ``url`` is on the provider's own host: the key is only ever sent there."""
        mine, theirs = urlsplit(self.url("/")), urlsplit(url)
        return (mine.scheme, mine.netloc) == (theirs.scheme, theirs.netloc)

    async def _send(self, method: str, url: str, data: bytes | aiohttp.FormData | None = None,
                    headers: dict[str, str] | None = None, read_timeout: float = READ_TIMEOUT) -> bytes:
        return await transport.request(method, url, headers={**self.completer.headers, **(headers or {})}, data=data,
                                       read_timeout=read_timeout, provider=self.provider, model=self.model)

    async def get(self, path_or_url: str) -> bytes:
        url = path_or_url if "://" in path_or_url else self.url(path_or_url)
        return await self._send("GET", url)

    async def get_json(self, path: str) -> Any:
        return transport.decode_json(await self.get(path), provider=self.provider, model=self.model)

    async def post_json(self, path: str, body: Any, *, read_timeout: float = READ_TIMEOUT) -> Any:
        raw = await self._send("POST", self.url(path), transport.encode_json(body),
                               {"Content-Type": "application/json"}, read_timeout)
        return transport.decode_json(raw, provider=self.provider, model=self.model) if raw.strip() else {}

    async def post_form(self, path: str, form: aiohttp.FormData) -> Any:
        return transport.decode_json(await self._send("POST", self.url(path), form),
                                     provider=self.provider, model=self.model)

    def lines(self, raw: bytes) -> list[dict[str, Any]]:
        """The objects of a JSONL answer; a line that is not a JSON object is a ``server`` error."""
        out = []
        for n, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                item = None
            if not isinstance(item, dict):
                raise transport_error(provider=self.provider, model=self.model, kind=SERVER,
                                      detail=f"batch results: line {n} is not a JSON object: {line[:200]!r}")
            out.append(item)
        return out


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    """Lines as JSONL, one compact object per line."""
    return b"".join(transport.encode_json(line) + b"\n" for line in lines)
