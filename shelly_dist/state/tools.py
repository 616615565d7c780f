"""The blackboard tools: Shelly's ``{ns}_state_get/set/list`` plus ``_delete`` and ``_watch``.

Outputs are Shelly's: ``get`` returns the stored JSON text, ``set`` and ``delete`` return
``"ok"``, ``list`` a JSON array of keys (``[]`` when empty). The author of a write is the agent
running the tool (from :mod:`shelly_dist.identity`), recorded by the store itself.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from shelly_dist.errors import ToolError
from shelly_dist.state.base import Store
from shelly_dist.tools import ToolBox, tool_from_model

MAX_WATCH_SECONDS = 3600.0


class KeyInput(BaseModel):
    key: str = Field(description="The blackboard key.")


class SetInput(BaseModel):
    key: str = Field(description="The blackboard key.")
    value: Any = Field(description="Any JSON value to store under the key.")


class ListInput(BaseModel):
    pass


class WatchInput(BaseModel):
    key: str = Field(description="The blackboard key to wait for.")
    timeout_s: float = Field(
        60.0, gt=0, le=MAX_WATCH_SECONDS, description="Seconds to wait before giving up (default 60)."
    )


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def state_tools(store: Store, ns: str = "shared") -> ToolBox:
    """``{ns}_state_get``, ``_set``, ``_list``, ``_delete`` and ``_watch`` over ``store``."""
    get_name = f"{ns}_state_get"

    async def get(inp: KeyInput) -> str:
        entry = await store.get(inp.key)
        if entry is None:
            raise ToolError(f"{get_name}: key not found: {inp.key}", tool=get_name)
        return _json(entry.value)

    async def set_(inp: SetInput) -> str:
        await store.set(inp.key, inp.value)
        return "ok"

    async def list_(_inp: ListInput) -> str:
        return _json(await store.keys())

    async def delete(inp: KeyInput) -> str:
        await store.delete(inp.key)
        return "ok"

    async def watch(inp: WatchInput) -> str:
        return _json((await store.watch(inp.key, inp.timeout_s)).value)

    tools = [
        (get_name, "Get a value from the shared blackboard by key.", KeyInput, get),
        (f"{ns}_state_set", "Set a key on the shared blackboard to any JSON value.", SetInput, set_),
        (f"{ns}_state_list", "List the keys on the shared blackboard.", ListInput, list_),
        (
            f"{ns}_state_delete",
            "Delete a key from the shared blackboard (no error if missing).",
            KeyInput,
            delete,
        ),
        (
            f"{ns}_state_watch",
            "Wait until a key exists on the shared blackboard, then return its value.",
            WatchInput,
            watch,
        ),
    ]
    return ToolBox(
        (tool_from_model(name, desc, model, fn, group="state", retry_on_crash=True) for name, desc, model, fn in tools),  # type: ignore[arg-type]
        name="state",
    )
