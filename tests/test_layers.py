"""DESIGN.md §1: each layer imports only from layers below it (the same layer included)."""

from __future__ import annotations

import ast
from pathlib import Path

import shelly_dist

LAYERS = {
    "chats": 1, "models": 2, "providers": 3, "tools": 4, "skills": 5, "agent": 6,
    "state": 7, "tasks": 7, "workspace": 7, "runtime": 8, "engine": 9, "cli": 10,
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
