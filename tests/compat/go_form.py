"""Configs in the form Go Shelly's tooling writes them.

Go Shelly's ``shelly init`` and config wizard write a config with ``yaml.Marshal`` of its
``engine.Config`` struct: every field, in struct order, with Go's zero value where nothing is
set (``""``, ``0``, ``false``, ``null`` for nil pointers, ``[]`` for nil lists, ``{}`` for nil
maps), four-space indentation, and a toolbox without a tool filter as a plain string. Only
``skills_tags``, ``estimated_cost`` and ``max_concurrency`` are ``omitempty``. :func:`go_config`
rewrites a config (as a YAML mapping, e.g. a bundled template's) into exactly that shape, so the
compatibility suite loads what a Go user's ``.shelly/`` holds.
"""

from __future__ import annotations

import json
from typing import Any

import yaml


def _provider(p: dict[str, Any]) -> dict[str, Any]:
    rl, batch = p.get("rate_limit") or {}, p.get("batch") or {}
    return {
        "name": p.get("name", ""), "kind": p.get("kind", ""), "base_url": p.get("base_url", ""),
        "api_key": p.get("api_key", ""), "model": p.get("model", ""),
        "context_window": p.get("context_window"), "max_tokens": p.get("max_tokens"),
        "rate_limit": {"input_tpm": rl.get("input_tpm", 0), "output_tpm": rl.get("output_tpm", 0),
                       "rpm": rl.get("rpm", 0), "max_retries": rl.get("max_retries", 0),
                       "base_delay": rl.get("base_delay", "")},
        "batch": {"enabled": batch.get("enabled", False), "collect_window": batch.get("collect_window", ""),
                  "poll_interval": batch.get("poll_interval", ""), "timeout": batch.get("timeout", ""),
                  "max_batch_size": batch.get("max_batch_size", 0)},
    }


def _mcp(m: dict[str, Any]) -> dict[str, Any]:
    return {"name": m.get("name", ""), "command": m.get("command", ""), "args": list(m.get("args") or []),
            "url": m.get("url", "")}


def _toolbox(ref: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(ref, str) or not ref.get("tools"):
        return ref if isinstance(ref, str) else ref["name"]
    return {"name": ref["name"], "tools": list(ref["tools"])}


def _agent(a: dict[str, Any]) -> dict[str, Any]:
    o = a.get("options") or {}
    out = {
        "name": a.get("name", ""), "description": a.get("description", ""),
        "instructions": a.get("instructions", ""), "provider": a.get("provider", ""),
        "toolboxes": [_toolbox(t) for t in a.get("toolboxes") or []],
        "skills": list(a.get("skills") or []),
        "effects": [{"kind": e["kind"], "params": dict(sorted((e.get("params") or {}).items()))}
                    for e in a.get("effects") or []],  # a Go map: keys sorted
        "options": {"max_iterations": o.get("max_iterations", 0), "warn_iterations": o.get("warn_iterations", 0),
                    "max_delegation_depth": o.get("max_delegation_depth", 0),
                    "max_handoffs": o.get("max_handoffs", 0), "context_threshold": o.get("context_threshold", 0),
                    "interaction_mode": o.get("interaction_mode", ""),
                    "question_timeout": o.get("question_timeout", "")},
        "prefix": a.get("prefix", ""),
    }
    for key in ("skills_tags", "estimated_cost", "max_concurrency"):  # omitempty
        if a.get(key):
            out[key] = a[key]
    return out


_UNSAFE_START = tuple("'\"@`{[*&!|>%?:,#")


def _scalar(value: Any) -> str:
    """A scalar as yaml.v3 writes it: ``null``, ``true``, numbers, ``""``, plain or quoted text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if value == "":
        return '""'
    if "\n" in value:
        return json.dumps(value, ensure_ascii=False)
    plain = (
        value == value.strip() and ": " not in value and " #" not in value and not value.startswith(_UNSAFE_START)
        and not value.startswith("- ") and value != "-"
        and yaml.safe_load(value) == value
    )
    return value if plain else "'" + value.replace("'", "''") + "'"


def _mapping(d: dict[str, Any], col: int, base: int, out: list[str], first: str = "") -> None:
    """Keys at column ``col`` (the first after ``first``, a ``- `` prefix); nested blocks at
    ``base + 4``: yaml.v3 indents a block inside a sequence item from the dash, not the key."""
    for i, (key, value) in enumerate(d.items()):
        lead = first if i == 0 and first else " " * col
        if isinstance(value, dict) and value:
            out.append(f"{lead}{key}:")
            _mapping(value, base + 4, base + 4, out)
        elif isinstance(value, list) and value:
            out.append(f"{lead}{key}:")
            _sequence(value, base + 4, out)
        else:
            empty = "{}" if isinstance(value, dict) else "[]" if isinstance(value, list) else _scalar(value)
            out.append(f"{lead}{key}: {empty}")


def _sequence(items: list[Any], dash: int, out: list[str]) -> None:
    for item in items:
        if isinstance(item, dict) and item:
            _mapping(item, dash + 2, dash, out, first=" " * dash + "- ")
        else:
            out.append(f"{' ' * dash}- {_scalar(item)}")


def go_config(cfg: dict[str, Any]) -> str:
    """``cfg`` as Go Shelly's ``yaml.Marshal(engine.Config)`` writes it."""
    doc = {
        "providers": [_provider(p) for p in cfg.get("providers") or []],
        "mcp_servers": [_mcp(m) for m in cfg.get("mcp_servers") or []],
        "agents": [_agent(a) for a in cfg.get("agents") or []],
        "entry_agent": cfg.get("entry_agent", ""),
        "filesystem": {"permissions_file": (cfg.get("filesystem") or {}).get("permissions_file", "")},
        "context": {"max_external_file_size": (cfg.get("context") or {}).get("max_external_file_size", 0)},
        "git": {"work_dir": (cfg.get("git") or {}).get("work_dir", "")},
        "default_context_windows": dict(sorted((cfg.get("default_context_windows") or {}).items())),
    }
    out: list[str] = []
    _mapping(doc, 0, -4 + 4, out)
    return "\n".join(out) + "\n"
