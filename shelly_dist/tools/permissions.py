"""Who may touch what: directory approvals, trusted commands and trusted domains.

Workers cannot ask anyone, so the default :class:`HeadlessApprover` refuses everything that config
(``permissions: {fs_directories, trusted_commands, trusted_domains}``) and the persisted store
(``.shelly/local/permissions.json``) have not already granted; the project root is always allowed.
An interactive ``shelly run`` passes an :class:`InteractiveApprover` and gets Shelly's prompts:

- a directory approval covers every descendant, matched separator-aware (``/tmp`` never covers
  ``/tmpfoo``); the checked directory is the target's parent (or the target if it is a directory),
  and a target whose symlink-resolved path lies elsewhere needs that directory approved too, so
  neither ``..`` nor a symlink can leave an allowed directory;
- commands (and ``git``) and domains are trusted by exact name: "trust" persists, a one-time "yes"
  allows one call;
- concurrent prompts for the same key collapse into one; a one-time "yes" is not shared, so the
  other waiters are asked again;
- MCP roots set with :func:`using_roots` replace directory approval entirely (``None`` roots:
  unconstrained; an empty list denies everything).

Only grants made through the approver are written back to the store, in the object form; the
legacy flat array of directories is still read.

Whatever is granted, tools never change the control plane (DESIGN §3 rule 16):
:meth:`Permissions.check_real` refuses a change to ``<root>/.shelly`` (config, skills, the state
directory when inside), to every ``protected`` path (the state directory, the permission store
wherever they live) and to anything inside a directory named ``.git``, so an agent cannot grant
itself a command or plant an MCP server, a hook or ``core.fsmonitor`` for the next run to execute.
The other control files (``.env``, the config wherever it came from, the modules of ``python:``,
the workflow file, prompt files: :mod:`~shelly_dist.tools.control_files`) are refused headless
too, and on a terminal need the person's "yes" to a question naming the file a control file
(:meth:`Permissions.check_control`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Protocol, runtime_checkable

from shelly_dist.errors import ConfigError, ToolError
from shelly_dist.tools import control_files

logger = logging.getLogger(__name__)

_roots: ContextVar[tuple[str, ...] | None] = ContextVar("shelly_mcp_roots", default=None)


@contextmanager
def using_roots(roots: Iterable[str | Path] | None) -> Iterator[None]:
    """Constrain filesystem access to ``roots`` (MCP roots) for the body of the ``with``."""
    value = None if roots is None else tuple(_norm(r) for r in roots)
    token = _roots.set(value)
    try:
        yield
    finally:
        _roots.reset(token)


def _norm(path: str | Path) -> str:
    return os.path.normpath(os.path.abspath(os.fspath(path)))


def path_within(path: str | Path, directory: str | Path) -> bool:
    """Whether ``path`` is ``directory`` or below it, comparing whole path segments."""
    p, d = _norm(path), _norm(directory)
    return p == d or p.startswith(d.rstrip(os.sep) + os.sep)


@runtime_checkable
class Approver(Protocol):
    """Decides what nobody granted in advance. ``interactive`` is False when no one can answer."""

    interactive: bool

    async def ask(self, question: str, options: Sequence[str]) -> str:
        """Return one of ``options`` (anything else counts as "no")."""
        ...


class HeadlessApprover:
    """The worker's approver: nobody is there, so every question is answered "no"."""

    interactive = False

    async def ask(self, question: str, options: Sequence[str]) -> str:
        return "no"


AskFn = Callable[[str, Sequence[str]], Awaitable[str]]


class InteractiveApprover:
    """Asks a person through ``ask_fn`` (a terminal prompt, a UI); used by ``shelly run`` on a tty."""

    interactive = True

    def __init__(self, ask_fn: AskFn) -> None:
        self._ask_fn = ask_fn

    async def ask(self, question: str, options: Sequence[str]) -> str:
        return (await self._ask_fn(question, options)).strip().lower()

    @classmethod
    def terminal(cls) -> InteractiveApprover:
        """Prompt on stderr and read stdin, in a thread so the event loop keeps running."""

        def blocking(question: str, options: Sequence[str]) -> str:
            import sys

            sys.stderr.write(f"{question} [{'/'.join(options)}] ")
            sys.stderr.flush()
            return sys.stdin.readline()

        async def ask_fn(question: str, options: Sequence[str]) -> str:
            return await asyncio.to_thread(blocking, question, options)

        return cls(ask_fn)


_KINDS = ("fs_directories", "trusted_commands", "trusted_domains")


def _read_store(path: Path) -> dict[str, list[str]]:
    """The persisted grants; a missing file is empty, a legacy array is a list of directories."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {k: [] for k in _KINDS}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"permissions: cannot read {path}: {exc}", field="permissions") from exc
    if isinstance(raw, list):
        raw = {"fs_directories": raw}
    if not isinstance(raw, dict):
        raise ConfigError(f"permissions: {path}: expected an object or an array", field="permissions")
    return {k: [str(v) for v in raw.get(k) or []] for k in _KINDS}


class Permissions:
    """The permission store and its gates; one per process, shared by every built-in toolbox.

    Gates are coroutines that return normally when allowed and raise :class:`ToolError` naming
    the tool when refused. They never block the event loop: prompts and file writes are awaited.
    """

    def __init__(
        self,
        *,
        root: str | Path,
        fs_directories: Iterable[str | Path] = (),
        trusted_commands: Iterable[str] = (),
        trusted_domains: Iterable[str] = (),
        exec_env: Iterable[str] = (),
        store_path: str | Path | None = None,
        approver: Approver | None = None,
        persisted: dict[str, list[str]] | None = None,
        protected: Iterable[str | Path] = (),
        writable: Iterable[str | Path] = (),
        controls: Iterable[str | Path | tuple[str | Path, str]] = (),
    ) -> None:
        self.root = Path(_norm(root))
        self.exec_env: tuple[str, ...] = tuple(dict.fromkeys(exec_env))
        """Environment variables passed on to the programs tools start (``permissions.exec_env``),
        besides PATH, HOME and LANG; nothing else of this process's environment reaches them."""
        self.store_path = Path(store_path) if store_path is not None else None
        self.protected: tuple[str, ...] = _protected_forms(
            [self.root / ".shelly", self.root / ".git", *protected, *([self.store_path] if self.store_path else [])],
            self.root,
        )
        """Paths no tool may change or contain in a change (see :meth:`check_real`), in their lexical
        and symlink-resolved forms."""
        self.control_files: dict[str, str] = {
            form: what
            for path, what in [*control_files.project_files(self.root), *(_described(p) for p in controls)]
            for form in _protected_forms([path], self.root)
        }
        """The project's control files besides :attr:`protected` (``.env``, ``shelly.yaml``, the
        prompt files, ``controls``) → what each is; with those :mod:`~shelly_dist.tools.control_files`
        registers for the process, a tool may change one only on a person's explicit yes."""
        self.writable: tuple[str, ...] = _protected_forms(list(writable), self.root)
        """Carve-outs inside :attr:`protected` that tools may change after all (``shelly index``'s
        ``.shelly/context.md`` and ``.shelly/knowledge/``); never a ``.git`` directory or the store."""
        self.approver: Approver = approver or HeadlessApprover()
        self.session_trusted = False
        """Set when the user answered "trust this session" to a change confirmation."""
        saved = persisted or {k: [] for k in _KINDS}
        self._saved = {k: list(dict.fromkeys(saved.get(k, []))) for k in _KINDS}
        self._dirs: list[str] = []
        for d in [self.root, *fs_directories, *self._saved["fs_directories"]]:
            self._add_dir(d)
        self._commands = set(trusted_commands) | set(self._saved["trusted_commands"])
        self._domains = {d.lower() for d in trusted_domains} | {d.lower() for d in self._saved["trusted_domains"]}
        self._pending: dict[tuple[str, str], asyncio.Future[str]] = {}

    @classmethod
    def load(
        cls,
        store_path: str | Path,
        *,
        root: str | Path,
        fs_directories: Iterable[str | Path] = (),
        trusted_commands: Iterable[str] = (),
        trusted_domains: Iterable[str] = (),
        exec_env: Iterable[str] = (),
        approver: Approver | None = None,
        protected: Iterable[str | Path] = (),
        writable: Iterable[str | Path] = (),
        controls: Iterable[str | Path | tuple[str | Path, str]] = (),
    ) -> Permissions:
        """Read ``store_path`` (blocking; call at start-up) and merge it with the config lists."""
        return cls(
            protected=protected,
            writable=writable,
            controls=controls,
            root=root,
            fs_directories=fs_directories,
            trusted_commands=trusted_commands,
            trusted_domains=trusted_domains,
            exec_env=exec_env,
            store_path=store_path,
            approver=approver,
            persisted=_read_store(Path(store_path)),
        )

    # --- queries ---

    def _add_dir(self, directory: str | Path) -> None:
        # Keep both the lexical and the symlink-resolved form, so a root reached through a
        # symlink (macOS /tmp) matches paths written either way.
        p = Path(directory)
        if not p.is_absolute():
            p = self.root / p
        for form in (_norm(p), os.path.realpath(p)):
            if form not in self._dirs:
                self._dirs.append(form)

    def allowed_directories(self) -> list[str]:
        return list(self._dirs)

    def is_dir_approved(self, directory: str | Path) -> bool:
        return any(path_within(directory, d) for d in self._dirs)

    def is_command_trusted(self, command: str) -> bool:
        return command in self._commands

    def is_domain_trusted(self, domain: str) -> bool:
        return domain.lower() in self._domains

    def resolve(self, raw: str) -> Path:
        """``raw`` made absolute against the project root and normalised (``..`` folded)."""
        return Path(_norm(self.root / raw if not os.path.isabs(raw) else raw))

    # --- gates ---

    async def check_path(self, tool: str, raw: str) -> Path:
        """Allow access to ``raw`` or raise; returns the absolute (lexical) path to operate on."""
        path = self.resolve(raw)
        real = Path(await asyncio.to_thread(os.path.realpath, path))
        for target in dict.fromkeys((path, real)):
            await self._check_dir(tool, await asyncio.to_thread(_gated_dir, target), path)
        return path

    async def check_real(self, tool: str, raw: str, *, change: bool, tree: bool = False, follow: bool = True) -> Path:
        """Allow access to ``raw`` or raise; returns its symlink-resolved path, which is what the
        caller must operate on (with a walk that follows no symlink, so a link swapped in after
        this check is refused rather than followed).

        ``change`` (write, move, delete, mkdir) also refuses the control plane, whatever the
        approvals say: see :meth:`protection`; ``tree`` (delete, a move's source) also refuses a
        directory that holds a protected path. ``follow=False`` (delete, move, a copy's source)
        resolves the parent only, so a symlink is acted on itself, not its target.
        """
        path = self.resolve(raw)
        if follow:
            real = Path(await asyncio.to_thread(os.path.realpath, path))
        else:
            real = Path(await asyncio.to_thread(os.path.realpath, path.parent)) / path.name
        if change:
            for form in dict.fromkeys((path, real)):
                if reason := self.protection(form, contains=tree):
                    raise ToolError(f"{tool}: refused: {raw} {reason}", tool=tool)
            await self.check_control(tool, raw, path, real, contains=tree)
        for target in dict.fromkeys((path, real)):
            await self._check_dir(tool, await asyncio.to_thread(_gated_dir, target), path)
        return real

    def control_file(self, path: str | Path, *, contains: bool = False) -> str:
        """Why ``path`` is a control file ("" when it is not): it is, or is inside, one of the
        project's control files or one this process registered (:mod:`~shelly_dist.tools.control_files`),
        or (``contains``) it holds one. Compared case-insensitively, as :meth:`protection`."""
        p = _norm(path).casefold()
        for guarded, what in [*self.control_files.items(), *control_files.registered().items()]:
            g = guarded.casefold()
            if p == g:
                return f"is a control file ({what})"
            if path_within(p, g):
                return f"is inside {guarded}, a control file ({what})"
            if contains and path_within(g, p):
                return f"contains {guarded}, a control file ({what})"
        return ""

    async def check_control(self, tool: str, raw: str, *paths: str | Path, contains: bool = False) -> None:
        """Allow a change to ``raw`` (at ``paths``, its lexical and resolved forms) or raise when it
        is a control file (:meth:`control_file`): refused when nobody can answer; on a terminal,
        only the person's explicit "yes" to a question naming it a control file lets it through
        (never a "trust this session", which is not about this file)."""
        reason = next((r for p in dict.fromkeys(paths) if (r := self.control_file(p, contains=contains))), "")
        if not reason:
            return
        why = f"{raw} {reason}: shelly reads it to decide what to run or whom to trust"
        if not self.approver.interactive:
            raise ToolError(f"{tool}: refused: {why}, so tools may not change it (off limits headless)", tool=tool)
        answer = (await self.approver.ask(f"{why}. Let {tool} change it?", ("yes", "no"))).strip().lower()
        if answer != "yes":
            raise ToolError(f"{tool}: refused: {why}; the user did not allow the change", tool=tool)

    def protection(self, path: str | Path, *, contains: bool = False) -> str:
        """Why no tool may change ``path`` ("" when it may): it is, or is inside, a protected
        path or a ``.git`` directory, or (``contains``, for a delete or move of a directory) it
        holds a protected path. Compared case-insensitively, so ``.GIT`` or ``.Shelly`` on a
        case-insensitive file system (macOS, Windows shares) is no way around."""
        p = _norm(path).casefold()
        if ".git" in Path(p).parts:
            return "is inside a .git directory (repository internals are off limits to tools)"
        store = self.store_path is not None and path_within(p, _norm(self.store_path).casefold())
        if not store and any(path_within(p, w.casefold()) for w in self.writable):
            return ""
        off_limits = "a control file (the configuration and permission store are off limits to tools)"
        for guarded in self.protected:
            if path_within(p, guarded.casefold()):
                return f"is inside {guarded}, {off_limits}"
            if contains and path_within(guarded.casefold(), p):
                return f"contains {guarded}, {off_limits}"
        return ""

    async def _check_dir(self, tool: str, directory: str, shown: Path) -> None:
        roots = _roots.get()
        if roots is not None:
            if not any(path_within(directory, r) for r in roots):
                raise ToolError(f"{tool}: path outside MCP roots: {shown}", tool=tool)
            return
        if self.is_dir_approved(directory):
            return
        answer = await self._decide(
            ("dir", directory),
            f"Allow filesystem access to {directory}?",
            ("yes", "no"),
            granted=lambda: self.is_dir_approved(directory),
        )
        if answer == "granted":
            return
        if answer != "yes":
            allowed = ", ".join(self._dirs[:6])
            raise ToolError(
                f"{tool}: path outside allowed directories: {shown} (allowed: {allowed}; "
                "add the directory to permissions.fs_directories)",
                tool=tool,
            )
        self._add_dir(directory)
        await self._persist("fs_directories", directory)

    async def check_command(self, tool: str, command: str, *, shown: str | None = None) -> None:
        """Allow running ``command`` (exact program name) or raise ``<tool>: permission denied``."""
        await self._check_trust(tool, "trusted_commands", command, f"Allow running {shown or command}?")

    async def check_domain(self, tool: str, domain: str) -> None:
        """Allow a request to ``domain`` (exact host name) or raise ``<tool>: permission denied``."""
        await self._check_trust(tool, "trusted_domains", domain.lower(), f"Allow HTTP requests to {domain}?")

    async def _check_trust(self, tool: str, kind: str, key: str, question: str) -> None:
        trusted = self._commands if kind == "trusted_commands" else self._domains
        if key in trusted:
            return
        answer = await self._decide((kind, key), question, ("yes", "trust", "no"), granted=lambda: key in trusted)
        if answer in ("granted", "yes"):
            return
        if answer != "trust":
            raise ToolError(f"{tool}: permission denied for {key}", tool=tool)
        trusted.add(key)
        await self._persist(kind, key)

    async def confirm_change(self, tool: str, path: Path, diff: str) -> None:
        """Ask before a mutating filesystem op, unless nobody can answer or the session is trusted.

        Headless, the directory approval already decided; interactive, the user sees the diff.
        """
        if not diff or not self.approver.interactive or self.session_trusted:
            return
        answer = await self.approver.ask(f"Apply changes to {path}?\n\n{diff}", ("yes", "no", "trust this session"))
        if answer == "trust this session":
            self.session_trusted = True
        elif answer != "yes":
            raise ToolError(f"{tool}: changes to {path} were rejected by the user", tool=tool)

    async def _decide(
        self, key: tuple[str, str], question: str, options: Sequence[str], *, granted: Callable[[], bool]
    ) -> str:
        """One prompt per key at a time; waiters share its answer unless it was a one-time "yes".

        Returns "granted" when another prompt granted the key while this one waited.
        """
        while True:
            if granted():
                return "granted"
            pending = self._pending.get(key)
            if pending is None:
                break
            answer = await asyncio.shield(pending)
            if answer != "yes" or key[0] == "dir":
                return answer if not granted() else "granted"
            # A one-time "yes" for a command or domain belonged to that call: ask again.
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            answer = (await self.approver.ask(question, options)).strip().lower()
        except BaseException:
            answer = "no"
            raise
        finally:
            del self._pending[key]
            future.set_result(answer)
        return answer

    async def _persist(self, kind: str, value: str) -> None:
        if value in self._saved[kind]:
            return
        self._saved[kind].append(value)
        if self.store_path is None:
            return
        snapshot = {k: list(v) for k, v in self._saved.items()}
        try:
            await asyncio.to_thread(_write_store, self.store_path, snapshot)
        except OSError as exc:  # the grant holds for this process; only remembering it failed
            logger.warning("permissions: cannot save the grant in %s: %s (set SHELLY_STATE_DIR to a writable "
                           "directory)", self.store_path, exc.strerror or exc)
            return
        logger.info("permissions: persisted %s %s to %s", kind, value, self.store_path)


def _protected_forms(paths: Iterable[str | Path], root: Path) -> tuple[str, ...]:
    """Each path made absolute against ``root``, in its lexical and symlink-resolved forms."""
    forms: list[str] = []
    for p in paths:
        absolute = Path(p) if Path(p).is_absolute() else root / p
        for form in (_norm(absolute), os.path.realpath(absolute)):
            if form not in forms:
                forms.append(form)
    return tuple(forms)


def _described(entry: str | Path | tuple[str | Path, str]) -> tuple[str | Path, str]:
    """A ``controls`` entry as (path, what it is)."""
    return entry if isinstance(entry, tuple) else (entry, "a file shelly reads at start")


def _gated_dir(target: Path) -> str:
    """The directory whose approval covers ``target``: itself if a directory, else its parent."""
    return str(target) if target.is_dir() else str(target.parent)


def _write_store(path: Path, data: dict[str, list[str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
