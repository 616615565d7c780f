"""The public namespace: ``__all__`` is sorted, complete, and every name is importable."""

from __future__ import annotations

import shelly_dist


def test_all_names_every_public_attribute_once():
    """(ruff's RUF022 keeps ``__all__`` sorted.)"""
    public = sorted(n for n in dir(shelly_dist) if not n.startswith("_") or n == "__version__")
    modules = {n for n in public if type(getattr(shelly_dist, n)).__name__ == "module"}
    assert len(shelly_dist.__all__) == len(set(shelly_dist.__all__))
    assert set(shelly_dist.__all__) == set(public) - modules


def test_the_issue_names_are_exported():
    wanted = {"Role", "Text", "Image", "Document", "ToolCall", "ToolResult", "Message", "Chat", "Completer",
              "Usage", "Tool", "ToolBox", "Skill", "Agent", "AgentOptions", "Registry", "timeout", "recovery",
              "logger", "output_guardrail", "ScriptedCompleter", "LocalRuntime", "ShellyError", "ConfigError",
              "tool", "hook", "input_guardrail", "provider", "GuardrailTripped", "RunContext"}
    assert wanted <= set(shelly_dist.__all__)


def test_importing_the_package_does_not_import_celery_or_redis():
    import subprocess
    import sys

    code = "import sys, shelly_dist; print('celery' in sys.modules, 'redis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
