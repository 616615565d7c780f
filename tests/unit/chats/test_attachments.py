"""Attached files become the part their content says, within the stated limits."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from shelly_dist.chats import Document, Image, Text
from shelly_dist.chats.attachments import IMAGE_LIMIT, TEXT_LIMIT, attachment, describe
from shelly_dist.errors import UsageError


@pytest.mark.parametrize(("head", "kind"), [
    (b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff\xe0", "image/jpeg"), (b"GIF89a", "image/gif"),
    (b"RIFF\0\0\0\0WEBPVP8 ", "image/webp")])
def test_an_image_is_known_by_its_first_bytes_whatever_its_name(tmp_path: Path, head: bytes, kind: str) -> None:
    path = tmp_path / "no-extension"
    path.write_bytes(head + b"rest")
    part = attachment(path)
    assert isinstance(part, Image) and part.media_type == kind
    assert base64.b64decode(part.data) == head + b"rest"


def test_a_pdf_is_a_document_named_after_its_file(tmp_path: Path) -> None:
    (tmp_path / "report.pdf").write_bytes(b"%PDF-1.7\n")
    part = attachment(tmp_path / "report.pdf")
    assert isinstance(part, Document) and (part.path, part.media_type) == ("report.pdf", "application/pdf")


def test_a_text_file_is_text_every_provider_takes(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# Notes\nblue")
    part = attachment(tmp_path / "notes.md")
    assert isinstance(part, Text) and part.text == '<attachment name="notes.md">\n# Notes\nblue\n</attachment>'
    assert describe(part) == f"notes.md (text, {len(part.text)} characters)"


def test_a_file_over_its_limit_is_refused_with_both_sizes(tmp_path: Path) -> None:
    (tmp_path / "big.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * IMAGE_LIMIT)
    with pytest.raises(UsageError, match=r"big.png: an image of 5,242,888 bytes is over the limit of 5,242,880"):
        attachment(tmp_path / "big.png")
    (tmp_path / "big.txt").write_text("a" * (TEXT_LIMIT + 1))
    with pytest.raises(UsageError, match="a text file of 1,048,577 bytes is over the limit"):
        attachment(tmp_path / "big.txt")


def test_binary_that_is_no_image_nor_pdf_is_refused_saying_what_is_taken(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(UsageError, match=r"blob.bin: not an image \(PNG, JPEG, GIF, WebP\), a PDF or UTF-8 text"):
        attachment(tmp_path / "blob.bin")
