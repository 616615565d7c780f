"""The console's gate: token, Host/Origin and body bound on every request (DESIGN §9, §12)."""

from __future__ import annotations

from shelly_dist.console.gate import COOKIE, MAX_BODY, Gate, allowed_hosts, host_name, needs_token

TOKEN = "s3cret-token"


async def test_an_api_request_without_the_token_gets_401(console) -> None:
    client = await console(Gate(token=TOKEN))
    response = await client.get("/api/sessions")
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="shelly"'
    assert "SHELLY_SERVE_TOKEN" in (await response.json())["error"]


async def test_a_wrong_token_gets_401_and_the_right_one_passes(console) -> None:
    client = await console(Gate(token=TOKEN))
    assert (await client.get("/api/sessions", headers={"Authorization": "Bearer nope"})).status == 401
    assert (await client.get("/api/sessions", headers={"Authorization": f"Bearer {TOKEN}"})).status == 200


async def test_login_sets_an_http_only_strict_cookie_that_then_authorizes(console) -> None:
    client = await console(Gate(token=TOKEN))
    assert (await client.post("/api/login", json={"token": "wrong"})).status == 401
    response = await client.post("/api/login", json={"token": TOKEN})
    assert response.status == 200
    cookie = response.cookies[COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie.value == TOKEN
    assert (await client.get("/api/sessions")).status == 200  # the client sends the cookie back


async def test_the_page_and_health_are_served_without_the_token(console) -> None:
    client = await console(Gate(token=TOKEN))
    for path in ("/", "/sessions/abc", "/static/js/main.js", "/static/console.css", "/api/health"):
        assert (await client.get(path)).status == 200, path


async def test_a_host_that_is_not_this_server_is_refused_against_dns_rebinding(console) -> None:
    client = await console(Gate())
    response = await client.get("/api/sessions", headers={"Host": "evil.example:8700"})
    assert response.status == 421
    assert "evil.example" in (await response.json())["error"]
    assert (await client.get("/api/sessions", headers={"Host": "localhost:8700"})).status == 200


async def test_a_request_from_another_origin_is_refused(console) -> None:
    client = await console(Gate())
    host = f"127.0.0.1:{client.port}"
    refused = await client.post("/api/sessions", json={"task": "x"}, headers={"Origin": "http://evil.example"})
    assert refused.status == 403
    assert (await client.get("/api/sessions", headers={"Origin": "null"})).status == 403
    same = await client.get("/api/sessions", headers={"Origin": f"http://{host}"})
    assert same.status == 200


async def test_a_body_over_the_limit_is_refused_with_413_before_it_is_read(console) -> None:
    client = await console(Gate(max_body=1024))
    response = await client.post("/api/sessions", data=b"x" * 2048, headers={"Content-Type": "application/json"})
    assert response.status == 413
    assert "1024-byte limit" in (await response.json())["error"]


async def test_a_chunked_body_over_the_limit_is_refused_too(console) -> None:
    client = await console(Gate(max_body=1024))

    async def chunks():
        for _ in range(8):
            yield b"x" * 512

    response = await client.post("/api/sessions", data=chunks(), headers={"Content-Type": "application/json"})
    assert response.status == 413


def test_the_default_body_bound_holds_a_long_task() -> None:
    assert MAX_BODY >= 200_000


def test_loopback_needs_no_token_every_other_address_does() -> None:
    assert not needs_token("127.0.0.1") and not needs_token("::1") and not needs_token("localhost")
    assert needs_token("0.0.0.0") and needs_token("::") and needs_token("10.1.2.3") and needs_token("console.lan")


def test_allowed_hosts_follow_the_bound_address() -> None:
    assert allowed_hosts("127.0.0.1") == {"localhost", "127.0.0.1", "::1"}
    assert allowed_hosts("10.1.2.3") == {"localhost", "127.0.0.1", "::1", "10.1.2.3"}
    assert allowed_hosts("0.0.0.0") is None  # any name: the token guards it
    assert allowed_hosts("0.0.0.0", ["Console.Example"]) == {"localhost", "127.0.0.1", "::1", "console.example"}


def test_host_names_drop_the_port_and_brackets() -> None:
    assert host_name("[::1]:8700") == "::1"
    assert host_name("LOCALHOST:80") == "localhost"
    assert host_name("") == ""
