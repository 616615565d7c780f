"""The chat as a person uses it, in a real terminal (tmux: ``send-keys`` in, ``capture-pane`` out),
against the demo team (``shelly init --template demo``): ask "Why is the sky blue?", read the
answer, ``/subagents`` lists the researcher and the writer, ``/quit`` exits 0 — embedded, and the
same with the team's workers on a ``shelly worker`` pool."""

from __future__ import annotations

import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .cluster import Cluster, complete, delegate, scripted, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

DEADLINE = 90.0


class Terminal:
    """A tmux server of its own (its own socket) running one command in a 160x50 window."""

    def __init__(self, root: Path, command: list[str], env: dict[str, str]) -> None:
        self.socket = f"shelly-chat-{uuid.uuid4().hex[:8]}"
        self.exit_file = root / "chat.exit"
        script = f"{shlex.join(command)}; echo $? > {shlex.quote(str(self.exit_file))}"
        self.env = {**env, "TERM": "xterm-256color"}
        self.tmux("new-session", "-d", "-s", "chat", "-x", "160", "-y", "50", "-c", str(root), script)

    def tmux(self, *args: str) -> str:
        out = subprocess.run(["tmux", "-L", self.socket, *args], env=self.env, capture_output=True, text=True,
                             timeout=30, check=True)
        return out.stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "chat")

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "chat", "-l", text)
        self.tmux("send-keys", "-t", "chat", "Enter")

    def shows(self, *texts: str, what: str) -> str:
        def showing() -> str:
            screen = self.screen()
            return screen if all(t in screen for t in texts) else ""

        return wait_until(showing, DEADLINE, f"{what}: {texts} on screen")

    def exit_code(self) -> int:
        return int(wait_until(lambda: self.exit_file.read_text().strip() if self.exit_file.exists() else "",
                              DEADLINE, "the chat to exit"))

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env, capture_output=True, timeout=30)


@pytest.fixture
def demo(cluster: Cluster) -> Iterator[Cluster]:
    out = subprocess.run([sys.executable, "-m", "shelly_dist.cli.main", "init", "--template", "demo", "--force"],
                         cwd=cluster.root, env=cluster.env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    yield cluster


def converse(cluster: Cluster) -> str:
    """The conversation of the issue, in tmux; returns the screen that shows the sub-agents."""
    terminal = Terminal(cluster.root, [sys.executable, "-m", "shelly_dist.cli.main"], cluster.env())
    try:
        terminal.shows("ready", what="the chat")
        terminal.type("Why is the sky blue?")
        terminal.shows("Here is what the team put together", "ready", what="the answer")
        terminal.type("/subagents")
        screen = terminal.shows("researcher-", "writer-", "sub-agents", what="the sub-agent panel")
        terminal.type("/quit")
        assert terminal.exit_code() == 0
        return screen
    except BaseException:
        print(terminal.screen(), cluster.worker_log())
        raise
    finally:
        terminal.close()


def test_the_demo_team_answers_in_the_chat_and_subagents_lists_both_workers(demo: Cluster) -> None:
    screen = converse(demo)
    assert "local" in screen  # the status bar names the runtime: embedded


def test_the_same_conversation_on_a_pool_with_a_worker(demo: Cluster) -> None:
    path = demo.root / ".shelly" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["distributed"] = {"broker_url": demo.broker_url, "redis_url": demo.redis_url, "queue": demo.queue,
                             "key_prefix": demo.prefix}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    hostname = demo.start_worker("w1")
    screen = converse(demo)
    assert "celery" in screen and hostname in screen  # the workers ran on the pool, and the panel says where


def test_an_approval_of_a_child_on_a_worker_is_rejected_in_the_chat_and_the_model_hears_why(
    cluster: Cluster,
) -> None:
    set_env = {"tool_calls": [{"name": "shared_state_set", "arguments": {"key": "env", "value": "prod"}}]}
    cluster.write_config(
        [scripted(lead=[delegate(("keeper", "set the env")), "lead heard: {result}"],
                  keeper=[set_env, complete("set said: {result}")])],
        [{"name": "lead", "options": {"max_delegation_depth": 1}},
         {"name": "keeper", "toolboxes": ["state"], "approval": {"tools": ["shared_state_set"]}}],
    )
    cluster.start_worker("w1")
    terminal = Terminal(cluster.root, [sys.executable, "-m", "shelly_dist.cli.main"], cluster.env())
    try:
        terminal.shows("ready", what="the chat")
        terminal.type("set the env")
        terminal.shows("wants to run shared_state_set", "y: approve", what="the child's approval")
        terminal.type("n not on a Friday")
        terminal.shows("lead heard:", "not on a Friday", what="the reason, through the child, in the answer")
        terminal.type("/quit")
        assert terminal.exit_code() == 0
    except BaseException:
        print(terminal.screen(), cluster.worker_log())
        raise
    finally:
        terminal.close()
