"""DESIGN.md §1: each layer imports only from layers below it (the same layer included)."""

from __future__ import annotations

import ast
from pathlib import Path

import shelly_dist

LAYERS = {
    "observability": 0, "chats": 1, "models": 2, "providers": 3, "tools": 4, "skills": 5, "extensions": 5,
    "agent": 6,
    "redisio": 7, "state": 7, "tasks": 7, "workspace": 7, "runtime": 8, "engine": 9, "cli": 10, "console": 10,
}


def imported_layers(path: Path) -> set[tuple[str, int]]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "shelly_dist" and len(parts) > 1 and parts[1] in LAYERS:
                out.add((parts[1], node.lineno))
    return out


def test_no_layer_imports_a_layer_above_it():
    root = Path(shelly_dist.__file__).parent
    upward = []
    for path in root.rglob("*.py"):
        layer = path.relative_to(root).parts[0]
        if layer not in LAYERS:
            continue
        upward += [f"{path.relative_to(root)}:{line} imports {target}"
                   for target, line in imported_layers(path) if LAYERS[target] > LAYERS[layer]]
    assert upward == []


def test_the_check_sees_an_upward_import(tmp_path: Path):
    bad = tmp_path / "bad.py"
    bad.write_text("from shelly_dist.engine import Engine\n")
    assert imported_layers(bad) == {("engine", 1)}


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The package's modules ``path`` imports: at module level, inside a function (a lazy import
    is a circle put off, not removed) or under ``if TYPE_CHECKING:`` (two modules that name each
    other's types are one idea cut in two). ``from pkg import mod`` counts as ``pkg.mod``."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if full in known else node.module)
    return out & known


def import_graph(package: str) -> dict[str, set[str]]:
    """Who imports whom among the modules of ``package`` (a dotted name inside shelly_dist)."""
    root = Path(shelly_dist.__file__).parent
    paths = {module_name(root, p): p for p in root.rglob("*.py")}
    inside = {m: p for m, p in paths.items() if m == package or m.startswith(package + ".")}
    return {m: imports_of(p, set(inside)) - {m} for m, p in inside.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected parts of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while (w := stack.pop()) != v:
                part.append(w)
            if part:
                found.append(sorted([v, *part]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_agent_package_has_no_import_circle():
    """The agent layer reads bottom-up — records, prompt, options, ``Agent``, the registry, the
    delegate tools, ``Run``, the child's life — and the runtime that runs children lives in
    ``runtime/`` (DESIGN §6). The circle this replaced: agent, delegation, handoff, inline,
    options, orchestration, prompt, registry, run."""
    assert circles(import_graph("shelly_dist.agent")) == []


def test_the_check_sees_an_import_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_journal_and_the_lease_are_not_one_module_cut_in_two():
    """The lease writes a run through the store below both (``runtime/celery/journal/store.py``), not
    through private journal methods: the journal hands leases out, the lease never names it."""
    graph = import_graph("shelly_dist.runtime.celery")
    journal, lease = "shelly_dist.runtime.celery.journal.runs", "shelly_dist.runtime.celery.journal.lease"
    assert [c for c in circles(graph) if journal in c and lease in c] == []


CELERY = "shelly_dist.runtime.celery"
FLOORS = {"names": 0, "settings": 0, "journal": 1, "broker": 2, "fast_send": 2, "redis_broker": 2,
          "children": 3, "worker": 4, "client": 4}
"""``runtime/celery/``'s rooms and the floor each stands on (its package docstring): a module
imports only its own room and lower floors; ``worker`` and ``client`` share a floor and never
import each other."""


def room_of(module: str) -> str:
    """The room (or top-level module) of a module of ``runtime/celery``; ``""`` for the package root."""
    return module.removeprefix(CELERY).lstrip(".").split(".")[0]


def floor_breaches(graph: dict[str, set[str]]) -> list[str]:
    """Every import in ``graph`` (modules of ``runtime/celery``) that reaches a room above its own
    floor, or across the worker/client floor, or the package root (whose ``__init__`` imports the
    client and the worker: a module that imports it, even lazily inside a function, closes a circle)."""
    out = []
    for module, targets in sorted(graph.items()):
        room = room_of(module)
        if not room:
            continue
        for target in sorted(targets):
            other = room_of(target)
            if not other:
                out.append(f"{module} imports the package root")
            elif FLOORS[other] > FLOORS[room] or {room, other} == {"worker", "client"}:
                out.append(f"{module} ({room}) imports {target} ({other})")
    return out


def test_every_module_of_runtime_celery_is_in_a_room():
    assert {room_of(m) for m in import_graph(CELERY)} - {""} == set(FLOORS)


def test_the_rooms_of_runtime_celery_import_only_their_floor_and_below():
    """journal → broker → children → worker | client (``runtime/celery/__init__.py``)."""
    assert floor_breaches(import_graph(CELERY)) == []


def test_the_floor_check_sees_an_upward_a_sideways_and_a_root_import():
    graph = {
        f"{CELERY}.journal.lease": {f"{CELERY}.children.join"},
        f"{CELERY}.worker.tasks": {f"{CELERY}.client.coordinator"},
        f"{CELERY}.children.spawns": {CELERY},
        f"{CELERY}.client.coordinator": {f"{CELERY}.children.join", f"{CELERY}.journal"},
    }
    assert floor_breaches(graph) == [
        f"{CELERY}.children.spawns imports the package root",
        f"{CELERY}.journal.lease (journal) imports {CELERY}.children.join (children)",
        f"{CELERY}.worker.tasks (worker) imports {CELERY}.client.coordinator (client)",
    ]


def test_a_lazy_import_of_the_package_root_is_seen(tmp_path: Path):
    lazy = tmp_path / "lazy.py"
    lazy.write_text(f"def f():\n    from {CELERY} import CeleryRuntime\n")
    assert imports_of(lazy, {CELERY, f"{CELERY}.client"}) == {CELERY}


def test_the_runtime_package_has_no_import_circle():
    """Three circles this replaced: app ↔ control ↔ wakes, executor ↔ spawns (for one task name),
    lease ↔ renewer ↔ store."""
    assert circles(import_graph("shelly_dist.runtime")) == []


def test_the_engine_does_not_import_the_worker_side():
    """The runtime's settings live beside the config models (``engine/config_runtime.py``): the
    engine opening a pool runtime no longer imports ``engine/worker.py``, which imports the engine
    to build it on a worker (the engine ↔ session ↔ team ↔ worker circle)."""
    assert [c for c in circles(import_graph("shelly_dist.engine")) if "shelly_dist.engine.worker" in c] == []


def test_no_package_has_an_import_circle():
    """Not even one of types only: the engine's decisions, session and team name what they use of
    it as protocols (``DecisionsHost``, ``SessionHost``, ``TeamHost``), and the stand-in model
    server and its batch APIs share the wire formats (``testing/wire.py``) instead of each other."""
    assert circles(import_graph("shelly_dist")) == []
