"""Files attached to a message (``shelly run --attach``, a batch item's ``attachments``, the chat's
``/attach``): read once, where the user is, into the part each becomes.

- an image (PNG, JPEG, GIF, WebP, known by its first bytes) becomes an :class:`Image` part with
  its base64 data, at most :data:`IMAGE_LIMIT` bytes (Anthropic's per-image limit, the strictest
  of the vendors');
- a PDF becomes a :class:`Document` part, at most :data:`DOCUMENT_LIMIT` bytes;
- a UTF-8 text file becomes a :class:`Text` part holding ``<attachment name="…">`` and the file,
  at most :data:`TEXT_LIMIT` bytes: every provider takes text;
- anything else, a missing file or one over its limit is a ``UsageError`` naming the file.

The bytes travel in the message from then on (journaled on the pool by content hash, once for every
run that carries them: ``runtime/celery/journal/blobs.py``; saved content-hashed
with the session), so a worker never reads the user's file, which it may not have.
"""

from __future__ import annotations

import base64
from pathlib import Path

from shelly_dist.chats.parts import Document, Image, Part, Text
from shelly_dist.errors import UsageError

IMAGE_LIMIT = 5 * 1024 * 1024
DOCUMENT_LIMIT = 32 * 1024 * 1024
TEXT_LIMIT = 1024 * 1024

_IMAGES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def media_type(head: bytes) -> str | None:
    """The media type the file's first bytes say (images and PDF), or ``None``."""
    for magic, kind in _IMAGES:
        if head.startswith(magic):
            return kind
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head.startswith(b"%PDF-"):
        return "application/pdf"
    return None


def _too_big(path: Path, size: int, limit: int, what: str) -> UsageError:
    return UsageError(f"attach: {path}: {what} of {size:,} bytes is over the limit of {limit:,} bytes")


def attachment(path: str | Path) -> Part:
    """The part the file at ``path`` becomes (see the module docstring)."""
    file = Path(path)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"attach: {file}: no such file") from None
    except OSError as exc:
        raise UsageError(f"attach: {file}: {exc.strerror or exc}") from None
    kind = media_type(data[:16])
    if kind is not None and kind.startswith("image/"):
        if len(data) > IMAGE_LIMIT:
            raise _too_big(file, len(data), IMAGE_LIMIT, "an image")
        return Image(data=base64.b64encode(data).decode(), media_type=kind)
    if kind == "application/pdf":
        if len(data) > DOCUMENT_LIMIT:
            raise _too_big(file, len(data), DOCUMENT_LIMIT, "a PDF")
        return Document(path=file.name, data=base64.b64encode(data).decode(), media_type=kind)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"attach: {file}: not an image (PNG, JPEG, GIF, WebP), a PDF or UTF-8 text") from None
    if len(data) > TEXT_LIMIT:
        raise _too_big(file, len(data), TEXT_LIMIT, "a text file")
    return Text(text=f'<attachment name="{file.name}">\n{text}\n</attachment>')


def describe(part: Part) -> str:
    """One line naming an attached part (what the chat and ``shelly run`` show)."""
    if isinstance(part, Image):
        return f"image ({part.media_type}, {len(part.data) * 3 // 4:,} bytes)"
    if isinstance(part, Document):
        return f"{part.path} ({part.media_type}, {len(part.data) * 3 // 4:,} bytes)"
    if isinstance(part, Text):
        name = part.text.split('"', 2)[1] if part.text.startswith("<attachment") else "text"
        return f"{name} (text, {len(part.text):,} characters)"
    return part.kind
