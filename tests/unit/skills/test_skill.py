"""Loading SKILL.md folders: names, descriptions and Shelly's frontmatter edge cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelly_dist.errors import ConfigError
from shelly_dist.skills import load_skill_dir, load_skills, parse_skill


def write_skill(root: Path, folder: str, text: str | bytes) -> Path:
    d = root / folder
    d.mkdir(parents=True)
    if isinstance(text, bytes):
        (d / "SKILL.md").write_bytes(text)
    else:
        (d / "SKILL.md").write_text(text)
    return d


def test_without_frontmatter_name_is_folder_and_content_is_whole_file(tmp_path: Path) -> None:
    d = write_skill(tmp_path, "deploy", "Just do it.\n")
    skill = load_skill_dir(d)
    assert (skill.name, skill.description, skill.content) == ("deploy", "", "Just do it.\n")
    assert not skill.has_description


def test_frontmatter_name_overrides_folder_and_description_is_set(tmp_path: Path) -> None:
    d = write_skill(tmp_path, "folder", "---\nname: review\ndescription: Reviews code\n---\nBody\n")
    skill = load_skill_dir(d)
    assert (skill.name, skill.description, skill.content) == ("review", "Reviews code", "Body\n")
    assert skill.has_description


def test_description_only_keeps_folder_name(tmp_path: Path) -> None:
    skill = load_skill_dir(write_skill(tmp_path, "lint", "---\ndescription: Lints\n---\nBody"))
    assert (skill.name, skill.description) == ("lint", "Lints")


def test_dir_is_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_skill(tmp_path, "s", "x")
    monkeypatch.chdir(tmp_path)
    assert load_skill_dir("s").dir == str((tmp_path / "s").resolve())


def test_no_closing_delimiter_makes_whole_text_the_body() -> None:
    text = "---\nname: other\nBody without end"
    skill = parse_skill(text, folder_name="folder")
    assert (skill.name, skill.content) == ("folder", text)


def test_closing_delimiter_at_end_of_file_gives_empty_body() -> None:
    skill = parse_skill("---\nname: x\ndescription: d\n---", folder_name="f")
    assert (skill.name, skill.description, skill.content) == ("x", "d", "")


def test_empty_body_is_accepted() -> None:
    assert parse_skill("---\nname: x\n---\n", folder_name="f").content == ""


def test_invalid_yaml_is_invalid_frontmatter_error() -> None:
    with pytest.raises(ConfigError, match="invalid frontmatter"):
        parse_skill("---\nname: [unclosed\n---\nBody", folder_name="f")


def test_non_mapping_frontmatter_is_invalid_frontmatter_error() -> None:
    with pytest.raises(ConfigError, match="invalid frontmatter"):
        parse_skill("---\n- a\n- b\n---\nBody", folder_name="f")


def test_crlf_is_normalised(tmp_path: Path) -> None:
    d = write_skill(tmp_path, "c", b"---\r\nname: crlf\r\n---\r\nBody with CRLF.\r\n")
    skill = load_skill_dir(d)
    assert (skill.name, skill.content) == ("crlf", "Body with CRLF.\n")


def test_load_skills_skips_folders_without_skill_md_and_ignores_extra_files(tmp_path: Path) -> None:
    write_skill(tmp_path, "b", "B")
    write_skill(tmp_path, "a", "A")
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("not a skill")
    (tmp_path / "a" / "extra.md").write_text("supplementary")
    assert [s.name for s in load_skills(tmp_path)] == ["a", "b"]


def test_load_skills_on_missing_dir_errors() -> None:
    with pytest.raises(ConfigError, match="skill: load dir"):
        load_skills("/nonexistent/skills-dir")
