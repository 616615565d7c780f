"""Permissions: containment, symlinks, headless refusal, the store file, approvals and coalescing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from shelly_dist.errors import ToolError
from shelly_dist.tools.permissions import InteractiveApprover, Permissions, path_within, using_roots
from tests.unit.tools.conftest import ScriptedApprover


def test_containment_is_separator_aware() -> None:
    assert path_within("/tmp/a/b", "/tmp/a")
    assert path_within("/tmp/a", "/tmp/a")
    assert not path_within("/tmpfoo", "/tmp")


async def test_project_root_is_allowed_by_default(perms: Permissions, project: Path) -> None:
    assert await perms.check_path("fs_read", "sub/file.txt") == project / "sub" / "file.txt"


async def test_headless_refuses_path_outside_allowed_directories(perms: Permissions, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"^fs_read: path outside allowed directories: .*outside"):
        await perms.check_path("fs_read", str(tmp_path / "outside" / "x.txt"))


async def test_dotdot_traversal_is_refused(perms: Permissions) -> None:
    with pytest.raises(ToolError, match="path outside allowed directories"):
        await perms.check_path("fs_read", "../secret.txt")


async def test_symlink_leaving_allowed_directory_is_refused(perms: Permissions, project: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("k")
    (project / "link").symlink_to(secret)
    with pytest.raises(ToolError, match="path outside allowed directories"):
        await perms.check_path("fs_read", "link/key")


async def test_config_directory_approves_its_children(project: Path, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    perms = Permissions(root=project, fs_directories=[extra])
    await perms.check_path("fs_read", str(extra / "deep" / "f.txt"))


def test_store_reads_legacy_flat_array_as_directories(project: Path, tmp_path: Path) -> None:
    store = tmp_path / "permissions.json"
    store.write_text(json.dumps([str(tmp_path / "legacy")]))
    perms = Permissions.load(store, root=project)
    assert perms.is_dir_approved(tmp_path / "legacy" / "x")


def test_store_reads_object_form_merged_with_config(project: Path, tmp_path: Path) -> None:
    store = tmp_path / "permissions.json"
    store.write_text(json.dumps({"trusted_commands": ["ls"], "trusted_domains": ["Example.com"]}))
    perms = Permissions.load(store, root=project, trusted_commands=["make"])
    assert perms.is_command_trusted("ls") and perms.is_command_trusted("make")
    assert perms.is_domain_trusted("example.com")


async def test_interactive_directory_approval_is_persisted(project: Path, tmp_path: Path) -> None:
    store = tmp_path / "local" / "permissions.json"
    approver = ScriptedApprover("yes")
    perms = Permissions(root=project, store_path=store, approver=approver)
    await perms.check_path("fs_read", str(tmp_path / "other" / "f.txt"))
    assert approver.questions == [f"Allow filesystem access to {tmp_path / 'other'}?"]
    assert json.loads(store.read_text())["fs_directories"] == [str(tmp_path / "other")]
    assert Permissions.load(store, root=project).is_dir_approved(tmp_path / "other" / "sub")


async def test_untrusted_command_is_denied_headless(perms: Permissions) -> None:
    with pytest.raises(ToolError, match=r"^exec_run: permission denied for rm$"):
        await perms.check_command("exec_run", "rm")


async def test_trust_answer_persists_command(project: Path, tmp_path: Path) -> None:
    store = tmp_path / "permissions.json"
    perms = Permissions(root=project, store_path=store, approver=ScriptedApprover("trust"))
    await perms.check_command("exec_run", "make")
    await perms.check_command("exec_run", "make")  # no second prompt: the scripted list is empty
    assert json.loads(store.read_text())["trusted_commands"] == ["make"]


class HeldApprover:
    """Answers "yes" to every question, but only once released, so callers pile up meanwhile."""

    interactive = True

    def __init__(self) -> None:
        self.release, self.asked = asyncio.Event(), asyncio.Event()
        self.questions: list[str] = []

    async def ask(self, question: str, options: object) -> str:
        self.questions.append(question)
        self.asked.set()
        await self.release.wait()
        return "yes"

    async def answer_all(self, calls: list[asyncio.Task[object]]) -> None:
        await asyncio.wait_for(self.asked.wait(), 5)
        self.release.set()
        await asyncio.gather(*calls)


async def test_concurrent_directory_prompts_coalesce_into_one(project: Path, tmp_path: Path) -> None:
    approver = HeldApprover()
    perms = Permissions(root=project, approver=approver)
    await approver.answer_all(
        [asyncio.create_task(perms.check_path("fs_read", str(tmp_path / "d" / f"{i}"))) for i in range(3)]
    )
    assert len(approver.questions) == 1


async def test_one_time_yes_is_not_shared_with_waiters(project: Path) -> None:
    approver = HeldApprover()
    perms = Permissions(root=project, approver=approver)
    await approver.answer_all([asyncio.create_task(perms.check_command("exec_run", "make")) for _ in range(2)])
    assert len(approver.questions) == 2


async def test_mcp_roots_replace_approval(perms: Permissions, project: Path, tmp_path: Path) -> None:
    with using_roots([tmp_path / "root"]):
        await perms.check_path("fs_read", str(tmp_path / "root" / "f"))
        with pytest.raises(ToolError, match="path outside MCP roots"):
            await perms.check_path("fs_read", "inside-project.txt")


async def test_empty_mcp_roots_deny_everything(perms: Permissions) -> None:
    with using_roots([]), pytest.raises(ToolError, match="path outside MCP roots"):
        await perms.check_path("fs_read", "f.txt")


async def test_change_confirmation_denied_is_an_error(project: Path) -> None:
    perms = Permissions(root=project, approver=ScriptedApprover("no"))
    with pytest.raises(ToolError, match="rejected"):
        await perms.confirm_change("fs_write", project / "f", "-a\n+b\n")


async def test_trusted_session_skips_change_confirmation(project: Path) -> None:
    approver = ScriptedApprover("trust this session")
    perms = Permissions(root=project, approver=approver)
    await perms.confirm_change("fs_write", project / "f", "diff 1")
    await perms.confirm_change("fs_write", project / "f", "diff 2")
    assert len(approver.questions) == 1


async def test_interactive_approver_normalises_typed_answers(project: Path) -> None:
    async def typed(question: str, options: object) -> str:
        return " Trust\n"

    perms = Permissions(root=project, approver=InteractiveApprover(typed))
    await perms.check_domain("http_fetch", "Example.com")
    assert perms.is_domain_trusted("example.com")
