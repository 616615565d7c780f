"""A completer that fails as scripted, for retry and fallback tests (no HTTP)."""

from __future__ import annotations

from shelly_dist.chats import Chat, Message, Role
from shelly_dist.errors import ModelError, ModelHTTPError
from shelly_dist.models import ToolSpec, Usage


def http_error(kind: str, retry_after: float | None = None) -> ModelHTTPError:
    return ModelHTTPError(f'provider "fake": {kind}', provider="fake", kind=kind, retry_after=retry_after)


class FlakyCompleter:
    """Raises the scripted errors in order, then answers ``text`` forever."""

    def __init__(self, *errors: ModelError | BaseException, text: str = "ok") -> None:
        self.errors = list(errors)
        self.text = text
        self.calls = 0

    async def complete(self, chat: Chat, tools: list[ToolSpec]) -> Message:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return Usage(input_tokens=1, output_tokens=1).attach(Message.text("", Role.ASSISTANT, self.text))


class FakeClock:
    """A clock that only moves when slept on."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
