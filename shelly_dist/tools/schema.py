"""JSON Schema for tool inputs, generated from pydantic models.

A field is required unless it has a default (Shelly: unless ``omitempty``); descriptions come from
``Field(description=...)``. Nested models are inlined so that every provider, including those that
reject ``$ref``, can read the schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = defs[ref.removeprefix("#/$defs/")]
            merged = {**_inline(target, defs), **{k: v for k, v in node.items() if k != "$ref"}}
            return merged
        return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def _strip_titles(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "title" and isinstance(v, str):
                continue
            if k == "properties" and isinstance(v, dict):
                out[k] = {name: _strip_titles(sub) for name, sub in v.items()}
            else:
                out[k] = _strip_titles(v)
        return out
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def schema_for(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of ``model``'s input, self-contained (no ``$ref``) and without titles."""
    raw = model.model_json_schema()
    schema = _strip_titles(_inline(raw, raw.get("$defs", {})))
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema
