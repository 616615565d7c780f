"""Error classification: which failures are worth another try, and which never are.

Every provider error is reduced to one ``kind`` so that retry, fallback and cooldown can decide
without knowing the vendor: ``rate_limit``, ``overloaded``, ``server``, ``timeout`` and ``network``
are *transient* (retried, then fallen back from); ``billing`` is not retried but does fall back
(another provider may still have credit); ``auth``, ``bad_request`` and ``context_overflow`` are
the caller's problem and go straight to the user.

Local servers word things their own way, and the markers below are matched on the body, lower-cased:
context overflow as llama.cpp (``exceed_context_size_error``, "exceeds the available context
size"), vLLM ("maximum context length", "maximum model length") and Ollama ("prompt too long;
exceeded max context length") say it — Ollama and some llama.cpp paths answer it with a 500 — and
a 5xx that names *our request* as malformed (llama-server's ``500 Failed to parse tool call
arguments as JSON``, a chat template's "conversation roles must alternate") is a bad request: the
same request would fail the same way again, so it is never retried.
"""

from __future__ import annotations

import email.utils
import time

from shelly_dist.errors import ContextTooLong, ModelError, ModelHTTPError

RATE_LIMIT = "rate_limit"
OVERLOADED = "overloaded"
SERVER = "server"
TIMEOUT = "timeout"
NETWORK = "network"
AUTH = "auth"
BILLING = "billing"
BAD_REQUEST = "bad_request"
CONTEXT_OVERFLOW = "context_overflow"

TRANSIENT = frozenset({RATE_LIMIT, OVERLOADED, SERVER, TIMEOUT, NETWORK})
"""Kinds that a later attempt may well get past."""

FALLBACK = TRANSIENT | {BILLING}
"""Kinds after which the next provider of a fallback chain is tried."""

BODY_EXCERPT = 512
"""Characters of an error body kept on the exception (Shelly keeps 512 bytes)."""

_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "maximum context",
    "input is too long",
    "exceeds the maximum number of tokens",
    "exceed_context_size",
    "available context size",
    "max context size",
    "maximum model length",
    "prompt too long",
    "reduce the length of the messages",
)
_MALFORMED_REQUEST_MARKERS = (
    "failed to parse tool call arguments",
    "roles must alternate",
    "failed to parse messages",
    "failed to apply chat template",
    "invalid tool call arguments",
)
"""A 5xx whose body says the request itself is wrong: retrying the same request cannot help."""
_BILLING_MARKERS = (
    "insufficient_quota",
    "credit balance",
    "billing",
    "payment required",
    "exceeded your current quota",
)


def classify_status(status: int, body: str = "") -> str:
    """The kind of an HTTP error answer, from its status and (for ambiguous codes) its body."""
    text = body.lower()
    if status == 402 or (status in (400, 403, 429) and any(m in text for m in _BILLING_MARKERS)):
        return BILLING
    if status in (400, 413, 422, 500) and any(m in text for m in _CONTEXT_MARKERS):
        return CONTEXT_OVERFLOW
    if status >= 500 and any(m in text for m in _MALFORMED_REQUEST_MARKERS):
        return BAD_REQUEST
    if status == 429:
        return RATE_LIMIT
    if status in (503, 529) or "overloaded" in text:
        return OVERLOADED
    if status in (408, 504):
        return TIMEOUT
    if status in (401, 403):
        return AUTH
    if status >= 500:
        return SERVER
    return BAD_REQUEST


def error_kind(exc: BaseException) -> str | None:
    """The kind of a model error, or ``None`` for anything that is not one (never retried)."""
    if isinstance(exc, ContextTooLong):
        return CONTEXT_OVERFLOW
    if isinstance(exc, ModelHTTPError):
        return exc.kind
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is worth retrying on the same provider."""
    return error_kind(exc) in TRANSIENT


def should_fall_back(exc: BaseException) -> bool:
    """Whether a fallback chain moves on to its next candidate after ``exc``."""
    return error_kind(exc) in FALLBACK


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date; ``None`` if absent."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _reason(kind: str, status: int | None) -> str:
    words = kind.replace("_", " ")
    return f"HTTP {status} {words}" if status else words


def http_error(
    *,
    provider: str,
    model: str,
    status: int,
    body: str,
    retry_after: float | None = None,
) -> ModelError:
    """The typed exception for an error answer: ``ContextTooLong`` or ``ModelHTTPError``.

    The message reads ``provider "<name>": HTTP 529 overloaded: <body excerpt>``.
    """
    kind = classify_status(status, body)
    excerpt = body[:BODY_EXCERPT]
    message = f'provider "{provider}": {_reason(kind, status)}'
    if excerpt.strip():
        message += f": {excerpt.strip()}"
    if kind == CONTEXT_OVERFLOW:
        return ContextTooLong(message, provider=provider, model=model, status_code=status, body=excerpt)
    return ModelHTTPError(
        message,
        provider=provider,
        model=model,
        kind=kind,
        status_code=status,
        body=excerpt,
        retry_after=retry_after,
    )


def transport_error(*, provider: str, model: str, kind: str, detail: str) -> ModelHTTPError:
    """The typed exception for a request that got no usable answer (timeout, network, bad JSON)."""
    return ModelHTTPError(
        f'provider "{provider}": {_reason(kind, None)}: {detail}', provider=provider, model=model, kind=kind
    )
