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
from shelly_dist.engine.vendor_keys import fill_vendor_keys
from shelly_dist.errors import ConfigError
from shelly_dist.tools import control_files

ENV_CONFIG = "SHELLY_CONFIG"
PASS_CONFIG = "or pass --config"
"""The advice that ends the no-config error; ``runtime/celery_app.py`` swaps it (celery lacks it)."""
ENV_STRICT = "SHELLY_STRICT_CONFIG"
"""``1`` turns every config warning (unknown key, missing skill, shadowed name) into an error."""
ENV_OVERRIDES = {"SHELLY_BROKER_URL": "broker_url", "SHELLY_REDIS_URL": "redis_url"}
"""Environment variables that override fields of the ``distributed:`` section."""

NO_KEY = "(its requests go out without a key: export it, or put it in .env)"
"""What follows a missing key's warning; :mod:`.diagnostics` finds those warnings by it."""

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


KEY_FIELDS = ("api_key", "api_keys")


def missing_keys(data: Mapping[str, Any], env: Mapping[str, str]) -> list[tuple[str, Problem]]:
    """Providers whose key names a variable that is unset or empty (``api_key: ${ANTHROPIC_API_KEY}``
    with nothing exported), each as (provider name, problem): ``provider "claude":
    ANTHROPIC_API_KEY is not set``. Read before the variables are expanded (after, the key is just
    empty and its variable's name is gone); without this its requests went out with no key, were
    retried, and ended in a 401 that named nothing."""
    out: list[tuple[str, Problem]] = []
    providers = data.get("providers")
    for i, provider in enumerate(providers if isinstance(providers, list) else []):
        if not isinstance(provider, dict):
            continue
        name = provider.get("name") or f"#{i}"
        for field in KEY_FIELDS:
            value = provider.get(field)
            for j, key in enumerate(value if isinstance(value, list) else [value]):
                names = [m.group(1) or m.group(2) for m in _VAR.finditer(key)] if isinstance(key, str) else []
                if names and not str(expand_env(key, env)).strip():
                    where = f"providers[{i}].{field}" + (f"[{j}]" if isinstance(value, list) else "")
                    state = "is empty" if names[0] in env else "is not set"
                    out.append((name, (where, f'provider "{name}": {names[0]} {state}')))
    return out


def _used_providers(cfg: Config) -> set[str]:
    """The providers some agent calls: its own (else the first), and that one's fallbacks. A
    template lists several providers; only the keys of those in use are worth a warning."""
    used = set()
    for agent in cfg.agents:
        primary = cfg.provider_for(agent)
        used |= {primary.name, *primary.fallback}
    return used


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


def _unknown_key(path: str, known: list[str] | None = None) -> str:
    """``unknown key``, with the closest of ``known`` (the section's keys; all keys when not
    given) as a suggestion."""
    key = re.split(r"[.\]]", path)[-1] if path else ""
    close = difflib.get_close_matches(key, known if known is not None else _field_names(), n=1)
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
    keyless_of = missing_keys(data, env)
    data = expand_env(data, env)
    if isinstance(data, dict):
        keyless_of += fill_vendor_keys(data, env, {name for name, _ in keyless_of})
    unknown = [(path, _unknown_key(path, known)) for path, known in prune(data, Config)]
    overrides = {field: env[var] for var, field in ENV_OVERRIDES.items() if env.get(var)}
    if overrides:
        section = data.get("distributed")
        data["distributed"] = {**(section if isinstance(section, dict) else {}), **overrides}
    # An unknown key is named with the error it may explain (`agnets:` leaves no agents).
    try:
        cfg = Config.model_validate(data)
    except ValidationError as exc:
        _raise([*_pydantic_problems(exc), *unknown], source)
    if source:  # whichever file it was (--config, $SHELLY_CONFIG, ./shelly.yaml): no tool may change it
        control_files.register(source, "the config file in use")
    found = extensions.import_modules(cfg, extensions.project_dir(source))  # before any name is checked
    if found:
        _raise(found, source)
    found = [*problems(cfg), *extensions.problems(cfg)]
    if found:
        _raise([*found, *unknown], source)
    lenient = leniencies(cfg)
    used = _used_providers(cfg)
    keyless = [problem for name, problem in keyless_of if name in used]
    forgive([*unknown, *lenient, *keyless], env, source=source)  # raises under strict mode
    cfg.warnings.extend(forgive(unknown, env, outcome=" (ignored, as Shelly does)") + forgive(lenient, env)
                        + forgive(keyless, env, outcome=f" {NO_KEY}"))
    return cfg


MAX_YAML_NODES = 200_000
"""The most nodes a config may expand to through its aliases: a real config has a few thousand; an
alias bomb (each level repeating the one below) has billions, and took 8 s and 290 MB to fail."""


def _safe_load(text: str, source: str) -> Any:
    """``yaml.safe_load``, refusing a recursive alias (which made an object that contains itself,
    then a ``RecursionError``) and aliases that expand past :data:`MAX_YAML_NODES`, both before
    anything is built. The node graph is composed first (an alias is a second reference to one
    node, so composing is cheap) and sized with each node counted once per reference."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _size(node, {}, set(), source)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _size(node: yaml.Node, sizes: dict[int, int], open_: set[int], source: str) -> int:
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_:
        line = node.start_mark.line + 1
        raise ConfigError(f"config: {source or 'yaml'}: line {line}: a YAML alias refers to a node that contains it")
    total = 1
    if isinstance(node, yaml.CollectionNode):
        open_.add(id(node))
        children = (x for pair in node.value for x in pair) if isinstance(node, yaml.MappingNode) else node.value
        for child in children:
            total += _size(child, sizes, open_, source)
            if total > MAX_YAML_NODES:
                raise ConfigError(f"config: {source or 'yaml'}: line {node.start_mark.line + 1}: YAML aliases "
                                  f"expand to more than {MAX_YAML_NODES:,} values (an alias bomb?)")
        open_.discard(id(node))
    sizes[id(node)] = total
    return total


def parse_config(text: str, env: Mapping[str, str] | None = None, *, source: str = "") -> Config:
    """Parse and validate the YAML ``text`` of a config; ``source`` names it in errors."""
    try:
        data = _safe_load(text, source)
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
        f"(create one with `shelly init`, {PASS_CONFIG})"
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
