"""A provider's context window and token count as the server sees them, learned at run time.

Why: the effects that keep a chat inside the window (``compact``, ``observation_mask``,
``sliding_window``, ``offload``) compare an estimate with ``context_window × threshold``. Shelly's
estimate is characters / 4, which a real tokenizer beats by far on anything but English prose
(measured with llama.cpp's ``/tokenize``: German 1.65×, code 1.06×, digits 4×, Chinese 7.9× more
tokens than the estimate), and a local server's window is whatever it was started with, not the
128,000 a kind defaults to. A German session against a 2,048-token server overflowed with no
compaction attempt and stayed stuck.

:class:`ContextWindow` is one provider's view in one process, shared by every agent using it:

- **the window**: the configured one; or, when the config sets none on a server that can say it,
  the server's own (``/props`` on llama.cpp, ``/v1/models`` on vLLM, ``/api/show`` on Ollama, read
  once), or the ``n_ctx`` an overflow error names; else the kind's default;
- **the ratio** of the server's real prompt tokens to the estimate, learned from every reply's
  reported prompt (cached tokens included: the whole prompt is what must fit) and, before the
  first reply, from the server's tokenizer (``/tokenize``) once. A run journals the ratio, so a
  worker that continues it starts calibrated.

The provider fills in the two probes (:attr:`probe_window`, :attr:`tokenize`); everything here is
plain arithmetic, so the embedded runtime and the pool behave the same.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Sequence

from shelly_dist.chats import Message, Text, ToolCall, ToolResult
from shelly_dist.models.completer import ToolSpec

__all__ = ["ContextWindow", "estimate_tokens", "prompt_from_error", "window_from_error"]

logger = logging.getLogger(__name__)

MIN_RATIO, MAX_RATIO = 0.25, 12.0
"""The ratios believed: a count outside these is a server counting something else (a reply that
reports only the uncached part, say), not a tokenizer."""

SMOOTHING = 0.5
"""Weight of the newest observation: the ratio follows a session whose language or content
changes within a few calls, without jumping on one odd count."""

MIN_SAMPLE = 400
"""Estimated tokens below which a count says little about the ratio (the fixed per-message
overhead dominates), so it is not learned from."""


def _part_chars(part: object) -> int:
    if isinstance(part, Text):
        return len(part.text)
    if isinstance(part, ToolCall):
        return len(part.name) + len(part.arguments)
    if isinstance(part, ToolResult):
        return len(part.content)
    return 0


def estimate_tokens(messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
    """Shelly's ``TokenEstimator``: characters / 4 rounded up, plus 4 per message and 10 per tool."""
    chars = sum(_part_chars(p) for m in messages for p in m.parts)
    chars += sum(len(t.name) + len(t.description) + len(str(t.input_schema)) for t in tools)
    return math.ceil(chars / 4) + 4 * len(messages) + 10 * len(tools)


def render_text(messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> str:
    """The text the estimate counts, for a server's tokenizer (what it counts, not how a template
    lays it out: the ratio compares like with like)."""
    chunks: list[str] = []
    for m in messages:
        for p in m.parts:
            if isinstance(p, Text):
                chunks.append(p.text)
            elif isinstance(p, ToolCall):
                chunks.append(p.name + p.arguments)
            elif isinstance(p, ToolResult):
                chunks.append(p.content)
    chunks.extend(t.name + t.description + str(t.input_schema) for t in tools)
    return "\n".join(chunks)


class ContextWindow:
    """One provider's window and token ratio in this process (see the module docstring)."""

    def __init__(self, tokens: int = 0, *, source: str = "config", learn: bool = False, fallback: int = 0) -> None:
        self.tokens = tokens
        """The window in tokens; 0 when unknown (then :attr:`effective` is the fallback)."""
        self.source = source
        """Where :attr:`tokens` came from: ``config``, ``default``, ``server /props``, …"""
        self.learn = learn
        """Whether the window is to be read from the server (the config set none)."""
        self.fallback = fallback
        """The kind's default, used while nothing better is known."""
        self.ratio = 0.0
        """Real tokens per estimated token (0: not yet known; 1 is assumed)."""
        self.ratio_source = ""
        self.probe_window: Callable[[], Awaitable[int | None]] | None = None
        """Asks the server for its window (set by providers that can)."""
        self.tokenize: Callable[[str], Awaitable[int | None]] | None = None
        """Counts a text with the server's tokenizer (set by providers that can)."""
        self._probed = False
        self._tokenized = False
        self._lock = asyncio.Lock()

    @property
    def effective(self) -> int:
        """The window the effects compare with: the learned or configured one, else the default."""
        return self.tokens or self.fallback

    def estimate(self, raw: int) -> int:
        """``raw`` (characters / 4) in the server's tokens, as far as the ratio is known."""
        return math.ceil(raw * (self.ratio or 1.0))

    def learned(self, tokens: int, source: str) -> None:
        """Take ``tokens`` as the window (a server's word beats the kind's default, never the config)."""
        if tokens <= 0 or (self.tokens and not self.learn):
            return
        if tokens != self.tokens:
            logger.info("context window: %d tokens (%s)", tokens, source)
        self.tokens, self.source = tokens, source

    def observe(self, raw: int, real: int, *, source: str = "reported prompt tokens") -> None:
        """Learn the ratio from a prompt the server counted as ``real`` tokens and we estimated as
        ``raw``; counts too small or implausible to say anything are ignored."""
        if raw < MIN_SAMPLE or real <= 0:
            return
        ratio = real / raw
        if not MIN_RATIO <= ratio <= MAX_RATIO:
            return
        self.ratio = ratio if not self.ratio else SMOOTHING * ratio + (1 - SMOOTHING) * self.ratio
        self.ratio_source = source

    def seed(self, ratio: float) -> None:
        """Start from a ratio a run journaled elsewhere, when this process has learned none yet."""
        if not self.ratio and MIN_RATIO <= ratio <= MAX_RATIO:
            self.ratio, self.ratio_source = ratio, "journaled with the run"

    async def prepare(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> None:
        """Before a model call: read the window from the server once (when it is to be learned)
        and calibrate the ratio with its tokenizer once (when no count is known yet). A server
        that cannot answer changes nothing: the estimate and the default stand."""
        if (self.learn and not self._probed and self.probe_window is not None) or (
            not self.ratio and not self._tokenized and self.tokenize is not None
        ):
            async with self._lock:
                await self._probe()
                await self._calibrate(messages, tools)

    async def _probe(self) -> None:
        if not self.learn or self._probed or self.probe_window is None:
            return
        self._probed = True
        try:
            tokens = await self.probe_window()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.debug("context window: the server did not say its window: %s", exc)
            return
        if tokens:
            self.learned(tokens, "server")

    async def _calibrate(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> None:
        if self.ratio or self._tokenized or self.tokenize is None:
            return
        raw = estimate_tokens(messages, tools)
        if raw < MIN_SAMPLE:
            return  # too little to learn from yet: the next, longer prompt tries
        self._tokenized = True
        try:
            real = await self.tokenize(render_text(messages, tools))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.debug("context window: the server's tokenizer did not answer: %s", exc)
            return
        if real:
            self.observe(raw - 4 * len(messages) - 10 * len(tools), real, source="server tokenizer")

    def describe(self) -> str:
        """One line for ``shelly doctor``: the window and where it came from, and the ratio."""
        window = (f"{self.tokens} tokens ({self.source})" if self.tokens
                  else f"{self.fallback} tokens (the kind's default)" if self.fallback else "unknown")
        ratio = f"; {self.ratio:.2f} tokens per estimated token ({self.ratio_source})" if self.ratio else ""
        return f"context window {window}{ratio}"


_VLLM_WINDOW = re.compile(r"maximum context length is (\d+)")
_VLLM_PROMPT = re.compile(r"\((\d+) in the messages")


def _error_object(body: str) -> dict:
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return data["error"] if isinstance(data.get("error"), dict) else data


def window_from_error(body: str) -> int | None:
    """The window an overflow error names: llama.cpp's ``n_ctx`` field, vLLM's "maximum context
    length is N tokens"; ``None`` when it names none."""
    n_ctx = _error_object(body).get("n_ctx")
    if isinstance(n_ctx, int) and n_ctx > 0:
        return n_ctx
    match = _VLLM_WINDOW.search(body)
    return int(match.group(1)) if match else None


def prompt_from_error(body: str) -> int | None:
    """The prompt's size in the server's tokens as an overflow error counts it: llama.cpp's
    ``n_prompt_tokens``, vLLM's "(N in the messages, …)"; ``None`` when it says none. A refused
    prompt calibrates the ratio too: the retry after compacting must not overflow again."""
    n_prompt = _error_object(body).get("n_prompt_tokens")
    if isinstance(n_prompt, int) and n_prompt > 0:
        return n_prompt
    match = _VLLM_PROMPT.search(body)
    return int(match.group(1)) if match else None
