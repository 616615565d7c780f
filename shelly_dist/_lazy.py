"""A package's re-exports, imported when first used (STYLE lesson 21: start fast).

A package ``__init__`` that re-exports its public names with plain imports makes every
``import shelly_dist.<anything>`` pay for the whole package: ``shelly state get`` would import the
providers, aiohttp, every tool and Celery to read one key. So the re-exporting ``__init__`` keeps
its imports as they were, but under ``if TYPE_CHECKING:`` (type checkers, readers and the layer
test in ``tests/test_layers.py`` still see them), and ends with::

    __getattr__, __dir__ = lazy_exports(__name__, __file__)

:func:`lazy_exports` reads those imports from the module's own source (the way scientific
Python's ``lazy_loader.attach_stub`` reads a ``.pyi``) and returns a module ``__getattr__``
(PEP 562) that imports a name's module the first time the name is asked for. ``from shelly_dist
import Agent`` keeps working; the import happens at that line rather than at ``import shelly_dist``.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def type_checking_imports(source: str) -> dict[str, str]:
    """``{exported name: module it comes from}`` for every ``from M import N [as A]`` inside the
    module-level ``if TYPE_CHECKING:`` blocks of ``source``; a bare ``from P import sub`` of a
    submodule maps to ``P.sub`` resolved at use."""
    table: dict[str, str] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if isinstance(statement, ast.ImportFrom) and statement.module and statement.level == 0:
                for alias in statement.names:
                    table[alias.asname or alias.name] = f"{statement.module}:{alias.name}"
    return table


def lazy_exports(package: str, path: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (whose ``__init__`` is at ``path``),
    resolving its ``TYPE_CHECKING`` re-exports on first use and caching each in the module."""
    table = type_checking_imports(Path(path).read_text(encoding="utf-8"))
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, _, attribute = where.partition(":")
        if module_name == package:  # ``from pkg import submodule`` inside pkg's own __init__
            value = importlib.import_module(f"{package}.{attribute}")
        else:
            module = importlib.import_module(module_name)
            try:
                value = getattr(module, attribute)
            except AttributeError:  # ``from pkg import submodule``
                value = importlib.import_module(f"{module_name}.{attribute}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:  # the pattern's own two names are not the package's
        return sorted((set(namespace) | set(table)) - {"TYPE_CHECKING", "lazy_exports"})

    return __getattr__, __dir__
