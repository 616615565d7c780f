"""Every Kubernetes manifest, base and rendered overlays, validated offline against the schemas."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.unit.ops.kustomize import generated_bases
from tests.unit.ops.support import EXAMPLE_ENV, K8S, TARGETS, container, deployable_k8s, find, rendered

K8S_VERSION = "1.30.0"
"""The oldest Kubernetes minor we support; its schema is the strictest about new fields."""
KEDA_SCHEMA = json.loads((Path(__file__).parent / "schemas" / "keda.json").read_text())
HEARTBEAT = ["python", "-m", "shelly_dist.runtime.heartbeat"]


@pytest.mark.parametrize("target", TARGETS)
def test_rendered_manifests_are_valid_kubernetes(target: str) -> None:
    for doc in rendered(target):
        if doc["apiVersion"].startswith("keda.sh/"):
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("target", TARGETS)
def test_keda_objects_match_the_vendored_crd_schema(target: str) -> None:
    for doc in rendered(target):
        if doc["apiVersion"].startswith("keda.sh/"):
            jsonschema.validate(doc, {**KEDA_SCHEMA, "$ref": f"#/$defs/{doc['kind']}"})


def test_keda_schema_rejects_a_scaledobject_without_triggers() -> None:
    doc = find(rendered("overlays/production"), "ScaledObject", "shelly-worker")
    broken = {**doc, "spec": {k: v for k, v in doc["spec"].items() if k != "triggers"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, {**KEDA_SCHEMA, "$ref": "#/$defs/ScaledObject"})


def test_strict_validation_rejects_a_misspelt_field() -> None:
    doc = find(rendered("base"), "Deployment", "shelly-worker")
    broken = {**doc, "spec": {**doc["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def _canonical(docs: list[dict], bases: set[str]) -> dict[tuple[str, str], object]:
    """Documents keyed by kind/name, with generated names' hash suffixes removed."""
    suffix = re.compile("^(" + "|".join(map(re.escape, bases)) + r")-[a-z0-9]{10}$")

    def walk(node: object) -> object:
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return suffix.sub(r"\1", node) if isinstance(node, str) else node

    return {(d["kind"], suffix.sub(r"\1", d["metadata"]["name"])): walk(d) for d in docs}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: cannot cross-check the renderer")
@pytest.mark.parametrize("target", TARGETS)
def test_renderer_matches_kubectl_kustomize(target: str) -> None:
    out = subprocess.run(["kubectl", "kustomize", str(deployable_k8s() / target)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    theirs = [d for d in yaml.safe_load_all(out.stdout) if d]
    bases = generated_bases(deployable_k8s() / target)
    assert _canonical(list(rendered(target)), bases) == _canonical(theirs, bases)


def test_every_manifest_file_is_part_of_a_rendered_kustomization() -> None:
    used: set[Path] = set()

    def walk(root: Path) -> None:
        k = yaml.safe_load((root / "kustomization.yaml").read_text())
        used.add(root / "kustomization.yaml")
        for entry in k.get("resources", []) + k.get("components", []):
            target = (root / entry).resolve()
            walk(target) if target.is_dir() else used.add(target)
        used.update((root / p["path"]).resolve() for p in k.get("patches", []) if "path" in p)

    for target in TARGETS:
        walk((K8S / target).resolve())
    manifests = {p.resolve() for p in K8S.rglob("*.yaml") if "shelly" not in p.relative_to(K8S).parts[1:2]}
    assert manifests - {u.resolve() for u in used} == set()


@pytest.mark.parametrize("target", TARGETS)
def test_at_most_one_autoscaler_per_overlay(target: str) -> None:
    kinds = [d["kind"] for d in rendered(target)]
    assert kinds.count("ScaledObject") + kinds.count("HorizontalPodAutoscaler") <= 1


@pytest.mark.parametrize("target", TARGETS)
def test_env_references_only_variables_defined_earlier(target: str) -> None:
    """Kubernetes expands $(VAR) only from entries listed before it; kustomize patches reorder env."""
    for doc in rendered(target):
        for pod in [doc["spec"]["template"]["spec"]] if "template" in doc.get("spec", {}) else []:
            for c in pod["containers"]:
                seen: set[str] = set()
                for entry in c.get("env", []):
                    for var in re.findall(r"\$\((\w+)\)", entry.get("value", "")):
                        where = f"{target}: {doc['metadata']['name']}/{c['name']}: {entry['name']}"
                        assert var in seen, f"{where} uses $({var}) before it is defined"
                    seen.add(entry["name"])
                args_vars = {v for a in c.get("args", []) + c.get("command", []) for v in re.findall(r"\$\((\w+)\)", a)}
                assert args_vars <= seen


@pytest.mark.parametrize("target", TARGETS)
def test_worker_probes_exec_the_heartbeat_module(target: str) -> None:
    worker = container(find(rendered(target), "Deployment", "shelly-worker"), "worker")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert worker[probe]["exec"]["command"][:3] == HEARTBEAT


def test_worker_probe_command_passes_against_a_live_heartbeat(tmp_path: Path) -> None:
    from shelly_dist.runtime.heartbeat import Heartbeat

    worker = container(find(rendered("base"), "Deployment", "shelly-worker"), "worker")
    command = worker["livenessProbe"]["exec"]["command"]
    path = tmp_path / "hb"
    command = [sys.executable, *command[1:]]
    command[command.index("--file") + 1] = str(path)
    assert subprocess.run(command, capture_output=True, timeout=60).returncode == 1
    with Heartbeat(path, interval=5):
        assert subprocess.run(command, capture_output=True, timeout=60).returncode == 0


def test_worker_runs_as_non_root_with_a_read_only_root() -> None:
    pod = find(rendered("base"), "Deployment", "shelly-worker")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    worker = container({"spec": {"template": {"spec": pod}}}, "worker")
    assert worker["securityContext"]["readOnlyRootFilesystem"] is True
    assert worker["securityContext"]["allowPrivilegeEscalation"] is False


def test_worker_has_a_prestop_hook_and_a_pdb() -> None:
    docs = rendered("base")
    assert "preStop" in container(find(docs, "Deployment", "shelly-worker"), "worker")["lifecycle"]
    assert find(docs, "PodDisruptionBudget", "shelly-worker")["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize("target", ["base", "overlays/production", "overlays/dev"])
def test_in_cluster_redis_is_persistent_and_never_evicts(target: str) -> None:
    redis = find(rendered(target), "StatefulSet", "redis")
    args = " ".join(container(redis, "redis")["args"])
    assert "--maxmemory-policy noeviction" in args
    assert "--appendonly yes" in args
    assert '--requirepass "$REDIS_PASSWORD"' in args
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"


def test_managed_redis_overlay_drops_in_cluster_redis_and_uses_tls() -> None:
    docs = rendered("overlays/managed-redis")
    assert not [d for d in docs if d["kind"] in ("StatefulSet", "Service") and d["metadata"]["name"] == "redis"]
    env = {e["name"]: e.get("value", "") for e in container(find(docs, "Deployment", "shelly-worker"), "worker")["env"]}
    assert env["SHELLY_BROKER_URL"].startswith("rediss://")
    assert env["SHELLY_REDIS_URL"].startswith("rediss://")


def test_worker_egress_is_dns_redis_and_https_only() -> None:
    policy = find(rendered("base"), "NetworkPolicy", "shelly-model-egress")
    assert policy["spec"]["ingress"] == []
    ports = sorted({(p["protocol"], p["port"]) for rule in policy["spec"]["egress"] for p in rule["ports"]})
    assert ports == [("TCP", 53), ("TCP", 443), ("TCP", 6379), ("UDP", 53)]
    worker_labels = find(rendered("base"), "Deployment", "shelly-worker")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= worker_labels.items()


def test_flower_requires_basic_auth_from_a_secret() -> None:
    docs = rendered("base")
    flower = container(find(docs, "Deployment", "flower"), "flower")
    secret = flower["envFrom"][0]["secretRef"]["name"]
    assert "FLOWER_BASIC_AUTH" in find(docs, "Secret", secret)["data"]
    assert find(docs, "Service", "flower")["spec"]["type"] == "ClusterIP"
    assert flower["command"] == ["shelly", "flower", "--address", "0.0.0.0", "--port", "5555"]


def test_coordinator_job_runs_shelly_batch() -> None:
    job = find(rendered("overlays/batch"), "Job", "shelly-batch")
    assert container(job, "coordinator")["command"][:2] == ["shelly", "batch"]


def test_config_map_holds_a_config_the_loader_accepts() -> None:
    from shelly_dist.engine.config import parse_config

    docs = rendered("base")
    config_maps = [d for d in docs if d["kind"] == "ConfigMap"]
    config_map = next(d for d in config_maps if d["metadata"]["name"].startswith("shelly-config-"))
    config = parse_config(config_map["data"]["config.yaml"], env=EXAMPLE_ENV)
    assert config.distributed.queue == "shelly"


def test_shipped_secret_files_hold_no_value() -> None:
    """No password or key ships: every example Secret file has only empty values."""
    examples = list((K8S / "base" / "secrets").glob("*.env.example"))
    assert len(examples) == 3
    for example in examples:
        pairs = [line for line in example.read_text().splitlines() if line and not line.startswith("#")]
        assert pairs and all(line.endswith("=") for line in pairs), example.name


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
@pytest.mark.parametrize("target", TARGETS)
def test_kustomize_fails_loudly_until_the_secret_files_exist(target: str, tmp_path: Path) -> None:
    """As shipped (no secrets/*.env), rendering fails naming the missing file, never deploys a default."""
    shutil.copytree(K8S, tmp_path / "k8s")
    for created in (tmp_path / "k8s").rglob("secrets/*.env"):  # a developer's own, if any
        created.unlink()
    out = subprocess.run(["kubectl", "kustomize", str(tmp_path / "k8s" / target)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "secrets/redis-auth.env" in out.stderr and "no such file" in out.stderr


@pytest.mark.parametrize("target", TARGETS)
def test_worker_metrics_port_is_annotated_for_scraping_and_open_to_ingress(target: str) -> None:
    docs = rendered(target)
    pod = find(docs, "Deployment", "shelly-worker")["spec"]["template"]
    env = {e["name"]: e.get("value", "") for e in container({"spec": {"template": pod}}, "worker")["env"]}
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == env["SHELLY_METRICS_PORT"]
    assert env["SHELLY_METRICS_HOST"] == "0.0.0.0"
    policy = find(docs, "NetworkPolicy", "shelly-worker-metrics")
    assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == [int(env["SHELLY_METRICS_PORT"])]


def test_keda_scales_on_the_list_the_workers_consume() -> None:
    """Kombu's Redis transport keeps a queue's waiting messages in a list named after the queue, in
    the broker URL's database (tests/integration/test_queue_key.py): KEDA must watch that key."""
    docs = rendered("overlays/production")
    trigger = find(docs, "ScaledObject", "shelly-worker")["spec"]["triggers"][0]["metadata"]
    worker = container(find(docs, "Deployment", "shelly-worker"), "worker")
    queue = worker["args"][worker["args"].index("--queues") + 1]
    broker = next(e["value"] for e in worker["env"] if e["name"] == "SHELLY_BROKER_URL")
    config = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d["data"])
                            ["data"]["config.yaml"])
    assert trigger["listName"] == queue == config["distributed"]["queue"]
    assert trigger["databaseIndex"] == broker.rsplit("/", 1)[1]


def test_the_console_is_off_in_the_base_and_on_in_the_dev_overlay() -> None:
    assert not [d for d in rendered("base") if d["metadata"]["name"] == "shelly-console"]
    assert find(rendered("overlays/dev"), "Deployment", "shelly-console")["spec"]["replicas"] >= 1


def test_the_console_listens_on_every_address_with_a_token_from_a_secret() -> None:
    docs = rendered("overlays/dev")
    console = container(find(docs, "Deployment", "shelly-console"), "console")
    assert console["command"] == ["shelly", "serve", "--host", "0.0.0.0", "--port", "8700"]
    secret = find(docs, "Secret", console["envFrom"][0]["secretRef"]["name"])
    assert "SHELLY_SERVE_TOKEN" in secret["data"]
    assert console["readinessProbe"]["httpGet"]["path"] == "/api/health"
    assert find(docs, "Service", "shelly-console")["spec"]["type"] == "ClusterIP"
    pod = find(docs, "Deployment", "shelly-console")["spec"]["template"]
    assert pod["metadata"]["labels"]["shelly-dist.io/redis-client"] == "true"  # Redis lets it in
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert console["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_console_talks_to_redis_and_dns_only() -> None:
    policy = find(rendered("overlays/dev"), "NetworkPolicy", "shelly-console")
    ports = sorted({(p["protocol"], p["port"]) for rule in policy["spec"]["egress"] for p in rule["ports"]})
    assert ports == [("TCP", 53), ("TCP", 6379), ("UDP", 53)]


def test_the_console_secret_file_ships_without_a_token() -> None:
    example = K8S / "components" / "console" / "secrets" / "console-auth.env.example"
    pairs = [line for line in example.read_text().splitlines() if line and not line.startswith("#")]
    assert pairs == ["SHELLY_SERVE_TOKEN="]
