"""Turn rendered Kubernetes manifests into what ``podman kube play`` (4.3) runs, for ``.ci/pods``.

``python .ci/kube_play.py RENDERED TEAM_CONFIG OUT_YAML SECRETS_DIR REDIS_DATA_DIR`` keeps the
worker Deployment as rendered (its securityContext, read-only root, ConfigMap mount, Secret env,
probes), turns the Redis StatefulSet's pod template into a Pod, and writes each Secret's data to
SECRETS_DIR/NAME.json for ``podman secret create``. Only what podman cannot run is changed, each
named where it is done; the objects podman does not run at all are listed on stdout.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import yaml

NOT_RUN = ("Service", "NetworkPolicy", "PodDisruptionBudget", "HorizontalPodAutoscaler", "ScaledObject",
           "TriggerAuthentication", "Namespace")
"""Kinds podman kube play ignores or refuses (still validated offline: tests/unit/ops/test_k8s.py)."""


def expand(container: dict[str, Any], secrets: dict[str, dict[str, str]]) -> None:
    """Kubernetes expands ``$(VAR)`` in an env value from the variables defined before it; podman
    4.3 does not: resolve them here (a secretKeyRef's value read from its Secret)."""
    known: dict[str, str] = {}
    for e in container.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            known[e["name"]] = base64.b64decode(secrets[ref["name"]][ref["key"]]).decode()
        elif "value" in e:
            for name, value in known.items():
                e["value"] = e["value"].replace(f"$({name})", value)
            known[e["name"]] = e["value"]


def redis_pod(statefulset: dict[str, Any], data_dir: str) -> dict[str, Any]:
    """The StatefulSet's pod as a Pod (podman 4.3 runs no StatefulSet)."""
    template = statefulset["spec"]["template"]
    spec = template["spec"]
    # The volumeClaimTemplate's stand-in: a host directory owned by Redis's user (podman applies
    # no fsGroup to an emptyDir).
    spec["volumes"] = [{"name": "data", "hostPath": {"path": data_dir, "type": "Directory"}}]
    for c in spec["containers"]:
        c.pop("ports", None)  # kube play would publish them on the host, whose 6379 may be taken
        # The Debian stand-in for redis:7.4-alpine (.ci/containers: no registry here) sets no PATH.
        c["env"].append({"name": "PATH", "value": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "redis", "labels": template["metadata"]["labels"]},
            "spec": spec}


def config_only(worker: dict[str, Any]) -> None:
    """podman 4.3 cannot mount a projected volume: mount its config.yaml ConfigMap alone."""
    for volume in worker["spec"]["template"]["spec"]["volumes"]:
        if "projected" in volume:
            volume["configMap"] = next(s["configMap"] for s in volume.pop("projected")["sources"]
                                       if any(i["key"] == "config.yaml" for i in s["configMap"].get("items", [])))


def main(rendered: str, team: str, out: str, secrets_dir: str, data_dir: str) -> None:
    docs = [d for d in yaml.safe_load_all(Path(rendered).read_text()) if d]
    secrets = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "Secret"}
    played: list[dict[str, Any]] = []
    skipped: list[str] = []
    for d in docs:
        kind, name = d["kind"], d["metadata"]["name"]
        d["metadata"].pop("namespace", None)
        for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            expand(c, secrets)
        if kind == "ConfigMap":
            if "config.yaml" in d.get("data", {}):
                d["data"]["config.yaml"] = Path(team).read_text()  # a scripted team: no API keys needed
            played.append(d)
        elif kind == "Secret":  # a secretKeyRef reads a podman secret holding {key: base64 value}
            (Path(secrets_dir) / f"{name}.json").write_text(json.dumps(d.get("data", {})))
        elif kind == "Deployment" and name == "shelly-worker":
            config_only(d)
            played.append(d)
        elif kind == "StatefulSet" and name == "redis":
            played.insert(0, redis_pod(d, data_dir))
        else:
            skipped.append(f"{kind}/{name}")
    Path(out).write_text(yaml.safe_dump_all(played, sort_keys=False))
    print(" ".join(skipped))


if __name__ == "__main__":
    main(*sys.argv[1:6])
