"""Documents, identical in memory and in Redis."""

from __future__ import annotations

import pytest

from shelly_dist.errors import StoreError
from shelly_dist.workspace import Workspace


async def test_the_default_document_reads_empty_before_any_write(ws: Workspace) -> None:
    assert await ws.doc_read() == ""


async def test_write_append_and_list(ws: Workspace) -> None:
    await ws.doc_write("coder", "plan.md", "# Plan\n")
    assert await ws.doc_append("reviewer", "plan.md", "- step\n") == "# Plan\n- step\n"
    assert await ws.doc_read("plan.md") == "# Plan\n- step\n"
    assert await ws.doc_list() == ["plan.md"]


async def test_create_fails_when_the_document_exists(ws: Workspace) -> None:
    await ws.doc_create("coder", "a.md", "one")
    with pytest.raises(StoreError, match=r'team_doc_create: document "a.md" already exists'):
        await ws.doc_create("reviewer", "a.md", "two")
    assert await ws.doc_read("a.md") == "one"


async def test_reading_a_missing_named_document_is_an_error(ws: Workspace) -> None:
    with pytest.raises(StoreError, match=r'team_doc_read: document "x.md" not found'):
        await ws.doc_read("x.md")
