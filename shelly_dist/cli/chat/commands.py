"""The chat's slash commands: Shelly's, plus ``/attach``."""

from __future__ import annotations

COMMANDS = {
    "/help": "Show this help message",
    "/clear": "Clear the chat and start a new session",
    "/compact": "Compact the conversation to reclaim context",
    "/sessions": "Browse and resume previous sessions",
    "/settings": "Show the configuration (edit it with `shelly config`)",
    "/subagents": "Show or hide the sub-agent panel",
    "/tasks": "Show or hide the task board",
    "/attach": "Attach a file to the next message: /attach PATH",
    "/quit": "Exit the chat",
    "/exit": "Exit the chat",
}

SHORTCUTS = {
    "Enter": "Send the message (or answer the question shown)",
    "Up / Down": "Walk the input history",
    "Escape": "Cancel the reply being written (the whole tree of agents)",
    "Ctrl+C": "Exit",
}


def help_text() -> str:
    """The ``/help`` text (Markdown)."""
    lines = ["**Commands**", ""]
    lines += [f"- `{name}` {what}" for name, what in COMMANDS.items()]
    lines += ["", "**Shortcuts**", ""]
    lines += [f"- `{key}` {what}" for key, what in SHORTCUTS.items()]
    return "\n".join(lines)


def parse(text: str) -> tuple[str, str] | None:
    """``(command, argument)`` when ``text`` is a known slash command, else ``None`` (a message)."""
    name, _, argument = text.strip().partition(" ")
    return (name, argument.strip()) if name in COMMANDS else None
