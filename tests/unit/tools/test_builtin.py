"""builtin_toolbox: the engine's lookup by config name."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelly_dist.errors import ConfigError
from shelly_dist.tools.builtin import BUILTIN_NAMES, builtin_toolbox
from shelly_dist.tools.permissions import Permissions

GROUPS = {"filesystem": {"fs"}, "exec": {"exec"}, "search": {"fs"}, "git": {"git"}, "http": {"web"}, "notes": {"notes"}}


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_each_builtin_has_its_name_and_group(name: str, perms: Permissions, project: Path) -> None:
    tb = builtin_toolbox(name, perms, root=project)
    assert tb.name == name and len(tb) > 0
    assert {t.group for t in tb} == GROUPS[name]


def test_unknown_builtin_is_a_config_error(perms: Permissions, project: Path) -> None:
    with pytest.raises(ConfigError, match="unknown built-in toolbox 'shell'"):
        builtin_toolbox("shell", perms, root=project)


async def test_notes_default_to_the_shelly_local_directory(perms: Permissions, project: Path) -> None:
    tb = builtin_toolbox("notes", perms, root=project)
    tool = tb.get("write_note")
    assert tool is not None
    await tool.handler('{"name": "n", "content": "c"}')
    assert (project / ".shelly" / "local" / "notes" / "n.md").read_text() == "c"
