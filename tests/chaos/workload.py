"""The chaos suite's workload: a lead that delegates to helpers that run a tool, on a loopback
model server whose every reply carries a fresh nonce, so the invariants can be checked afterwards.

Every request is logged with an *identity* (a digest of the messages it sent) and the nonce of the
reply it got. A rebuilt run sends the same messages again only when the reply it got before was never
journaled, so "no journaled reply requested twice" reads: for each identity, only the last reply
may appear in a journal. Each helper's tool appends its call's nonce to a marker file: "no finished
tool executed twice" reads: no nonce appears twice there.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shelly_dist.testing.model_server import ModelServer, RecordedRequest, Reply, speaker

APPEND = "import sys; f = open(sys.argv[1], 'a'); f.write(sys.argv[2] + '\\n'); f.close()"


@dataclass
class Served:
    identity: str
    nonce: str
    agent: str


@dataclass
class Workload:
    marker: Path
    helpers: int = 3
    delay: tuple[float, float] = (0.3, 1.5)
    seed: int = field(default_factory=lambda: random.randrange(1 << 30))
    served: list[Served] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self.server = ModelServer(format="openai", responder=self.respond)

    # -- config --------------------------------------------------------------------------------

    def providers(self) -> list[dict[str, Any]]:
        return [{"name": "mock", "kind": "openai", "model": "chaos", "base_url": self.server.url, "api_key": "k"}]

    def agents(self) -> list[dict[str, Any]]:
        return [
            {"name": "lead", "description": "splits the work", "provider": "mock",
             "options": {"max_delegation_depth": 1}},
            {"name": "helper", "description": "does one part", "provider": "mock", "toolboxes": ["exec"]},
        ]

    def permissions(self) -> dict[str, Any]:
        return {"trusted_commands": [sys.executable]}

    # -- the model -------------------------------------------------------------------------------

    def respond(self, req: RecordedRequest) -> Reply:
        messages = req.body.get("messages", [])
        agent = "lead" if speaker(req) == "lead" else "helper"
        turns = sum(1 for m in messages if m.get("role") == "assistant")
        identity = hashlib.sha1(json.dumps(messages, sort_keys=True).encode()).hexdigest()
        nonce = uuid.uuid4().hex[:16]
        with self._lock:
            self.served.append(Served(identity, nonce, agent))
            delay = self._rng.uniform(*self.delay)
        if agent == "lead":
            if turns == 0:
                task = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
                tasks = [{"agent": "helper", "task": f"part {i} of {task}", "context": ""} for i in range(self.helpers)]
                return Reply(text="", tool_calls=[{"id": f"call_{nonce}", "name": "delegate",
                                                   "arguments": {"tasks": tasks}}], delay=delay)
            return Reply(text=f"lead done {nonce}", delay=delay)
        if turns == 0:
            return Reply(text="", delay=delay, tool_calls=[{
                "id": f"call_{nonce}", "name": "exec_run",
                "arguments": {"command": sys.executable, "args": ["-c", APPEND, str(self.marker), nonce]}}])
        return Reply(text="", delay=delay, tool_calls=[{
            "id": f"call_{nonce}", "name": "task_complete",
            "arguments": {"status": "completed", "summary": f"helper done {nonce}"}}])
