"""http_fetch against a real server on loopback: fetch, SSRF guard, domain trust, redirects, caps."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools.builtin import http_toolbox
from shelly_dist.tools.builtin.http import is_public_address
from shelly_dist.tools.permissions import Permissions
from tests.unit.tools.conftest import call


class Server:
    def __init__(self) -> None:
        self.paths: list[str] = []
        self.authorizations: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self) -> None:
                server.paths.append(self.path)
                server.authorizations.append(self.headers.get("Authorization"))
                if self.path == "/trickle":
                    self._trickle()
                    return
                if self.path.startswith("/redirect/"):
                    self.send_response(302)
                    self.send_header("Location", "http://" + self.path.removeprefix("/redirect/"))
                    self.end_headers()
                    return
                length = int(self.headers.get("Content-Length") or 0)
                received = self.rfile.read(length).decode()
                body = b"x" * (2 << 20) if self.path == "/big" else f"{self.command} {received}".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _trickle(self) -> None:
                """40 bytes, one every 0.1 s: each read is quick, the whole body takes 4 s."""
                self.send_response(200)
                self.send_header("Content-Length", "40")
                self.end_headers()
                try:
                    for _ in range(40):
                        self.wfile.write(b"x")
                        self.wfile.flush()
                        time.sleep(0.1)
                except OSError:  # the client gave up
                    pass

            do_GET = do_POST = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def url(self, host: str, path: str) -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    s.thread.start()
    try:
        yield s
    finally:
        s.httpd.shutdown()
        s.httpd.server_close()
        s.thread.join()


def fake_dns(table: dict[str, str]):  # type: ignore[no-untyped-def]
    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError(f"unknown host {host}")
        return [table[host]]

    return resolve


def perms_trusting(project: Path, *domains: str) -> Permissions:
    return Permissions(root=project, trusted_domains=domains)


async def test_fetch_returns_status_headers_and_body(project: Path, server: Server) -> None:
    tb = http_toolbox(perms_trusting(project, "127.0.0.1"), allow_private=True)
    out = json.loads(await call(tb, "http_fetch", url=server.url("127.0.0.1", "/ok"), method="POST", body="hi"))
    assert out["status"] == 200 and out["body"] == "POST hi"
    assert out["headers"]["content-type"].startswith("text/plain")


async def test_loopback_address_is_refused_before_any_request(project: Path, server: Server) -> None:
    tb = http_toolbox(perms_trusting(project, "127.0.0.1"))
    with pytest.raises(ToolError, match=r"^http_fetch: refusing to connect to 127\.0\.0\.1"):
        await call(tb, "http_fetch", url=server.url("127.0.0.1", "/ok"))
    assert server.paths == []


async def test_name_resolving_to_loopback_is_refused(project: Path, server: Server) -> None:
    tb = http_toolbox(perms_trusting(project, "innocent.example"), resolver=fake_dns({"innocent.example": "127.0.0.1"}))
    with pytest.raises(ToolError, match=r"refusing to connect to innocent\.example \(127\.0\.0\.1\)"):
        await call(tb, "http_fetch", url=server.url("innocent.example", "/ok"))
    assert server.paths == []


async def test_localhost_is_refused(project: Path, server: Server) -> None:
    tb = http_toolbox(perms_trusting(project, "localhost"))
    with pytest.raises(ToolError, match="refusing to connect to localhost"):
        await call(tb, "http_fetch", url=server.url("localhost", "/ok"))


async def test_connection_goes_to_the_vetted_address(project: Path, server: Server) -> None:
    tb = http_toolbox(
        perms_trusting(project, "good.example"),
        resolver=fake_dns({"good.example": "127.0.0.1"}),
        address_allowed=lambda ip: ip == "127.0.0.1",
    )
    out = json.loads(await call(tb, "http_fetch", url=server.url("good.example", "/ok")))
    assert out["status"] == 200 and server.paths == ["/ok"]


async def test_redirect_to_private_address_is_refused_at_the_hop(project: Path, server: Server) -> None:
    tb = http_toolbox(
        perms_trusting(project, "good.example", "bad.example"),
        resolver=fake_dns({"good.example": "127.0.0.1", "bad.example": "127.0.0.2"}),
        address_allowed=lambda ip: ip == "127.0.0.1",
    )
    target = f"bad.example:{server.port}/ok"
    with pytest.raises(ToolError, match=r"refusing to connect to bad\.example \(127\.0\.0\.2\)"):
        await call(tb, "http_fetch", url=server.url("good.example", f"/redirect/{target}"))
    assert server.paths == [f"/redirect/{target}"]


async def test_redirect_to_untrusted_domain_is_refused(project: Path, server: Server) -> None:
    tb = http_toolbox(perms_trusting(project, "127.0.0.1"), allow_private=True)
    with pytest.raises(ToolError, match=r"^http_fetch: permission denied for evil\.example$"):
        await call(tb, "http_fetch", url=server.url("127.0.0.1", "/redirect/evil.example/steal"))


async def test_redirect_within_trusted_domain_is_followed(project: Path, server: Server) -> None:
    tb = http_toolbox(perms_trusting(project, "127.0.0.1"), allow_private=True)
    out = json.loads(await call(tb, "http_fetch", url=server.url("127.0.0.1", f"/redirect/127.0.0.1:{server.port}/ok")))
    assert out["status"] == 200 and server.paths[-1] == "/ok"


async def test_authorization_is_dropped_on_a_redirect_to_another_host(project: Path, server: Server) -> None:
    tb = http_toolbox(
        perms_trusting(project, "good.example", "other.example"),
        resolver=fake_dns({"good.example": "127.0.0.1", "other.example": "127.0.0.1"}),
        address_allowed=lambda ip: ip == "127.0.0.1",
    )
    url = server.url("good.example", f"/redirect/other.example:{server.port}/ok")
    out = json.loads(await call(tb, "http_fetch", url=url, headers={"Authorization": "Bearer secret"}))
    assert out["status"] == 200 and server.authorizations == ["Bearer secret", None]


async def test_authorization_is_kept_on_a_redirect_within_the_origin(project: Path, server: Server) -> None:
    tb = http_toolbox(perms_trusting(project, "127.0.0.1"), allow_private=True)
    url = server.url("127.0.0.1", f"/redirect/127.0.0.1:{server.port}/ok")
    await call(tb, "http_fetch", url=url, headers={"Authorization": "Bearer secret"})
    assert server.authorizations == ["Bearer secret", "Bearer secret"]


async def test_timeout_is_a_deadline_for_the_whole_call(project: Path, server: Server) -> None:
    tb = http_toolbox(perms_trusting(project, "127.0.0.1"), allow_private=True, timeout=1)
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"^http_fetch: timed out after 1s$"):
        await call(tb, "http_fetch", url=server.url("127.0.0.1", "/trickle"))
    assert time.monotonic() - started < 2


async def test_untrusted_domain_is_refused_headless(project: Path, server: Server) -> None:
    tb = http_toolbox(Permissions(root=project), allow_private=True)
    with pytest.raises(ToolError, match=r"^http_fetch: permission denied for 127\.0\.0\.1$"):
        await call(tb, "http_fetch", url=server.url("127.0.0.1", "/ok"))
    assert server.paths == []


async def test_body_is_cut_at_one_megabyte(project: Path, server: Server) -> None:
    tb = http_toolbox(perms_trusting(project, "127.0.0.1"), allow_private=True)
    out = json.loads(await call(tb, "http_fetch", url=server.url("127.0.0.1", "/big")))
    assert len(out["body"]) == 1 << 20


async def test_non_http_scheme_is_refused(project: Path) -> None:
    tb = http_toolbox(perms_trusting(project, "x"))
    with pytest.raises(ToolError, match="only http and https"):
        await call(tb, "http_fetch", url="file:///etc/passwd")


async def test_unsupported_method_is_invalid_input(project: Path) -> None:
    with pytest.raises(ToolError, match=r"^http_fetch: invalid input: method"):
        await call(http_toolbox(Permissions(root=project)), "http_fetch", url="http://x/", method="TRACE")


@pytest.mark.parametrize(
    ("ip", "public"),
    [
        ("8.8.8.8", True),
        ("10.0.0.1", False),
        ("169.254.169.254", False),
        ("::1", False),
        ("0.0.0.0", False),
        ("::ffff:127.0.0.1", False),
        ("100.64.0.1", False),
        ("224.0.0.1", False),
        ("::ffff:8.8.8.8", True),
        ("::127.0.0.1", False),  # IPv4-compatible
        ("::ffff:0:7f00:1", False),  # IPv4-translated
        ("64:ff9b::7f00:1", False),  # NAT64 of 127.0.0.1
        ("64:ff9b::a00:1", False),  # NAT64 of 10.0.0.1
        ("64:ff9b::808:808", True),  # NAT64 of 8.8.8.8
        ("64:ff9b:1::a00:1", False),  # local-use NAT64
        ("2002:7f00:1::", False),  # 6to4 of 127.0.0.1
        ("2002:c0a8:101::1", False),  # 6to4 of 192.168.1.1
        ("2002:808:808::1", True),  # 6to4 of 8.8.8.8
        ("2606:4700::1111", True),
    ],
)
def test_address_classification(ip: str, public: bool) -> None:
    assert is_public_address(ip) is public
