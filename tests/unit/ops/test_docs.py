"""Every command the operations docs show is one a test exercises or validates.

Each fenced ``sh`` line in the docs must match a pattern below, and each pattern names the test
that backs it; that test must exist. A new command in the docs without a backing test fails here.
A name ``ci:FUNCTION`` is a check of the container CI job (``.ci/containers``, run by ``.ci/run``):
the podman commands need root and podman, which the pytest suite does not assume.
"""

from __future__ import annotations

import re

import pytest

from tests.unit.ops.support import ROOT

DOCS = [ROOT / "docs" / "operations.md", ROOT / "deploy" / "README.md", ROOT / "workers" / "README.md",
        ROOT / "docs" / "observability.md"]
_DOCKERFILE = "test_build_context_sends_everything_pip_install_needs"
_UNITS = "test_unit_has_the_sections_and_keys_it_needs"
COVERED: dict[str, str] = {
    r"cp \.env\.example \.env": "test_env_example_lists_every_variable_compose_uses",
    r"docker compose up -d --build --scale worker=\d+": "test_worker_is_scalable",
    r"docker compose run --rm coordinator (run|batch) .*": "test_coordinator_runs_only_under_its_profile",
    r"docker build -f workers/Dockerfile -t shelly-worker:local \.": _DOCKERFILE,
    r"kubectl apply -k k8s/overlays/(dev|production|managed-redis|batch)": (
        "test_rendered_manifests_are_valid_kubernetes"
    ),
    r"kubectl -n shelly delete job shelly-batch --ignore-not-found": "test_coordinator_job_runs_shelly_batch",
    r"kubectl -n shelly port-forward svc/flower 5555:5555": "test_flower_requires_basic_auth_from_a_secret",
    r"sudo systemctl (daemon-reload|enable --now shelly-.*)": "test_unit_passes_systemd_analyze_verify",
    r"sudo cp deploy/systemd/.*": _UNITS,
    r"sudo install -D -m 0640 -g shelly deploy/systemd/shelly\.env\.example .*": (
        "test_env_example_defines_every_variable_the_units_use"
    ),
    r"sudo cp -r k8s/base/shelly/\. /srv/shelly/\.shelly/.*": "test_config_map_holds_a_config_the_loader_accepts",
    r"sudo (useradd|install -d|python3\.11 -m venv|/opt/shelly/venv/bin/pip install) .*": _UNITS,
    # The processes by hand: backed by integration tests against the real Redis.
    r"shelly worker --concurrency \d+ --queues \S+ --hostname \S+ --heartbeat-file \S+": (
        "test_probe_passes_against_a_live_worker_and_fails_once_it_is_stopped"
    ),
    r"SHELLY_CONFIG=\S+ celery -A shelly_dist\.runtime\.celery_app worker( --pool threads --concurrency \d+)?": (
        "test_plain_celery_worker_reads_shelly_config_and_runs_a_delegation"
    ),
    r"SHELLY_FLOWER_BASIC_AUTH=\S+:\S+ shelly flower --address \S+ --port \d+": (
        "test_flower_credentials_from_the_environment_are_not_on_its_command_line"
    ),
    r"curl -u \S+ \S+/api/workers": "test_flower_api_lists_the_worker_hostname",
    r"shelly doctor": "test_text_output_is_one_line_per_check_with_the_fix",
    r"shelly doctor --json": "test_a_worker_on_the_queue_with_the_same_config_passes",
    r"curl -u \S+ \S+/api/tasks": (
        "test_flower_api_lists_the_run_agent_tasks_with_agent_depth_session_and_preview"
    ),
    r"python -m shelly_dist\.runtime\.heartbeat --file \S+ --max-age \d+": (
        "test_worker_probe_command_passes_against_a_live_heartbeat"
    ),
    r"celery -A shelly_dist\.runtime\.celery_app control cancel_consumer \S+ --destination \S+": (
        "test_prestop_cancel_consumer_stops_the_worker_taking_tasks"
    ),
    # docs/observability.md
    r"shelly worker --metrics-port \d+ --metrics-host \S+": (
        "test_worker_metrics_count_the_runs_steps_model_calls_and_tools_of_a_delegation"
    ),
    r"SHELLY_LOG_FORMAT=json shelly worker --concurrency \d+": (
        "test_a_worker_logs_json_lines_with_the_run_session_agent_and_worker"
    ),
    r"pip install 'shelly-dist\[a2a\]'": "test_a_missing_sdk_names_the_pip_line",
    r"pip install 'shelly-dist\[otel\]'|OTEL_EXPORTER_OTLP_ENDPOINT=\S+ OTEL_SERVICE_NAME=\S+ shelly worker": (
        "test_a_delegation_over_two_workers_is_one_trace_with_children_under_their_delegate_spans"
    ),
    r"shelly a2a serve": "test_the_card_names_the_agent_its_description_skills_streaming_and_interface",
    r"SHELLY_A2A_TOKEN=\S+ shelly a2a serve --host \S+ --port \d+": (
        "test_with_a_token_the_card_is_public_and_declares_bearer_and_calls_need_the_token"
    ),
    # Run for real by the container CI job.
    r"podman build --format docker -f workers/Dockerfile -t shelly-worker:local \.": "ci:build_worker_image",
    r"WORKER_REPLICAS=\d+ podman-compose up -d --no-build redis worker flower": "ci:compose_up",
    r'podman-compose run -T --rm --no-deps coordinator run ".*"': "ci:check_compose_coordinator_run",
    r"podman healthcheck run CONTAINER": "ci:check_health_fails_when_worker_hangs",
}
TESTS = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
CI_CHECKS = (ROOT / ".ci" / "containers").read_text()


def _exists(name: str) -> bool:
    if name.startswith("ci:"):
        return f"\n{name[3:]}() {{" in CI_CHECKS and f" {name[3:]}\n" in CI_CHECKS  # defined and run
    return f"def {name}(" in TESTS


def _commands() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for block in re.findall(r"```sh\n(.*?)```", doc.read_text(), re.S):
            for line in block.splitlines():
                line = line.split("  #")[0].strip()
                if line and not line.startswith("#"):
                    out.append((doc.name, line))
    return out


@pytest.mark.parametrize(("doc", "command"), _commands())
def test_documented_command_is_backed_by_a_test(doc: str, command: str) -> None:
    backing = [test for pattern, test in COVERED.items() if re.fullmatch(pattern, command)]
    assert backing, f"{doc}: no test backs `{command}`: add one and list it in COVERED"
    assert all(_exists(t) for t in backing)


def test_every_backing_test_exists() -> None:
    assert [t for t in COVERED.values() if not _exists(t)] == []


USER_FILES = {"SKILL.md", "AGENTS.md", "CLAUDE.md"}
"""Markdown files a user's project (or a skill) holds, which docs name without the repo having them."""


def test_no_doc_cites_a_markdown_file_the_repo_lacks() -> None:
    """A doc pointing at a file users cannot open (docs cited DESIGN.md, which ships elsewhere)."""
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md"]:
        text = doc.read_text(encoding="utf-8")
        # a link's target, or a project document named in capitals (DESIGN.md); not the names of
        # files users or agents write (a skill's SKILL.md, a team's notes.md document, the prompt
        # files CLAUDE.md and AGENTS.md a user's project holds)
        linked = re.findall(r"\]\(([^)#\s]+\.md)[)#]", text)
        named = [n for n in re.findall(r"(?<![\w/.-])((?:[\w.-]+/)*[A-Z][A-Z_]+\.md)\b", text)
                 if n not in USER_FILES]
        for cited in set(linked + named):
            if not any((base / cited).exists() for base in (ROOT, doc.parent)):
                missing.append(f"{doc.relative_to(ROOT)} cites {cited}")
    assert missing == []


def test_no_doc_cites_a_section_of_a_design_document_users_do_not_have() -> None:
    """``DESIGN §3 rule 16`` pointed users at a file that ships elsewhere (issue 38, third hour)."""
    citing = [f"{doc.relative_to(ROOT)}: {m}" for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
              for m in re.findall(r"DESIGN(?:\.md)? §[\w .]+", doc.read_text(encoding="utf-8"))]
    assert citing == []


def test_the_built_in_toolboxes_table_lists_every_toolbox_with_its_tools(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from shelly_dist.engine.config import parse_config
    from shelly_dist.engine.config_models import BUILTIN_TOOLBOXES
    from shelly_dist.engine.shellydir import ShellyDir
    from shelly_dist.engine.stores import SessionStores
    from shelly_dist.engine.toolboxes import Toolboxes

    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "reference.md").read_text()
    section = text.split("## Built-in toolboxes", 1)[1].split("\n## ", 1)[0]
    documented = {m.group(1): re.findall(r"`([a-z_]+)`", m.group(2))
                  for m in re.finditer(r"^\| `([a-z]+)` \| ([^|]+) \|", section, re.MULTILINE)}
    cfg = parse_config("providers: [{name: p, kind: scripted}]\nagents: [{name: a, provider: p}]\n", {})
    boxes = Toolboxes(cfg, ShellyDir(tmp_path / ".shelly"), SessionStores.from_config(cfg.distributed))
    built = {name: [t.name for t in boxes.named(name, "0123456789abcdef").tools()] for name in BUILTIN_TOOLBOXES}
    assert documented == built


def test_the_workflow_example_kickoff_wakes_only_the_coder() -> None:
    # a mention of the reviewer in the kickoff woke it before any patch existed
    import yaml

    from shelly_dist.workspace.models import MENTION

    text = (ROOT / "docs" / "workflows.md").read_text()
    block = next(b for b in text.split("```yaml\n")[1:] if b.startswith("name: review"))
    workflow = yaml.safe_load(block.split("```", 1)[0])
    assert MENTION.findall(workflow["kickoff"]) == ["coder"]
