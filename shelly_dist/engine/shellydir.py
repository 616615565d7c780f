"""The ``.shelly/`` directory: where each file lives, and how a new one is bootstrapped.

The layout is Shelly's (§1.10) so existing projects keep working: ``config.yaml``, every
``*.md`` (auto-loaded into prompts), ``skills/``, ``knowledge/``, and the git-ignored ``local/``
for runtime state (permissions, notes, reflections, sessions). The directory may be a read-only
mount (compose ``:ro``, a ConfigMap, ``ProtectSystem=strict``; DESIGN §3 rule 13), so runtime
state goes to the *state directory* :func:`state_dir` picks, and only ``shelly init`` writes here
(``.gitignore`` included). Bootstrapping never overwrites a
file the user has (files are opened with ``O_EXCL``) unless ``force`` is given. Templates ship as
package data under ``engine/templates/<name>/`` (``config.yaml`` whose first comment line is the
description, plus optional ``skills/`` and ``context.md``). All I/O here is blocking: call it from
the CLI or through ``asyncio.to_thread``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from shelly_dist.errors import UsageError

DEFAULT_TEMPLATE = "simple-assistant"
ENV_STATE_DIR = "SHELLY_STATE_DIR"
GITIGNORE = "local/\n"
CONTEXT_STUB = """\
# Project context

Describe the project here: what it does, how it is built and tested, and the conventions agents
should follow. Every .md file in .shelly/ is loaded into the agents' prompts; put longer
documents in .shelly/knowledge/ and let agents read them on demand.
"""


@dataclass(frozen=True)
class ShellyDir:
    """The paths of one ``.shelly/`` directory (nothing is created by building this).

    ``state`` is where runtime state goes (:func:`state_dir`); ``None`` means ``root/local``.
    """

    root: Path
    state: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))
        if self.state is not None:
            object.__setattr__(self, "state", Path(self.state))

    @property
    def project_root(self) -> Path:
        """The project the directory belongs to: the parent of ``.shelly``."""
        return self.root.resolve().parent

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def context(self) -> Path:
        return self.root / "context.md"

    @property
    def skills(self) -> Path:
        return self.root / "skills"

    @property
    def knowledge(self) -> Path:
        return self.root / "knowledge"

    @property
    def gitignore(self) -> Path:
        return self.root / ".gitignore"

    @property
    def local(self) -> Path:
        """Runtime state: the state directory when one was picked, else ``root/local``."""
        return self.state if self.state is not None else self.root / "local"

    @property
    def permissions(self) -> Path:
        return self.local / "permissions.json"

    @property
    def legacy_permissions(self) -> Path:
        return self.root / "permissions.json"

    @property
    def notes(self) -> Path:
        return self.local / "notes"

    @property
    def reflections(self) -> Path:
        return self.local / "reflections"

    @property
    def sessions(self) -> Path:
        return self.local / "sessions"

    @property
    def history(self) -> Path:
        return self.local / "history"

    @property
    def pricing(self) -> Path:
        return self.local / "pricing.yaml"

    def offload(self, agent: str) -> Path:
        """Offload storage of ``agent`` (outside ``local/``, as in Shelly)."""
        return self.root / "offload" / agent

    def exists(self) -> bool:
        return self.root.is_dir()


def _writable(path: Path) -> bool:
    """Whether files can be created in ``path``, or in its nearest existing ancestor.

    ``os.access`` reports a read-only mount (``EROFS``) as well as missing permissions, and
    writes nothing, so asking never changes the directory.
    """
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate.is_dir() and os.access(candidate, os.W_OK | os.X_OK)
    return False


def _user_state_home(env: Mapping[str, str]) -> Path | None:
    """``$XDG_STATE_HOME``, else ``~/.local/state``; ``None`` when no home can be found."""
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"])
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".local" / "state" if home and home != "~" else None


def state_dir(root: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Path:
    """Where the runtime state of the project whose ``.shelly`` is ``root`` goes.

    ``$SHELLY_STATE_DIR`` when set; else ``root/local`` when it can be written (Shelly's
    layout); else ``$XDG_STATE_HOME/shelly/<project>`` (``~/.local/state/shelly/<project>``),
    ``<project>`` being the directory name plus a hash of its absolute path, so two projects
    never share state. When no home can be found either, ``root/local`` is returned and the first
    write names the problem (and ``SHELLY_STATE_DIR``). Nothing is created here.
    """
    env = os.environ if env is None else env
    if env.get(ENV_STATE_DIR):
        return Path(env[ENV_STATE_DIR])
    local = Path(root) / "local"
    if _writable(local):
        return local
    home = _user_state_home(env)
    if home is None:
        return local
    project = Path(root).resolve().parent
    digest = hashlib.sha256(str(project).encode()).hexdigest()[:12]
    return home / "shelly" / f"{project.name or 'root'}-{digest}"


def _templates() -> Traversable:
    return resources.files("shelly_dist.engine").joinpath("templates")


def _template(name: str) -> Traversable:
    node = _templates().joinpath(name)
    if not node.joinpath("config.yaml").is_file():
        known = ", ".join(n for n, _ in list_templates())
        raise UsageError(f'init: unknown template "{name}" (available: {known})')
    return node


def list_templates() -> list[tuple[str, str]]:
    """Every bundled template as (name, description), sorted by name."""
    out = []
    for node in _templates().iterdir():
        cfg = node.joinpath("config.yaml")
        if node.is_dir() and cfg.is_file():
            first = cfg.read_text(encoding="utf-8").splitlines()[:1]
            desc = first[0].lstrip("#").strip() if first and first[0].startswith("#") else ""
            out.append((node.name, desc))
    return sorted(out)


def template_config(name: str = DEFAULT_TEMPLATE) -> str:
    """The ``config.yaml`` text of template ``name``."""
    return _template(name).joinpath("config.yaml").read_text(encoding="utf-8")


def _write(path: Path, content: str, force: bool, written: list[Path]) -> None:
    """Create ``path`` exclusively (or overwrite with ``force``); record it when written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "w" if force else "x", encoding="utf-8") as f:
            f.write(content)
    except FileExistsError:
        return
    written.append(path)


def _template_files(node: Traversable, prefix: Path) -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = []
    for child in node.iterdir():
        if child.is_dir():
            out += _template_files(child, prefix / child.name)
        elif child.is_file():
            out.append((prefix / child.name, child.read_text(encoding="utf-8")))
    return out


def template_skill_files(name: str) -> list[tuple[Path, str]]:
    """The shared skills (``templates/skills/<skill>/``) that template ``name``'s agents list,
    as (path under ``.shelly/``, text): Shelly's ``embedded_skills``, kept once for every
    template that uses them."""
    import yaml

    listed = {s for a in yaml.safe_load(template_config(name)).get("agents") or [] for s in a.get("skills") or []}
    shared = _templates().joinpath("skills")
    return [
        (Path("skills") / skill / rel, text)
        for skill in sorted(listed)
        if shared.joinpath(skill).is_dir()
        for rel, text in _template_files(shared.joinpath(skill), Path())
    ]


def bootstrap(
    shelly_dir: str | os.PathLike[str], template: str = DEFAULT_TEMPLATE, force: bool = False
) -> list[Path]:
    """Create a ``.shelly/`` from ``template``; return the files written.

    Existing files are kept unless ``force`` (then the template's files replace them). Creates
    ``skills/``, ``knowledge/``, ``local/sessions/``, ``.gitignore``, ``config.yaml``,
    ``context.md`` and the template's skills. An unknown template is a ``UsageError``.
    """
    node = _template(template)
    d = ShellyDir(Path(shelly_dir))
    for folder in (d.root, d.skills, d.knowledge, d.sessions):
        folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    _write(d.gitignore, GITIGNORE, force, written)
    files = dict(_template_files(node, Path()))
    files.update(template_skill_files(template))
    files.setdefault(Path("context.md"), CONTEXT_STUB)
    for rel, content in sorted(files.items()):
        _write(d.root / rel, content, force, written)
    return written


def migrate_permissions(shelly_dir: str | os.PathLike[str]) -> bool:
    """Move a legacy ``.shelly/permissions.json`` into ``local/``; True when it moved.

    Does nothing when the old file is missing or the new one exists.
    """
    d = ShellyDir(Path(shelly_dir))
    if not d.legacy_permissions.is_file() or d.permissions.exists():
        return False
    d.local.mkdir(parents=True, exist_ok=True)
    os.replace(d.legacy_permissions, d.permissions)
    return True

