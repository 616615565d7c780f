"""Server-sent events (the ``text/event-stream`` the vendors stream answers in), read line by line.

Only what the vendors send is read: ``event:`` names the event (Anthropic), ``data:`` lines carry
its payload (several are joined by newlines), a blank line ends it; comments (``:``, a keep-alive)
and ``id:``/``retry:`` are skipped. Pure: the transport feeds it the lines it reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SSEReader:
    """Feed it lines; it returns each complete event as ``(name, data)`` (``name`` is ``""`` when
    the event named none, as OpenAI's and Gemini's)."""

    _name: str = ""
    _data: list[str] = field(default_factory=list)

    def feed(self, line: str) -> tuple[str, str] | None:
        line = line.rstrip("\r\n")
        if not line:
            if not self._data:
                self._name = ""
                return None
            event = (self._name, "\n".join(self._data))
            self._name, self._data = "", []
            return event
        if line.startswith(":"):
            return None
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "event":
            self._name = value
        elif key == "data":
            self._data.append(value)
        return None

    def end(self) -> tuple[str, str] | None:
        """The last event, when the stream ended without the blank line after it."""
        return self.feed("")
