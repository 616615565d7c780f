"""``permissions.exec_env`` in the config decides what the programs an agent runs may see."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from shelly_dist.chats import ToolResult
from shelly_dist.engine import Engine, config_from_data

PRINT_ENV = {"command": sys.executable, "args": ["-c", "import json, os; print(json.dumps(dict(os.environ)))"]}


async def test_config_exec_env_reaches_the_program_and_nothing_else_does(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SHELLY_TEST_SECRET", "hunter2")
    monkeypatch.setenv("SHELLY_TEST_LISTED", "visible")
    cfg = config_from_data({
        "providers": [{"name": "p", "kind": "scripted", "model": "m",
                       "script": {"*": [{"tool_calls": [{"name": "exec_run", "arguments": PRINT_ENV}]}, "done"]}}],
        "agents": [{"name": "solo", "toolboxes": ["exec"]}],
        "permissions": {"trusted_commands": [sys.executable], "exec_env": ["SHELLY_TEST_LISTED"]},
    }, {})
    async with await Engine.open(cfg, shelly_dir=tmp_path / ".shelly") as engine:
        session = engine.session()
        await session.send("go")
    [result] = [p for m in session.agent.chat.messages() for p in m.parts if isinstance(p, ToolResult)]
    assert not result.is_error, result.content
    env = json.loads(result.content)
    assert env["SHELLY_TEST_LISTED"] == "visible" and "SHELLY_TEST_SECRET" not in env
