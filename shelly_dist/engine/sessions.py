"""Saved conversations: ``<state dir>/sessions/<id>/{meta.json, messages.json, attachments/}``.

The state directory is ``.shelly/local`` unless it is read-only or ``SHELLY_STATE_DIR`` says
otherwise (:func:`~shelly_dist.engine.shellydir.state_dir`); with Redis configured, the engine uses
:class:`~shelly_dist.engine.redis_sessions.RedisSessionStore` instead, which has the same API.

The layout and JSON shapes are Shelly's (§1.14), so sessions stay listable without reading their
messages: ``list`` reads only ``meta.json``. Every file is written to a temporary name and
renamed (``os.replace``), and ``meta.json`` is written last, so a crash mid-save leaves the
previous session intact. Base64 images and documents are moved out of ``messages.json`` into
content-hashed files under ``attachments/`` (the part keeps ``"attachment": <file>`` instead of
``data``); files no longer referenced are removed after each save. The public methods are async
and run their file I/O in a thread; saves to one store are serialised by a lock that is never
held across an await.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import errno
import hashlib
import json
import logging
import mimetypes
import os
import re
import secrets
import shutil
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from shelly_dist.chats import Message, Role
from shelly_dist.engine.shellydir import ENV_STATE_DIR
from shelly_dist.errors import StoreError, UsageError

logger = logging.getLogger(__name__)

META = "meta.json"
MESSAGES = "messages.json"
ATTACHMENTS = "attachments"
PREVIEW_BYTES = 100
_ID = re.compile(r"^[0-9a-f]{16}$")


def new_session_id() -> str:
    """A fresh session id: 16 lowercase hex characters."""
    return secrets.token_hex(8)


def _now() -> datetime:
    return datetime.now(UTC)


class ProviderInfo(BaseModel):
    kind: str = ""
    model: str = ""


class SessionInfo(BaseModel):
    """A session's metadata, as stored in ``meta.json``."""

    id: str = Field(default_factory=new_session_id)
    agent: str = ""
    provider: ProviderInfo = Field(default_factory=ProviderInfo)
    created_at: datetime = Field(default_factory=_now)
    updated_at: datetime = Field(default_factory=_now)
    preview: str = ""
    """The last user text, cut to at most 100 UTF-8 bytes."""
    msg_count: int = 0


def preview_of(messages: list[Message]) -> str:
    """The text of the last user message with text, cut at 100 bytes on a character boundary."""
    for m in reversed(messages):
        text = m.text_content() if m.role == Role.USER else ""
        if text:
            return text.encode()[:PREVIEW_BYTES].decode(errors="ignore")
    return ""


def check_session_id(session_id: str) -> str:
    """``session_id`` when it is 16 lowercase hex characters, else a ``UsageError``."""
    if not _ID.fullmatch(session_id):
        raise UsageError(f"sessions: invalid session id {session_id!r} (want 16 hex characters)")
    return session_id


def now_info(info: SessionInfo, messages: list[Message]) -> SessionInfo:
    """``info`` as saved with ``messages``: ``msg_count``, ``preview`` and ``updated_at`` recomputed."""
    return info.model_copy(update={"msg_count": len(messages), "preview": preview_of(messages), "updated_at": _now()})


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _extract(part: dict[str, Any], folder: Path, used: set[str]) -> None:
    """Move a part's base64 ``data`` into a content-hashed attachment file (in place)."""
    try:
        raw = base64.b64decode(part["data"], validate=True)
    except (binascii.Error, ValueError):
        return  # not base64: leave it inline
    ext = mimetypes.guess_extension(part.get("media_type") or "") or ".bin"
    name = hashlib.sha256(raw).hexdigest()[:32] + ext
    target = folder / name
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        _atomic_write(target, raw)
    used.add(name)
    part["data"] = ""
    part["attachment"] = name


class SessionStore:
    """Sessions under one directory (usually ``ShellyDir.sessions``)."""

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        self.dir = Path(dir)
        self._lock = threading.Lock()

    def _path(self, session_id: str) -> Path:
        return self.dir / check_session_id(session_id)

    async def save(self, info: SessionInfo, messages: list[Message]) -> SessionInfo:
        """Write ``messages`` and the metadata; return the stored info.

        ``msg_count``, ``preview`` and ``updated_at`` are recomputed; ``id``, ``agent``,
        ``provider`` and ``created_at`` are kept. Saving again overwrites the same record.
        """
        stored = now_info(info, messages)
        try:
            await asyncio.to_thread(self._save, stored, messages)
        except OSError as exc:
            raise self._unwritable(stored.id, exc) from exc
        return stored

    async def prepare(self, session_id: str) -> None:
        """Create the sessions directory, or fail now with the error :meth:`save` would raise, so a
        run whose conversation cannot be kept fails before it spends anything."""

        def check() -> None:
            self.dir.mkdir(parents=True, exist_ok=True)
            if not os.access(self.dir, os.W_OK | os.X_OK):
                raise PermissionError(errno.EACCES, "Permission denied", str(self.dir))

        try:
            await asyncio.to_thread(check)
        except OSError as exc:
            raise self._unwritable(session_id, exc) from exc

    def _unwritable(self, session_id: str, exc: OSError) -> StoreError:
        reason = exc.strerror or type(exc).__name__
        return StoreError(
            f"sessions: cannot save session {session_id} in {self.dir}: {reason} "
            f"(set {ENV_STATE_DIR} to a writable directory)",
            key=session_id,
        )

    def _save(self, info: SessionInfo, messages: list[Message]) -> None:
        folder = self._path(info.id)
        attachments = folder / ATTACHMENTS
        with self._lock:
            folder.mkdir(parents=True, exist_ok=True)
            used: set[str] = set()
            dumped = [m.model_dump(mode="json") for m in messages]
            for msg in dumped:
                for part in msg["parts"]:
                    if part["kind"] in ("image", "document") and part.get("data"):
                        _extract(part, attachments, used)
            _atomic_write(folder / MESSAGES, json.dumps(dumped, ensure_ascii=False).encode())
            _atomic_write(folder / META, info.model_dump_json(indent=2).encode())
            if attachments.is_dir():
                for f in attachments.iterdir():
                    if f.name not in used:
                        f.unlink(missing_ok=True)

    async def load(self, session_id: str) -> tuple[SessionInfo, list[Message]]:
        """The session's metadata and messages, attachments inlined again.

        A missing session or a corrupt file is a ``StoreError`` naming the file.
        """
        return await asyncio.to_thread(self._load, session_id)

    def _load(self, session_id: str) -> tuple[SessionInfo, list[Message]]:
        folder = self._path(session_id)
        if not (folder / META).is_file():
            raise StoreError(f"sessions: session {session_id} not found in {self.dir}", key=session_id)
        info = self._read_meta(folder / META)
        path = folder / MESSAGES
        try:
            raw = json.loads(path.read_bytes())
            for msg in raw:
                for part in msg.get("parts", []):
                    name = part.pop("attachment", None) if isinstance(part, dict) else None
                    if name:
                        data = (folder / ATTACHMENTS / Path(name).name).read_bytes()
                        part["data"] = base64.b64encode(data).decode()
            messages = [Message.model_validate(m) for m in raw]
        except (OSError, ValueError, TypeError, AttributeError, ValidationError) as exc:
            raise StoreError(f"sessions: corrupt session file {path}: {exc}", key=session_id) from exc
        return info, messages

    @staticmethod
    def _read_meta(path: Path) -> SessionInfo:
        try:
            return SessionInfo.model_validate_json(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise StoreError(f"sessions: corrupt session file {path}: {exc}", key=path.parent.name) from exc

    async def list(self) -> list[SessionInfo]:
        """Metadata of every session, most recently updated first; corrupt ones are skipped."""
        return await asyncio.to_thread(self._list)

    def _list(self) -> list[SessionInfo]:
        if not self.dir.is_dir():
            return []
        out = []
        for meta in self.dir.glob(f"*/{META}"):
            try:
                out.append(self._read_meta(meta))
            except StoreError as exc:
                logger.warning("%s", exc)
        return sorted(out, key=lambda i: i.updated_at, reverse=True)

    async def delete(self, session_id: str) -> None:
        """Remove a session and its attachments. Deleting a missing session is a no-op."""
        folder = self._path(session_id)

        def remove() -> None:
            with self._lock:
                shutil.rmtree(folder, ignore_errors=True)

        await asyncio.to_thread(remove)
