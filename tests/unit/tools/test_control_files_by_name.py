"""``shelly`` looks for ``.env``, ``.shelly/`` and ``shelly.yaml`` in the directory it is started
in, which may be any directory of the project (issue 38): those names are control files of the
filesystem tools in every directory, headless, with a fake secret planted in the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools.builtin import filesystem_toolbox
from shelly_dist.tools.permissions import Permissions
from tests.unit.tools.conftest import call

FAKE_SECRET = "sk-ant-FAKE-control-names-0123456789"


@pytest.fixture(autouse=True)
def planted_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_SECRET)


@pytest.mark.parametrize("path", ["docs/.env", "docs/shelly.yaml", "docs/.shelly/config.yaml",
                                  "a/b/.SHELLY/skills/x/SKILL.md"])
async def test_what_shelly_reads_in_the_directory_it_starts_in_is_refused_in_every_directory(
        project: Path, path: str) -> None:
    """``shelly`` started in ``docs/`` loads ``docs/.env`` and ``docs/.shelly/config.yaml`` (or
    ``docs/shelly.yaml``): planted there, they would choose what it runs."""
    fs = filesystem_toolbox(Permissions(root=project), root=project)
    with pytest.raises(ToolError, match=r"^fs_write: refused: .* is a control file \(a (\.env|legacy config|\.shelly "
                                        r"directory).*in the directory it is started in\)"):
        await call(fs, "fs_write", path=path, content="SHELLY_CONFIG=evil.yaml\n")
    assert not (project / path).exists()


async def test_a_file_merely_named_like_a_control_file_elsewhere_is_writable(project: Path) -> None:
    fs = filesystem_toolbox(Permissions(root=project), root=project)
    for path in ("docs/env.md", "docs/shelly.yaml.example", "docs/my.shelly/notes.md", "docs/CLAUDE.md"):
        assert await call(fs, "fs_write", path=path, content="x\n") == "ok"
