"""A tiny ``.env`` reader: ``KEY=VALUE`` lines, loaded before anything else (Shelly's CLI does).

Supported: blank lines, ``#`` comments, an optional ``export`` prefix, values in single or double
quotes (double quotes understand ``\\n``), and inline `` #`` comments after unquoted values.
Variables already in the environment win, so a real ``export`` always overrides the file. No new
dependency for a twenty-line format.

The ``.env`` of the working directory is a file anyone who can write the project can plant (an
agent with the filesystem tools, a cloned repository), so from it only the variables a user
keeps there are taken (provider keys, ``SHELLY_REDIS_URL``, …): those that decide what shelly
runs, whom it trusts or where its traffic goes (:data:`REFUSED`: ``SHELLY_CONFIG``,
``SHELLY_STATE_DIR``, proxies, CA files, OpenTelemetry exporters, ``PYTHONPATH``…) are skipped
with a warning naming each, unless the person named the file with ``--env-file`` (DESIGN §3
rule 16: a planted ``SHELLY_CONFIG`` ran an agent-written config's MCP server with the keys).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

REFUSED = frozenset({
    # which config, state and permission store shelly uses
    "SHELLY_CONFIG", "SHELLY_DIR", "SHELLY_STATE_DIR",
    # where its traffic goes, and whom TLS trusts
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    # what the programs it starts load
    "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE", "LD_PRELOAD", "LD_LIBRARY_PATH",
})  # fmt: skip
"""Variables an implicit ``.env`` may not set (see the module docstring); ``--env-file`` may."""

REFUSED_PREFIXES = ("OTEL_EXPORTER_",)
"""Where telemetry (prompts and tool output, when captured) is sent, with what headers and CA."""


def refused(name: str) -> bool:
    """Whether an implicit ``.env`` may not set ``name``."""
    return name in REFUSED or name.startswith(REFUSED_PREFIXES)


def parse_dotenv(text: str) -> dict[str, str]:
    """The variables ``text`` defines, in order; malformed lines are skipped."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key.replace("_", "").isalnum():
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            quote, value = value[0], value[1:-1]
            if quote == '"':
                value = value.replace("\\n", "\n").replace('\\"', '"')
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        out[key] = value
    return out


def load_dotenv(
    path: str | os.PathLike[str] = ".env",
    env: MutableMapping[str, str] | None = None,
    *,
    explicit: bool = False,
    skipped: list[str] | None = None,
) -> int:
    """Set the file's variables that ``env`` (default ``os.environ``) lacks; how many were set.

    Unless ``explicit`` (the person named the file: ``--env-file``), the :func:`refused`
    variables are not set; their names are appended to ``skipped`` for the caller's warning.
    """
    env = os.environ if env is None else env
    p = Path(path)
    if not p.is_file():
        return 0
    count = 0
    for key, value in parse_dotenv(p.read_text(encoding="utf-8", errors="replace")).items():
        if key in env:
            continue
        if not explicit and refused(key):
            if skipped is not None:
                skipped.append(key)
            continue
        env[key] = value
        count += 1
    return count


def skipped_warning(path: str | os.PathLike[str], names: list[str]) -> str:
    """The warning for the variables an implicit ``.env`` could not set."""
    return (f"shelly: warning: {os.fspath(path)}: ignored {', '.join(names)} (a .env in the working directory "
            "may not choose the config, state, proxies, CA files or telemetry endpoint: export them, or name "
            "the file with --env-file)")
