"""A small kustomize renderer for the features k8s/ uses, so manifests validate with no binary.

Why our own: kustomize is not a Python package and the test machines may lack kubectl. This
renders exactly the subset our kustomizations use and nothing more: ``resources`` (files and
directories), ``components``, ``configMapGenerator``/``secretGenerator`` (``files``,
``literals`` and ``envs``, with a content-hash name suffix and the references to it rewritten
unless ``options.disableNameSuffixHash``; ``options.labels``), ``patches``
(strategic merge by kind + name, including ``$patch: delete``; lists merged by name or
mountPath), ``namespace``, ``labels`` (metadata only), ``images``. Anything else in a
kustomization is an error, so a new feature cannot be silently ignored. Where kubectl is present,
``test_renderer_matches_kubectl_kustomize`` checks this renderer against the real kustomize.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

Doc = dict[str, Any]

SUPPORTED_KEYS = {
    "apiVersion",
    "kind",
    "resources",
    "components",
    "configMapGenerator",
    "secretGenerator",
    "patches",
    "namespace",
    "labels",
    "images",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"}
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
}
GENERATED = "__generated_name__"


def load_docs(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _load_kustomization(root: Path) -> Doc:
    data: Doc = yaml.safe_load((root / "kustomization.yaml").read_text())
    unknown = set(data) - SUPPORTED_KEYS
    if unknown:
        raise ValueError(f"kustomize: {root}: unsupported keys {sorted(unknown)}")
    return data


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """``patch`` merged into ``base`` the way kustomize does for the list/map shapes we use."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = strategic_merge(out[k], v, k)
            else:
                out[k] = copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        # As kustomize does: the patch's items first, in patch order, then the untouched ones.
        # (This order matters: Kubernetes expands $(VAR) only from env entries listed earlier.)
        merge_key = MERGE_KEYS[key]
        by_key = {b.get(merge_key): b for b in base}
        patched = [strategic_merge(by_key[i.get(merge_key)], i, "") if i.get(merge_key) in by_key else i for i in patch]
        touched = {i.get(merge_key) for i in patch}
        return copy.deepcopy(patched + [b for b in base if b.get(merge_key) not in touched])
    return copy.deepcopy(patch)


def _generate(root: Path, spec: Doc, kind: str) -> Doc:
    data: dict[str, str] = {}
    for entry in spec.get("files", []):
        key, _, rel = entry.partition("=") if "=" in entry else (Path(entry).name, "", entry)
        data[key] = (root / rel).read_text()
    for literal in spec.get("literals", []):
        key, _, value = literal.partition("=")
        data[key] = value
    for env_file in spec.get("envs", []):  # KEY=VALUE lines; blank lines and # comments skipped
        for line in (root / env_file).read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                key, _, value = line.partition("=")
                data[key.strip()] = value
    options = spec.get("options", {})
    doc: Doc = {"apiVersion": "v1", "kind": kind, "metadata": {"name": spec["name"]}}
    if not options.get("disableNameSuffixHash"):
        doc[GENERATED] = spec["name"]
    if options.get("labels"):
        doc["metadata"]["labels"] = dict(options["labels"])
    if kind == "Secret":
        doc["type"] = spec.get("type", "Opaque")
        doc["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    else:
        doc["data"] = data
    return doc


def _same_object(doc: Doc, patch: Doc) -> bool:
    return doc.get("kind") == patch.get("kind") and doc["metadata"]["name"] == patch["metadata"]["name"]


def _apply_patch(docs: list[Doc], patch: Doc) -> list[Doc]:
    if not any(_same_object(d, patch) for d in docs):
        raise ValueError(f"kustomize: patch target not found: {patch.get('kind')}/{patch['metadata']['name']}")
    if patch.get("$patch") == "delete":
        return [d for d in docs if not _same_object(d, patch)]
    return [strategic_merge(d, patch) if _same_object(d, patch) else d for d in docs]


def _pod_specs(doc: Doc) -> list[Doc]:
    spec = doc.get("spec", {})
    if doc["kind"] == "Pod":
        return [spec]
    template = spec.get("template", {}).get("spec")
    return [template] if template else []


def _apply_images(docs: list[Doc], images: list[Doc]) -> None:
    for pod in (p for d in docs for p in _pod_specs(d)):
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            name, _, tag = container["image"].partition(":")
            for image in images:
                if image["name"] == name:
                    container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"


def build(root: Path, docs: list[Doc] | None = None) -> list[Doc]:
    """The resources of kustomization ``root`` (a Component transforms ``docs`` it is given)."""
    k = _load_kustomization(root)
    out: list[Doc] = list(docs or [])
    for res in k.get("resources", []):
        target = root / res
        out += build(target) if target.is_dir() else load_docs(target)
    for comp in k.get("components", []):
        out = build(root / comp, out)
    for spec in k.get("configMapGenerator", []):
        out.append(_generate(root, spec, "ConfigMap"))
    for spec in k.get("secretGenerator", []):
        out.append(_generate(root, spec, "Secret"))
    for entry in k.get("patches", []):
        text = (root / entry["path"]).read_text() if "path" in entry else entry["patch"]
        for patch in (p for p in yaml.safe_load_all(text) if p):
            out = _apply_patch(out, patch)
    if "namespace" in k:
        for doc in out:
            if doc["kind"] == "Namespace":
                doc["metadata"]["name"] = k["namespace"]
            elif doc["kind"] not in CLUSTER_SCOPED:
                doc["metadata"]["namespace"] = k["namespace"]
    for label_set in k.get("labels", []):
        if label_set.get("includeSelectors") or label_set.get("includeTemplates"):
            raise ValueError(f"kustomize: {root}: only metadata labels are supported")
        for doc in out:
            doc["metadata"].setdefault("labels", {}).update(label_set["pairs"])
    _apply_images(out, k.get("images", []))
    return out


def _suffix(doc: Doc) -> str:
    body = json.dumps({"kind": doc["kind"], "data": doc.get("data", {})}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:10]


def _rename_refs(node: Any, names: dict[str, str]) -> Any:
    """Rewrite every reference field that names a generated ConfigMap or Secret."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in ("configMap", "secret", "configMapRef", "secretRef", "configMapKeyRef", "secretKeyRef"):
                v = dict(v)
                for field in ("name", "secretName"):
                    if v.get(field) in names:
                        v[field] = names[v[field]]
            out[k] = _rename_refs(v, names)
        return out
    if isinstance(node, list):
        return [_rename_refs(v, names) for v in node]
    return node


def render(root: Path) -> list[Doc]:
    """Build ``root`` and finalise it: hash-suffixed generated names, references rewritten."""
    docs = build(root)
    names: dict[str, str] = {}
    for doc in docs:
        base = doc.pop(GENERATED, None)
        if base is not None:
            names[base] = doc["metadata"]["name"] = f"{base}-{_suffix(doc)}"
    return [_rename_refs(d, names) for d in docs]


def generated_bases(root: Path) -> set[str]:
    """Names of the generated objects before their hash suffix (to compare renderings)."""
    return {d[GENERATED] for d in build(root) if GENERATED in d}
