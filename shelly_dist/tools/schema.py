"""JSON Schema for tool inputs, generated from pydantic models.

A field is required unless it has a default (Shelly: unless ``omitempty``); descriptions come from
``Field(description=...)``. Nested models are inlined so that every provider, including those that
reject ``$ref``, can read the schema; a model that contains itself is cut to ``{"type": "object"}``
at its second appearance.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import BaseModel

_DATA_KEYS = frozenset({"default", "examples", "const", "enum"})
"""Keys whose values are JSON data, not schema: never rewritten."""

RECURSIVE_STUB: dict[str, Any] = {"type": "object"}
"""What a self-referencing model becomes at its second appearance: inlining it would never end."""


def _inline(node: Any, defs: dict[str, Any], expanding: tuple[str, ...] = ()) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref.removeprefix("#/$defs/")
            rest = {k: v for k, v in node.items() if k not in ("$ref", "$defs")}
            if name in expanding:
                return {**RECURSIVE_STUB, **rest}
            return {**_inline(defs[name], defs, (*expanding, name)), **rest}
        out: dict[str, Any] = {}
        for k, v in node.items():
            if k == "$defs":
                continue
            if k == "properties" and isinstance(v, dict):
                out[k] = {name: _inline(sub, defs, expanding) for name, sub in v.items()}
            else:
                out[k] = v if k in _DATA_KEYS else _inline(v, defs, expanding)
        return out
    if isinstance(node, list):
        return [_inline(v, defs, expanding) for v in node]
    return node


def _strip_titles(node: Any) -> Any:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            if k == "title" and isinstance(v, str):
                continue
            if k in _DATA_KEYS:
                out[k] = v
            elif k == "properties" and isinstance(v, dict):
                out[k] = {name: _strip_titles(sub) for name, sub in v.items()}
            else:
                out[k] = _strip_titles(v)
        return out
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


@functools.cache
def _schema_text(model: type[BaseModel]) -> str:
    raw = model.model_json_schema()
    schema = _strip_titles(_inline(raw, raw.get("$defs", {})))
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return json.dumps(schema)


def schema_for(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of ``model``'s input, self-contained (no ``$ref``) and without titles.

    Generated once per model (pydantic's generation costs about a millisecond, and every spawned
    child builds its tools); each call returns a fresh copy the caller may change.
    """
    return json.loads(_schema_text(model))


@functools.cache
def shared_schema(model: type[BaseModel], required: tuple[str, ...] | None = None) -> dict[str, Any]:
    """:func:`schema_for` ``model`` (with ``required`` in place of its required fields, when given),
    one dict per process shared by every tool built from it: read it, never change it.

    The built-in tools every run gets (``task_complete``, ``ask_user``…) are rebuilt for each run,
    and a worker holds hundreds of runs at once: a copy each cost a few KB per run in flight.
    """
    schema = schema_for(model)
    if required is not None:
        schema["required"] = list(required)
    return schema
