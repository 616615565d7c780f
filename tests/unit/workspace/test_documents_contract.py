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


async def test_a_document_past_the_size_limit_is_refused_naming_it_and_the_old_text_stays(ws: Workspace) -> None:
    from shelly_dist.workspace.base import MAX_DOCUMENT

    await ws.doc_write("coder", "big.md", "x" * (MAX_DOCUMENT - 10))
    with pytest.raises(StoreError, match=r'team_doc_append: document "big.md" would be 1,048,586 characters'):
        await ws.doc_append("coder", "big.md", "y" * 20)
    with pytest.raises(StoreError, match=r"team_doc_write: .* at most 1,048,576"):
        await ws.doc_write("coder", "big.md", "z" * (25 << 20))
    assert await ws.doc_read("big.md") == "x" * (MAX_DOCUMENT - 10)


async def test_a_wake_prompt_holds_only_the_head_of_a_long_document(ws: Workspace) -> None:
    from shelly_dist.workspace.prompt import wake_prompt

    await ws.doc_write("coder", "notes.md", "head " + "x" * 200_000)
    prompt = await wake_prompt(ws, "reviewer", [])
    assert len(prompt) < 30_000
    assert "its first 20,000 of 200,005 characters; team_doc_read reads it whole" in prompt
    assert "head x" in prompt
