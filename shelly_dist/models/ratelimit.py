"""A provider's ``rate_limit`` block, and Shelly's estimate of a request's input tokens.

The limits are enforced by the provider governor (:mod:`shelly_dist.models.governor`), per API key
and model and shared by every process of a pool, where Shelly keeps a ``RateLimitedCompleter`` per
process: a call reserves a request and its input tokens estimated from the chat (Shelly's
``TokenEstimator``: chars/4 rounded up, +4 per message, +10 per tool) before it starts, and the
reservation is corrected with the real usage when the reply comes back.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, field_validator

from shelly_dist.chats import Message, Text, ToolCall, ToolResult
from shelly_dist.models.completer import ToolSpec

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class RateLimitSettings(BaseModel):
    """A provider's ``rate_limit`` block. Zero means "no limit" for the window sizes."""

    input_tpm: int = 0
    output_tpm: int = 0
    rpm: int = 0
    max_concurrent: int = 0
    """Calls in flight at once on one key (0: no limit)."""
    max_retries: int = 3
    base_delay: float = 1.0
    """Seconds; also accepts Go-style durations such as ``"1s"`` or ``"500ms"``."""

    @field_validator("base_delay", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        if isinstance(value, str):
            m = _DURATION.match(value)
            if not m:
                raise ValueError(f"not a duration: {value!r} (use seconds or e.g. '500ms', '2s')")
            return float(m.group(1)) * _UNIT[m.group(2)]
        return value

    @property
    def throttles(self) -> bool:
        """Whether any limit is set (otherwise the governor goes by what the vendor's headers say)."""
        return bool(self.input_tpm or self.output_tpm or self.rpm or self.max_concurrent)


def _part_chars(part: object) -> int:
    if isinstance(part, Text):
        return len(part.text)
    if isinstance(part, ToolCall):
        return len(part.name) + len(part.arguments)
    if isinstance(part, ToolResult):
        return len(part.content)
    return 0


def estimate_tokens(messages: list[Message], tools: list[ToolSpec]) -> int:
    """Shelly's estimate of a request's input tokens."""
    chars = sum(_part_chars(p) for m in messages for p in m.parts)
    return math.ceil(chars / 4) + 4 * len(messages) + 10 * len(tools)
