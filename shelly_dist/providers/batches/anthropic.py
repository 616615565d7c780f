"""Anthropic's Message Batches API.

- create: ``POST /v1/messages/batches {requests: [{custom_id, params}]}``, each ``params`` being
  exactly what :class:`~shelly_dist.providers.anthropic.AnthropicCompleter` would POST to
  ``/v1/messages`` (prompt-cache breakpoints included: the vendor caches in batches too, and its
  usage reports the cache tokens as a direct call's does); nothing is uploaded first;
- find: ``GET /v1/messages/batches`` (newest first) for the one batch created at or after the
  recorded time with as many requests as ours — a batch has no field to name its creator, so this
  adopts a batch only when exactly one fits;
- poll: ``GET /v1/messages/batches/{id}``; ended at ``processing_status: ended``;
- results: the ``results_url`` the batch names (only on the provider's own host, where its key may
  go; else ``…/{id}/results``), JSONL lines ``{custom_id, result: {type, message | error}}`` with
  ``type`` ``succeeded``, ``errored``, ``canceled`` or ``expired``;
- cancel: ``POST /v1/messages/batches/{id}/cancel``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from shelly_dist.chats import Message
from shelly_dist.models.batching.api import CANCELED, ERRORED, EXPIRED, SUCCEEDED, Outcome, Poll
from shelly_dist.models.completer import ToolSpec
from shelly_dist.providers.anthropic import AnthropicCompleter
from shelly_dist.providers.batches.wire import CREATE_TIMEOUT, Wire

BATCHES = "/messages/batches"
_STATES = {"succeeded": SUCCEEDED, "errored": ERRORED, "canceled": CANCELED, "expired": EXPIRED}


def _epoch(text: object) -> float:
    """Seconds since the epoch of an RFC 3339 time (0 when absent or unreadable)."""
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class AnthropicBatches:
    """The Message Batches API of one Anthropic provider."""

    vendor: ClassVar[str] = "anthropic"

    def __init__(self, completer: AnthropicCompleter) -> None:
        self.completer = completer
        self.provider = completer.name
        self.usage = completer.usage
        self.wire = Wire(completer)

    def encode(self, custom_id: str, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        return {"custom_id": custom_id, "params": self.completer.encode(messages, tools)}

    async def upload(self, lines: list[dict[str, Any]]) -> str:
        return ""

    async def create(self, lines: list[dict[str, Any]], upload: str) -> str:
        return str((await self.wire.post_json(BATCHES, {"requests": lines}, read_timeout=CREATE_TIMEOUT))["id"])

    async def find(self, upload: str, lines: list[dict[str, Any]], since: float) -> str | None:
        page = await self.wire.get_json(f"{BATCHES}?limit=100")
        fits = [b for b in page.get("data") or []
                if _epoch(b.get("created_at")) >= since
                and sum(int(v) for v in (b.get("request_counts") or {}).values()) == len(lines)]
        return str(fits[0]["id"]) if len(fits) == 1 else None

    async def poll(self, batch_id: str) -> Poll:
        data = await self.wire.get_json(f"{BATCHES}/{batch_id}")
        status = str(data.get("processing_status") or "")
        counts = {k: int(v) for k, v in (data.get("request_counts") or {}).items() if isinstance(v, int)}
        refs = {"results_url": str(data["results_url"])} if data.get("results_url") else {}
        return Poll(status=status, ended=status == "ended", counts=counts, refs=refs)

    async def results(self, batch_id: str, poll: Poll) -> dict[str, Outcome]:
        url = poll.refs.get("results_url", "")
        if not url or not self.wire.same_origin(url):
            url = f"{BATCHES}/{batch_id}/results"
        return {str(line.get("custom_id")): self.outcome(line) for line in self.wire.lines(await self.wire.get(url))}

    def outcome(self, line: dict[str, Any]) -> Outcome:
        """One line of the results."""
        result = line.get("result") or {}
        state = _STATES.get(str(result.get("type")), ERRORED)
        if state == SUCCEEDED:
            try:
                reply, usage = self.completer.decode(result.get("message") or {})
            except Exception as exc:  # an unusable answer is the request's failure, not the batch's
                return Outcome(ERRORED, error=f"unusable answer: {exc}")
            return Outcome(SUCCEEDED, reply=reply, usage=usage)
        error = result.get("error") or {}
        inner = error.get("error") if isinstance(error.get("error"), dict) else error
        text = f"{inner.get('type', '')}: {inner.get('message', '')}".strip(": ") if inner else ""
        return Outcome(state, error=text or str(result.get("type") or "no result"))

    async def cancel(self, batch_id: str) -> None:
        await self.wire.post_json(f"{BATCHES}/{batch_id}/cancel", {})
