"""Packages that re-export lazily (``shelly_dist._lazy``) still export every name they list."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import shelly_dist
from shelly_dist._lazy import type_checking_imports

ROOT = Path(shelly_dist.__file__).parent
LAZY = sorted(
    ".".join(("shelly_dist", *p.parent.relative_to(ROOT).parts))
    for p in ROOT.rglob("__init__.py")
    if "lazy_exports(__name__, __file__)" in p.read_text(encoding="utf-8")
)


def test_the_heavy_packages_re_export_lazily() -> None:
    assert {"shelly_dist", "shelly_dist.engine", "shelly_dist.agent"} <= set(LAZY)


@pytest.mark.parametrize("package", LAZY)
def test_every_listed_name_resolves_to_what_the_type_checking_import_names(package: str) -> None:
    module = importlib.import_module(package)
    table = type_checking_imports(Path(module.__file__ or "").read_text(encoding="utf-8"))
    assert set(module.__all__) - {"__version__"} <= set(table)
    for name in module.__all__:
        value = getattr(module, name)
        where, _, attribute = table.get(name, ":").partition(":")
        if where:
            source = importlib.import_module(where)
            assert value is getattr(source, attribute, None) or value is sys.modules.get(f"{where}.{attribute}")


def test_an_unknown_name_is_an_attribute_error_naming_the_package() -> None:
    with pytest.raises(AttributeError, match=r"'shelly_dist\.engine' has no attribute 'Nope'"):
        importlib.import_module("shelly_dist.engine").Nope  # noqa: B018


def test_importing_the_package_imports_none_of_its_modules() -> None:
    code = "import sys, shelly_dist; print(sorted(m for m in sys.modules if m.startswith('shelly_dist.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "['shelly_dist._lazy']"
