"""``shelly a2a serve`` under attack (issue 38, finding 6): a DNS-rebinding page, a cross-origin
page, a huge body, and one caller reading another's tasks — each refused by a real server."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from .cluster import Cluster
from .ops import Processes
from .test_a2a_serve import start_a2a, team

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

GET_TASK = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}


def rpc(url: str, method: str, params: dict[str, Any], token: str, **headers: str) -> httpx.Response:
    return httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, timeout=60,
                      headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0", **headers})


def peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.fixture
def tokenless(cluster: Cluster, procs: Processes) -> str:
    team(cluster)
    return start_a2a(procs)


def test_a_rebinding_host_is_refused_by_the_tokenless_loopback_server(tokenless: str):
    answer = httpx.post(tokenless, json=GET_TASK, headers={"Host": "evil.example:8100"})
    assert answer.status_code == 421
    assert "a2a: Host 'evil.example:8100' is not this server's" in answer.json()["error"]
    card = httpx.get(f"{tokenless}.well-known/agent-card.json", headers={"Host": "evil.example"})
    assert card.status_code == 421, "the card too: a rebinding page learns nothing"


def test_a_foreign_origin_is_refused(tokenless: str):
    answer = httpx.post(tokenless, json=GET_TASK, headers={"Origin": "http://evil.example"})
    assert answer.status_code == 403
    assert "a2a: requests from origin 'http://evil.example' are refused" in answer.json()["error"]


def _send_huge(url: str, total: int, *, chunked: bool) -> tuple[int, int]:
    """Send a ``total``-byte body (declared, or chunked) over a raw socket, writing from a thread
    while the answer is read here; returns (status, bytes written before the server stopped us)."""
    port = int(url.rsplit(":", 1)[1].strip("/"))
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    framing = b"Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {total}\r\n".encode()
    sock.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + framing + b"\r\n")
    written = 0
    block = b"x" * (1 << 20)

    def write() -> None:
        nonlocal written
        try:
            while written < total:
                data = (b"%x\r\n" % len(block) + block + b"\r\n") if chunked else block
                sock.sendall(data)
                written += len(block)
        except OSError:
            return

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    head = b""
    while b"\r\n" not in head:
        got = sock.recv(4096)
        assert got, f"the server closed without answering (after {written} bytes)"
        head += got
    with contextlib.suppress(OSError):  # the server may have closed already
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    writer.join(60)
    return int(head.split()[1]), written


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_300_mb_body_gets_413_and_the_server_does_not_grow(tokenless: str, procs: Processes, chunked: bool):
    pid = procs.procs["a2a"].pid
    before = peak_rss_kb(pid)
    status, written = _send_huge(tokenless, 300 << 20, chunked=chunked)
    assert status == 413
    assert written < 300 << 20, "refused before the whole body was sent"
    assert peak_rss_kb(pid) - before < 64 * 1024, "the peak RSS grew by less than 64 MB"
    assert httpx.get(f"{tokenless}.well-known/agent-card.json").status_code == 200, "and it still serves"


@pytest.mark.parametrize("runtime", ["pool", "embedded"])
def test_a_caller_sees_only_its_own_tasks(cluster: Cluster, procs: Processes, runtime: str):
    team(cluster)
    if runtime == "pool":  # tasks in Redis
        cluster.start_worker("w1")
    else:  # embedded: tasks in the SDK's memory store
        path = cluster.root / ".shelly" / "config.yaml"
        config = yaml.safe_load(path.read_text())
        config.pop("distributed")
        path.write_text(yaml.safe_dump(config, sort_keys=False))
    url = start_a2a(procs, "--caller", "alice=tok-alice", "--caller", "bob=tok-bob")
    message = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "investigate"}]},
               "configuration": {"returnImmediately": False}}
    sent = rpc(url, "SendMessage", message, "tok-alice").json()
    task_id = sent["result"]["task"]["id"]
    assert rpc(url, "GetTask", {"id": task_id}, "tok-alice").json()["result"]["id"] == task_id
    assert [t["id"] for t in rpc(url, "ListTasks", {}, "tok-alice").json()["result"]["tasks"]] == [task_id]
    bob_get = rpc(url, "GetTask", {"id": task_id}, "tok-bob").json()
    assert "result" not in bob_get and bob_get["error"]["code"] == -32001, bob_get  # TaskNotFound
    assert rpc(url, "ListTasks", {}, "tok-bob").json()["result"].get("tasks", []) == []
    assert "result" not in rpc(url, "CancelTask", {"id": task_id}, "tok-bob").json()
    assert httpx.post(url, json=GET_TASK, headers={"Authorization": "Bearer tok-carol"}).status_code == 401


def test_a_caller_entry_without_a_token_is_refused_at_start(cluster: Cluster):
    team(cluster)
    out: subprocess.CompletedProcess[str] = cluster.shelly("a2a", "serve", "--caller", "alice", timeout=60)
    assert out.returncode == 2
    assert "a2a serve: --caller 'alice': expected NAME=TOKEN" in out.stderr
