"""Session persistence: atomic save, attachments, listing order, corrupt files."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shelly_dist.chats import Image, Message, Role, Text, ToolCall, ToolResult
from shelly_dist.engine.sessions import ProviderInfo, SessionInfo, SessionStore, new_session_id
from shelly_dist.errors import StoreError, UsageError

PNG = base64.b64encode(b"\x89PNG fake image bytes").decode()


def conversation() -> list[Message]:
    return [
        Message.text("", Role.SYSTEM, "You are a."),
        Message.text("user", Role.USER, "hello"),
        Message(sender="a", role=Role.ASSISTANT, parts=[ToolCall(id="c1", name="t", arguments='{"x":1}')]),
        Message(
            sender="a", role=Role.TOOL, parts=[ToolResult(tool_call_id="c1", content="ok", is_error=True)]
        ),
        Message(sender="a", role=Role.ASSISTANT, parts=[Text(text="done")], metadata={"usage": {"input": 3}}),
    ]


def info(**kw: object) -> SessionInfo:
    return SessionInfo(agent="a", provider=ProviderInfo(kind="anthropic", model="m"), **kw)


def test_new_session_id_is_16_hex_chars() -> None:
    sid = new_session_id()
    assert len(sid) == 16 and int(sid, 16) >= 0
    assert SessionInfo().id != SessionInfo().id


async def test_save_then_load_round_trips_messages_and_info(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    saved = await store.save(info(), conversation())
    loaded_info, messages = await store.load(saved.id)
    assert messages == conversation()
    assert loaded_info == saved
    assert (saved.msg_count, saved.preview, saved.provider.kind) == (5, "hello", "anthropic")
    assert {p.name for p in (tmp_path / saved.id).iterdir()} >= {"meta.json", "messages.json"}


async def test_preview_is_last_user_text_cut_at_100_bytes(tmp_path: Path) -> None:
    msgs = [Message.text("user", Role.USER, "first"), Message.text("user", Role.USER, "ü" * 80)]
    saved = await SessionStore(tmp_path).save(info(), msgs)
    assert saved.preview == "ü" * 50
    assert len(saved.preview.encode()) <= 100


async def test_images_go_to_content_hashed_attachments(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    parts = [Text(text="see"), Image(data=PNG, media_type="image/png")]
    msgs = [Message(sender="user", role=Role.USER, parts=parts)]
    saved = await store.save(info(), msgs)
    attachments = list((tmp_path / saved.id / "attachments").iterdir())
    assert len(attachments) == 1 and attachments[0].suffix == ".png"
    assert PNG not in (tmp_path / saved.id / "messages.json").read_text()
    _, loaded = await store.load(saved.id)
    assert loaded == msgs


async def test_orphaned_attachments_are_removed_after_save(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    with_image = [Message(sender="user", role=Role.USER, parts=[Image(data=PNG, media_type="image/png")])]
    saved = await store.save(info(), with_image)
    await store.save(saved, [Message.text("user", Role.USER, "text only")])
    assert list((tmp_path / saved.id / "attachments").iterdir()) == []


async def test_saving_again_overwrites_the_same_record_and_keeps_created_at(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    created = datetime(2024, 1, 1, tzinfo=UTC)
    first = await store.save(info(created_at=created), conversation()[:2])
    second = await store.save(first, conversation())
    listed = await store.list()
    assert [s.id for s in listed] == [first.id]
    assert (listed[0].msg_count, listed[0].created_at) == (5, created)
    assert second.updated_at >= first.updated_at


async def test_list_is_newest_updated_first(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    old = await store.save(info(), conversation())
    new = await store.save(info(), conversation())
    await store.save(old, conversation())  # touching old makes it newest
    assert [s.id for s in await store.list()] == [old.id, new.id]


async def test_list_of_missing_dir_is_empty(tmp_path: Path) -> None:
    assert await SessionStore(tmp_path / "none").list() == []


async def test_delete_removes_session_and_is_idempotent(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    saved = await store.save(info(), conversation())
    await store.delete(saved.id)
    await store.delete(saved.id)
    assert await store.list() == []
    assert not (tmp_path / saved.id).exists()


async def test_load_missing_session_fails(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not found"):
        await SessionStore(tmp_path).load("0123456789abcdef")


async def test_corrupt_messages_file_names_the_file(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    saved = await store.save(info(), conversation())
    path = tmp_path / saved.id / "messages.json"
    path.write_text("[{not json")
    with pytest.raises(StoreError, match=re.escape(f"corrupt session file {path}")):
        await store.load(saved.id)


async def test_corrupt_meta_is_skipped_by_list_and_named_by_load(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    good = await store.save(info(), conversation())
    bad = await store.save(info(), conversation())
    (tmp_path / bad.id / "meta.json").write_text("{")
    assert [s.id for s in await store.list()] == [good.id]
    with pytest.raises(StoreError, match=r"meta\.json"):
        await store.load(bad.id)


async def test_invalid_session_id_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="invalid session id"):
        await SessionStore(tmp_path).load("../../etc")


async def test_no_temp_files_are_left_behind(tmp_path: Path) -> None:
    saved = await SessionStore(tmp_path).save(info(), conversation())
    assert not [p for p in (tmp_path / saved.id).iterdir() if p.name.endswith(".tmp")]


async def test_a_save_that_cannot_write_is_one_store_error_naming_the_state_dir_variable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StoreError, match=r"cannot save session .* \(set SHELLY_STATE_DIR to a writable directory\)"):
        await SessionStore(tmp_path / "file" / "sessions").save(info(), conversation())


async def test_a_session_id_with_a_trailing_newline_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="invalid session id"):
        await SessionStore(tmp_path).load("0123456789abcdef\n")
