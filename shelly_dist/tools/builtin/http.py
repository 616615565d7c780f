"""The ``http`` toolbox: ``http_fetch`` with SSRF protection and per-domain trust.

A model-chosen URL must not reach the machine's own services or its private network. The guard
sits in the network backend under the HTTP client: for every connection it resolves the host
itself, refuses the connection if *any* resolved address is private, loopback, link-local,
unspecified, multicast or reserved (anything not globally routable), and then connects to the
address it vetted, so a second DNS answer (rebinding) can never switch the target. TLS still
verifies the original host name. An IPv6 address that embeds an IPv4 one (IPv4-mapped,
-compatible or -translated, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) is judged by the IPv4
address it carries, so ``64:ff9b::7f00:1`` is loopback. Redirects are followed by hand, at most
:data:`MAX_REDIRECTS`, and each hop is checked again: scheme, domain trust, and (at connect) the
address; a hop to another origin drops the credentials the model set (``Authorization``,
``Proxy-Authorization``, ``Cookie``), so a trusted host cannot bounce them to a third one. Proxies
from the environment are ignored, since a proxy would connect on our behalf past the guard.

The timeout is one deadline for the whole call (every hop, connect and body), not per read: a
server trickling a byte a second cannot hold the call past it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Literal

import httpcore2
import httpx2
from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.tools.permissions import Permissions
from shelly_dist.tools.tool import tool_from_model
from shelly_dist.tools.toolbox import ToolBox

BODY_CAP = 1 << 20
MAX_REDIRECTS = 10
DEFAULT_TIMEOUT = 60.0
TOOL = "http_fetch"

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``async resolve(host, port) -> [ip, ...]``; injectable so tests can fake DNS."""


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


EMBEDDING_IPV4_IN_LOW_BITS = (
    ipaddress.IPv6Network("::/96"),  # IPv4-compatible (deprecated), and :: and ::1
    ipaddress.IPv6Network("::ffff:0:0:0/96"),  # IPv4-translated (SIIT)
    ipaddress.IPv6Network("64:ff9b::/96"),  # NAT64 well-known prefix
)
"""Prefixes whose last 32 bits are an IPv4 address a gateway will connect to."""

LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")
"""Local-use NAT64 (RFC 8215): where the IPv4 address sits is the operator's choice, so refused."""


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries to a translator or tunnel, if any."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if any(addr in net for net in EMBEDDING_IPV4_IN_LOW_BITS):
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def is_public_address(ip: str) -> bool:
    """Whether ``ip`` is globally routable; an IPv6 address embedding an IPv4 one (mapped,
    compatible, translated, NAT64, 6to4) is judged by the IPv4 address it reaches."""
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address):
        if addr in LOCAL_NAT64:
            return False
        addr = _embedded_ipv4(addr) or addr
    return addr.is_global and not addr.is_multicast


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """Resolve, vet and connect to the vetted address: the check and the dial see the same IP."""

    def __init__(
        self, resolver: Resolver = system_resolver, *, address_allowed: Callable[[str], bool] = is_public_address
    ) -> None:
        self._inner = httpcore2.AnyIOBackend()
        self._resolver = resolver
        self._address_allowed = address_allowed

    async def vet(self, host: str, port: int) -> list[str]:
        try:
            addresses = await self._resolver(host, port)
        except OSError as exc:
            raise ToolError(f"{TOOL}: cannot resolve {host}: {exc}", tool=TOOL) from exc
        if not addresses:
            raise ToolError(f"{TOOL}: cannot resolve {host}", tool=TOOL)
        blocked = [a for a in addresses if not self._address_allowed(a)]
        if blocked:
            raise ToolError(
                f"{TOOL}: refusing to connect to {host} ({blocked[0]}): private, loopback, "
                "link-local or reserved addresses are blocked",
                tool=TOOL,
            )
        return addresses

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore2 interface)
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,  # type: ignore[name-defined]
    ) -> httpcore2.AsyncNetworkStream:
        addresses = await self.vet(host, port)
        last: Exception | None = None
        for ip in addresses:
            try:
                return await self._inner.connect_tcp(
                    ip, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except httpcore2.ConnectError as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(  # type: ignore[no-untyped-def]
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options=None,
    ):
        raise ToolError(f"{TOOL}: unix sockets are not allowed", tool=TOOL)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport with its connection pool rebuilt on a :class:`GuardedBackend`."""

    def __init__(self, backend: GuardedBackend) -> None:
        ssl_context = httpx2.create_ssl_context()
        super().__init__(verify=ssl_context, trust_env=False)
        # AsyncHTTPTransport has no network_backend argument; replacing its pool is the one way in.
        self._pool = httpcore2.AsyncConnectionPool(ssl_context=ssl_context, network_backend=backend)


class FetchInput(BaseModel):
    url: str = Field(description="http or https URL")
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"] = Field(
        default="GET", description="HTTP method"
    )
    headers: dict[str, str] = Field(default_factory=dict, description="Request headers")
    body: str = Field(default="", description="Request body")


CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
"""Request headers that never follow a redirect to another origin."""


def _keeps_credentials(old: httpx2.URL, new: httpx2.URL) -> bool:
    """Same origin, or the same host upgraded from http to https on the default ports."""
    if (old.scheme, old.host, old.port) == (new.scheme, new.host, new.port):
        return True
    return old.host == new.host and (old.scheme, new.scheme) == ("http", "https") and old.port is new.port is None


async def _read_capped(response: httpx2.Response) -> str:
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk[: BODY_CAP - len(data)]
        if len(data) >= BODY_CAP:
            break
    return data.decode(response.encoding or "utf-8", errors="replace")


class _Fetcher:
    def __init__(self, perms: Permissions, backend: GuardedBackend, timeout: float) -> None:
        self.perms = perms
        self.backend = backend
        self.timeout = timeout

    async def check_url(self, url: httpx2.URL) -> None:
        if url.scheme not in ("http", "https"):
            raise ToolError(f"{TOOL}: only http and https URLs are allowed: {url}", tool=TOOL)
        if not url.host:
            raise ToolError(f"{TOOL}: URL has no host: {url}", tool=TOOL)
        await self.perms.check_domain(TOOL, url.host)

    async def fetch(self, inp: FetchInput) -> str:
        # One client per call: nothing outlives the call, so nothing needs closing later.
        transport = GuardedTransport(self.backend)
        async with httpx2.AsyncClient(
            transport=transport, follow_redirects=False, timeout=self.timeout, trust_env=False
        ) as client:
            try:
                async with asyncio.timeout(self.timeout):
                    return await self._fetch(client, inp)
            except TimeoutError as exc:
                raise ToolError(f"{TOOL}: timed out after {self.timeout:g}s", tool=TOOL) from exc

    async def _fetch(self, client: httpx2.AsyncClient, inp: FetchInput) -> str:
        try:
            url = httpx2.URL(inp.url)
        except httpx2.InvalidURL as exc:
            raise ToolError(f"{TOOL}: invalid URL: {exc}", tool=TOOL) from exc
        method, body = inp.method, inp.body.encode() if inp.body else None
        headers = dict(inp.headers)
        for _ in range(MAX_REDIRECTS + 1):
            await self.check_url(url)
            request = client.build_request(method, url, headers=headers, content=body)
            try:
                response = await client.send(request, stream=True)
            except httpx2.HTTPError as exc:
                raise ToolError(f"{TOOL}: {type(exc).__name__}: {exc}", tool=TOOL) from exc
            try:
                if response.is_redirect and "location" in response.headers:
                    previous, url = url, url.join(response.headers["location"])
                    if not _keeps_credentials(previous, url):
                        headers = {k: v for k, v in headers.items() if k.lower() not in CREDENTIAL_HEADERS}
                    if response.status_code == 303 or (response.status_code in (301, 302) and method == "POST"):
                        method, body = "GET", None
                    continue
                text = "" if method == "HEAD" else await _read_capped(response)
                return json.dumps({"status": response.status_code, "headers": dict(response.headers), "body": text})
            finally:
                await response.aclose()
        raise ToolError(f"{TOOL}: too many redirects (more than {MAX_REDIRECTS})", tool=TOOL)


def http_toolbox(
    perms: Permissions,
    *,
    root: Path | None = None,
    resolver: Resolver = system_resolver,
    allow_private: bool = False,
    address_allowed: Callable[[str], bool] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> ToolBox:
    """The ``http`` toolbox (group ``web``).

    ``allow_private`` disables the address guard (tests serving from loopback; never on by
    default); ``address_allowed`` replaces the guard's predicate; ``resolver`` replaces DNS.
    """
    allowed = address_allowed or ((lambda _ip: True) if allow_private else is_public_address)
    fetcher = _Fetcher(perms, GuardedBackend(resolver, address_allowed=allowed), timeout)
    return ToolBox(
        [
            tool_from_model(
                TOOL,
                "Fetch a URL over HTTP(S). Returns JSON {status, headers, body} with the body cut at 1 MB.",
                FetchInput,
                fetcher.fetch,
                group="web",
            )
        ],
        name="http",
    )
