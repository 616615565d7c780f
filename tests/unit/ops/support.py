"""Paths and lookups shared by the ops tests (the rendered kustomizations are cached per run)."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tests.unit.ops.kustomize import Doc, render

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "k8s"
TARGETS = ["base", "overlays/dev", "overlays/production", "overlays/managed-redis", "overlays/batch"]
"""Every kustomization a user applies; components are exercised through the overlays."""
EXAMPLE_ENV = {"ANTHROPIC_API_KEY": "sk-test", "OPENAI_API_KEY": "sk-test"}


@functools.cache
def deployable_k8s() -> Path:
    """A copy of ``k8s/`` with the Secret files a user creates before deploying (each
    ``secrets/*.env`` made from its ``.example``, empty values included); removed at exit."""
    tmp = Path(tempfile.mkdtemp(prefix="shelly-k8s-"))
    atexit.register(shutil.rmtree, tmp, True)
    tree = Path(shutil.copytree(K8S, tmp / "k8s"))
    for example in tree.rglob("*.env.example"):
        shutil.copyfile(example, example.with_suffix(""))
    return tree


@functools.cache
def rendered(target: str) -> tuple[Doc, ...]:
    return tuple(render(deployable_k8s() / target))


def find(docs: tuple[Doc, ...] | list[Doc], kind: str, name: str) -> Doc:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def container(doc: Doc, name: str) -> dict[str, Any]:
    return next(c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def example_config() -> Any:
    """The example project's config, loaded by the real loader."""
    from shelly_dist.engine.config import load_config

    return load_config(K8S / "base" / "shelly" / "config.yaml", env=EXAMPLE_ENV)
