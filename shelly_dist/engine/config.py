"""Loading the config: find the file, parse YAML, expand ``${VAR}``, apply env overrides, validate.

Every failure is a :class:`~shelly_dist.errors.ConfigError` whose message is one
``config: <field path>: <problem>`` line per problem (``.field`` holds the first path), whether it
comes from YAML syntax, from pydantic's type checks or from the cross-field rules; the CLI maps
it to exit code 2. Variables are expanded after parsing, in string values only (as Shelly), so a
secret containing YAML syntax cannot change the file's structure; unset variables become "".

What Go Shelly accepts loads here too: unknown keys are dropped and ``null`` is the empty value
(:mod:`shelly_dist.engine.config_keys`). Each thing forgiven becomes one warning in
``Config.warnings``, which :func:`report` prints on stderr; under strict mode
(``SHELLY_STRICT_CONFIG=1``, or ``--strict`` on the command line) every warning is an error.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import BaseModel, ValidationError

from shelly_dist.engine import config_models, extensions
from shelly_dist.engine.config_keys import prune
from shelly_dist.engine.config_models import Config
from shelly_dist.engine.config_rules import Problem, leniencies, problems
from shelly_dist.errors import ConfigError

ENV_CONFIG = "SHELLY_CONFIG"
ENV_STRICT = "SHELLY_STRICT_CONFIG"
"""``1`` turns every config warning (unknown key, missing skill, shadowed name) into an error."""
ENV_OVERRIDES = {"SHELLY_BROKER_URL": "broker_url", "SHELLY_REDIS_URL": "redis_url"}
"""Environment variables that override fields of the ``distributed:`` section."""

_VAR = re.compile(r"\$(?:\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand_env(value: Any, env: Mapping[str, str]) -> Any:
    """``value`` with ``${VAR}``/``$VAR`` replaced in every string it holds (keys untouched)."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), value)
    if isinstance(value, dict):
        return {k: expand_env(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, env) for v in value]
    return value


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not part.startswith("~"):  # union tags from config_models
            out += f".{part}" if out else part
    return out or "(top level)"


def _field_names() -> list[str]:
    names: set[str] = set()
    for obj in vars(config_models).values():
        if isinstance(obj, type) and issubclass(obj, BaseModel):
            names.update(obj.model_fields)
    return sorted(names)


def _unknown_key(path: str) -> str:
    key = re.split(r"[.\]]", path)[-1] if path else ""
    close = difflib.get_close_matches(key, _field_names(), n=1)
    hint = f'; did you mean "{close[0]}"?' if close else ""
    return f"unknown key{hint}"


def _pydantic_problems(exc: ValidationError) -> list[Problem]:
    out: list[Problem] = []
    for err in exc.errors():
        loc = err["loc"]
        if err["type"] == "extra_forbidden":
            out.append((_path(loc), _unknown_key(_path(loc))))
        elif err["type"] == "missing":
            out.append((_path(loc), "required field is missing"))
        else:
            out.append((_path(loc), str(err["msg"]).removeprefix("Value error, ")))
    return out


def strict(env: Mapping[str, str] | None = None) -> bool:
    """Whether config warnings are errors (``SHELLY_STRICT_CONFIG`` set to 1/true/yes)."""
    env = os.environ if env is None else env
    return env.get(ENV_STRICT, "").strip().lower() in ("1", "true", "yes")


def forgive(
    found: Iterable[Problem], env: Mapping[str, str] | None = None, *, source: str = "", outcome: str = ""
) -> list[str]:
    """``found`` as warning lines (each followed by ``outcome``, what happens instead), or one
    ``ConfigError`` listing them all under strict mode."""
    found = list(found)
    if found and strict(env):
        _raise([(path, f"{msg} (strict config: {ENV_STRICT}=1)") for path, msg in found], source)
    return [f"config: {path}: {msg}{outcome}" for path, msg in found]


def report(warnings: Iterable[str], stream: TextIO | None = None) -> None:
    """Print each warning once on ``stream`` (stderr) as ``shelly: warning: <text>``."""
    out = stream or sys.stderr
    for line in dict.fromkeys(warnings):
        out.write(f"shelly: warning: {line}\n")
    out.flush()


def _raise(found: list[Problem], source: str) -> None:
    where = f" ({source})" if source else ""
    lines = [f"config: {path}: {msg}" for path, msg in found]
    lines[0] += where
    raise ConfigError("\n".join(lines), field=found[0][0])


def config_from_data(data: Any, env: Mapping[str, str] | None = None, *, source: str = "") -> Config:
    """Validate already-parsed YAML data: expand variables, apply env overrides, check rules."""
    env = os.environ if env is None else env
    if data is None:
        data = {}
    if not isinstance(data, dict):
        _raise([("(top level)", "the file must hold a mapping of sections")], source)
    data = expand_env(data, env)
    unknown = [(path, _unknown_key(path)) for path in prune(data, Config)]
    overrides = {field: env[var] for var, field in ENV_OVERRIDES.items() if env.get(var)}
    if overrides:
        section = data.get("distributed")
        data["distributed"] = {**(section if isinstance(section, dict) else {}), **overrides}
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        _raise(_pydantic_problems(exc), source)
    found = extensions.import_modules(cfg, extensions.project_dir(source))  # before any name is checked
    if found:
        _raise(found, source)
    found = [*problems(cfg), *extensions.problems(cfg)]
    if found:
        _raise(found, source)
    lenient = leniencies(cfg)
    forgive([*unknown, *lenient], env, source=source)  # raises under strict mode
    cfg.warnings.extend(forgive(unknown, env, outcome=" (ignored, as Shelly does)") + forgive(lenient, env))
    return cfg


def parse_config(text: str, env: Mapping[str, str] | None = None, *, source: str = "") -> Config:
    """Parse and validate the YAML ``text`` of a config; ``source`` names it in errors."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"config: {source or 'yaml'}: {line}invalid YAML: {problem}") from exc
    return config_from_data(data, env, source=source)


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read, parse and validate the config file at ``path`` (blocking; call at start-up)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config: {path}: cannot read: {exc.strerror or exc}") from exc
    return parse_config(text, env, source=os.fspath(path))


def find_config(
    config: str | os.PathLike[str] | None = None,
    shelly_dir: str | os.PathLike[str] = ".shelly",
    env: Mapping[str, str] | None = None,
) -> Path:
    """The config file to use: ``config`` (``--config``), else ``$SHELLY_CONFIG``, else
    ``<shelly_dir>/config.yaml``, else the legacy ``shelly.yaml`` in the working directory.

    An explicit path that does not exist, or no file at all, is a ``ConfigError``.
    """
    env = os.environ if env is None else env
    explicit = config or env.get(ENV_CONFIG)
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            origin = "--config" if config else ENV_CONFIG
            raise ConfigError(f"config: {origin}: file not found: {path}", field=origin)
        return path
    for candidate in (Path(shelly_dir) / "config.yaml", Path("shelly.yaml")):
        if candidate.is_file():
            return candidate
    raise ConfigError(
        f"config: no config file: looked for {Path(shelly_dir) / 'config.yaml'} and shelly.yaml "
        "(create one with `shelly init`, or pass --config)"
    )


_UNFINGERPRINTED = {
    # secrets
    "api_key", "api_keys", "headers", "env",
    # how this host reaches shared services
    "base_url", "distributed",
    # host paths
    "permissions_file", "work_dir", "fs_directories", "trusted_commands",
}
"""Config keys (at any depth) left out of the fingerprint: they differ between hosts that run the
same team (``env`` is an MCP server's environment, which carries its secrets)."""


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in _UNFINGERPRINTED}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def fingerprint(cfg: Config) -> str:
    """A short hash of what defines the team (16 hex chars); workers compare it with the caller's.

    Only what changes the team's behaviour counts: secrets, connection URLs, the ``distributed``
    section and host paths (see ``_UNFINGERPRINTED``) are left out, so two machines holding
    different keys, reaching Redis or a model by different host names, or keeping the project in
    different directories still run the same agents. The source of the modules of ``python:``
    counts (imported by then: the loader imports them).
    """
    data = _scrub(cfg.model_dump(mode="json"))
    if cfg.python:  # a changed tool is a new generation (a config without python: hashes as before)
        data["python_source"] = extensions.source_digest(cfg)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
