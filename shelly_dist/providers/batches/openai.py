"""OpenAI's Batch API, and any server that implements it (``batch.api: openai``).

- upload: ``POST /v1/files`` (multipart, ``purpose=batch``) of JSONL lines
  ``{custom_id, method: POST, url: /v1/chat/completions, body}``, the body being exactly what
  :class:`~shelly_dist.providers.openai.OpenAICompleter` would POST;
- create: ``POST /v1/batches {input_file_id, endpoint, completion_window: 24h}``;
- find: ``GET /v1/batches`` (newest first, paged) for the batch whose ``input_file_id`` is the
  upload — the way back to a batch whose create was sent by a process that then died;
- poll: ``GET /v1/batches/{id}``; ended at ``completed``, ``failed``, ``expired``, ``cancelled``;
- results: the output file's content (``GET /v1/files/{id}/content``) and the error file's, each
  line ``{custom_id, response: {status_code, body}, error}``: a 2xx body is decoded as a completion
  (usage as the vendor reports it, cached tokens included), any other line is an ``errored``
  outcome, and OpenAI's ``batch_expired``/``batch_cancelled`` codes are ``expired``/``canceled``;
- cancel: ``POST /v1/batches/{id}/cancel``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import aiohttp

from shelly_dist.chats import Message
from shelly_dist.models.batching.api import CANCELED, ERRORED, EXPIRED, SUCCEEDED, Outcome, Poll
from shelly_dist.models.completer import ToolSpec
from shelly_dist.providers.batches.wire import CREATE_TIMEOUT, Wire, jsonl
from shelly_dist.providers.openai import OpenAICompleter

ENDPOINT = "/v1/chat/completions"
ENDED = ("completed", "failed", "expired", "cancelled")
FIND_PAGES = 5
"""Pages of 100 batches :meth:`OpenAIBatches.find` reads at most (newest first)."""
_STATES = {"batch_expired": EXPIRED, "batch_cancelled": CANCELED}


class OpenAIBatches:
    """The Batch API of one OpenAI(-compatible) provider."""

    vendor: ClassVar[str] = "openai"

    def __init__(self, completer: OpenAICompleter) -> None:
        self.completer = completer
        self.provider = completer.name
        self.usage = completer.usage
        self.wire = Wire(completer)

    def encode(self, custom_id: str, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        return {"custom_id": custom_id, "method": "POST", "url": ENDPOINT,
                "body": self.completer.encode(messages, tools)}

    async def upload(self, lines: list[dict[str, Any]]) -> str:
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", jsonl(lines), filename="batch_input.jsonl", content_type="application/jsonl")
        return str((await self.wire.post_form("/files", form))["id"])

    async def create(self, lines: list[dict[str, Any]], upload: str) -> str:
        answer = await self.wire.post_json("/batches", {"input_file_id": upload, "endpoint": ENDPOINT,
                                                        "completion_window": "24h"}, read_timeout=CREATE_TIMEOUT)
        return str(answer["id"])

    async def find(self, upload: str, lines: list[dict[str, Any]], since: float) -> str | None:
        after = ""
        for _ in range(FIND_PAGES):
            page = await self.wire.get_json("/batches?limit=100" + (f"&after={after}" if after else ""))
            data = page.get("data") or []
            for batch in data:
                if batch.get("input_file_id") == upload:
                    return str(batch["id"])
            if not page.get("has_more") or not data or min(int(b.get("created_at") or 0) for b in data) < since:
                return None
            after = str(data[-1]["id"])
        return None

    async def poll(self, batch_id: str) -> Poll:
        data = await self.wire.get_json(f"/batches/{batch_id}")
        status = str(data.get("status") or "")
        counts = {k: int(v) for k, v in (data.get("request_counts") or {}).items() if isinstance(v, int)}
        refs = {k: str(data[k]) for k in ("output_file_id", "error_file_id") if data.get(k)}
        errors = ((data.get("errors") or {}).get("data")) or []
        error = "; ".join(f"{e.get('code')}: {e.get('message')}" + (f" (line {e['line']})" if e.get("line") else "")
                          for e in errors[:5])
        return Poll(status=status, ended=status in ENDED, counts=counts, refs=refs, error=error)

    async def results(self, batch_id: str, poll: Poll) -> dict[str, Outcome]:
        out: dict[str, Outcome] = {}
        for ref in ("output_file_id", "error_file_id"):
            if ref in poll.refs:
                for line in self.wire.lines(await self.wire.get(f"/files/{poll.refs[ref]}/content")):
                    out[str(line.get("custom_id"))] = self.outcome(line)
        return out

    def outcome(self, line: dict[str, Any]) -> Outcome:
        """One line of an output or error file."""
        response, error = line.get("response") or {}, line.get("error") or {}
        status = int(response.get("status_code") or 0)
        if not error and 200 <= status < 300:
            try:
                reply, usage = self.completer.decode(response.get("body") or {})
            except Exception as exc:  # an unusable answer is the request's failure, not the batch's
                return Outcome(ERRORED, error=f"unusable answer: {exc}")
            return Outcome(SUCCEEDED, reply=reply, usage=usage)
        if error:
            code = str(error.get("code") or "")
            return Outcome(_STATES.get(code, ERRORED), error=f"{code}: {error.get('message') or ''}".strip(": "))
        body = response.get("body") or {}
        message = (body.get("error") or {}).get("message") if isinstance(body, dict) else None
        return Outcome(ERRORED, error=f"HTTP {status}: {message or body}")

    async def cancel(self, batch_id: str) -> None:
        await self.wire.post_json(f"/batches/{batch_id}/cancel", {})
