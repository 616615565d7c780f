"""What real OpenAI-compatible servers refuse and how they count, for the loopback model server.

Each rule is one behaviour seen against a real ``llama-server`` (llama.cpp, ``--jinja``), with its
wording, so tests pin what users of local models hit:

- **strict alternation** — llama.cpp's bundled Mistral Nemo / Mistral Small templates (and the
  vendors' own servers) refuse two user or two assistant turns in a row after the optional system
  message; assistant turns holding tool calls and tool results are not counted, as in the
  template: ``400 … conversation roles must alternate user/assistant/user/assistant/...``;
- **tool-call arguments** — llama-server parses every ``arguments`` string of the history as JSON
  and answers ``500 Failed to parse tool call arguments as JSON: …`` when one is not;
- **prefix caching** — llama.cpp and vLLM keep the evaluated prompt and reuse its longest common
  prefix with the next one; ``prompt_tokens`` *includes* ``prompt_tokens_details.cached_tokens``;
- **context size** — a prompt over the context is ``400`` with llama.cpp's
  ``exceed_context_size_error``.

Token counts here are characters / 4 of a rendering of the request (system prompt, then tools,
then the other messages), enough to compare what is shared and what is not.
"""

from __future__ import annotations

import json
import threading
from typing import Any

ALTERNATION_MESSAGE = (
    "After the optional system message, conversation roles must alternate user/assistant/user/assistant/..."
)
ARGUMENTS_MESSAGE = "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error"


def error(status: int, message: str, kind: str, **extra: Any) -> tuple[int, dict[str, Any]]:
    """llama-server's error JSON: ``{"error": {"code", "message", "type", …}}``."""
    return status, {"error": {"code": status, "message": message, "type": kind, **extra}}


def alternation_error(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The template's refusal when user and assistant turns do not alternate, else ``None``."""
    messages = list(body.get("messages") or [])
    if messages and messages[0].get("role") == "system":
        messages = messages[1:]
    index = 0
    for m in messages:
        if m.get("role") in ("tool", "tool_results") or m.get("tool_calls"):
            continue
        if (m.get("role") == "user") != (index % 2 == 0):
            return error(400, ALTERNATION_MESSAGE, "invalid_request_error")
        index += 1
    return None


def arguments_error(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """llama-server's 500 when a tool call of the history has arguments that are not JSON."""
    for m in body.get("messages") or []:
        for call in m.get("tool_calls") or []:
            text = (call.get("function") or {}).get("arguments")
            if isinstance(text, str):
                try:  # nlohmann::json, as llama-server: NaN and Infinity are not JSON
                    json.loads(text, parse_constant=_not_json)
                except ValueError:
                    return error(500, f"{ARGUMENTS_MESSAGE}: {text[:80]!r}", "server_error")
    return None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def overflow_error(tokens: int, n_ctx: int) -> tuple[int, dict[str, Any]]:
    """llama-server's answer to a prompt that does not fit its context."""
    return error(
        400,
        f"request ({tokens} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it",
        "exceed_context_size_error",
        n_prompt_tokens=tokens,
        n_ctx=n_ctx,
    )


def render(body: dict[str, Any]) -> str:
    """The prompt a template would make of an OpenAI request: system, tools, then the rest."""
    messages = list(body.get("messages") or [])
    head = ""
    if messages and messages[0].get("role") == "system":
        head = json.dumps(messages[0].get("content"), ensure_ascii=False)
        messages = messages[1:]
    tools = json.dumps(body.get("tools") or [], ensure_ascii=False, sort_keys=True)
    return head + tools + "".join(json.dumps(m, ensure_ascii=False, sort_keys=True) for m in messages)


def tokens(text: str) -> int:
    """Characters / 4, rounded up: the size of ``text`` in this server's tokens."""
    return (len(text) + 3) // 4


def _common(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class PrefixCache:
    """The prompts evaluated so far; each new one reuses its longest common prefix with them.

    As llama.cpp's slots and vLLM's automatic prefix caching do, at whole-token granularity.
    Thread-safe (the server answers concurrently).
    """

    def __init__(self, keep: int = 512) -> None:
        self._prompts: list[str] = []
        self._keep = keep
        self._lock = threading.Lock()

    def evaluate(self, prompt: str) -> tuple[int, int]:
        """``(prompt_tokens, cached_tokens)`` for ``prompt``, which is then cached too."""
        with self._lock:
            shared = max((_common(prompt, p) for p in self._prompts), default=0)
            self._prompts.append(prompt)
            del self._prompts[: -self._keep]
        return tokens(prompt), shared // 4
