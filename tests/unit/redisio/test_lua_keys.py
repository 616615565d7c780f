"""Every key a Lua script touches comes from ``KEYS`` (DESIGN §3 rule 14): a key built inside a
script (``prefix .. 'run:' .. id``) is invisible to a cluster's routing and breaks on a cluster.

The check reads every script of the package: the first argument of each keyed ``redis.call`` must
be ``KEYS[…]`` or a name bound from ``KEYS`` (``local a, b = KEYS[1], KEYS[2]``, ``for _, k in
ipairs(KEYS)``, or a parameter of a helper the script calls with such names)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import shelly_dist

UNKEYED = {"PUBLISH", "SPUBLISH"}
"""Commands whose first argument is not a key (a channel name may be built in the script; a
sharded one, on a cluster, carries the hash tag of the script's keys: ``redisio/sharded.py``)."""

_CALL = re.compile(r"redis\.call\(\s*'(\w+)'\s*,\s*([^,)]+)")
_LOCAL = re.compile(r"local\s+([\w\s,]+?)\s*=\s*(.+)")
_IPAIRS = re.compile(r"for\s+\w+\s*,\s*(\w+)\s+in\s+ipairs\(KEYS\)")
_FUNCTION = re.compile(r"function\s+\w+\(([^)]*)\)")


def scripts() -> dict[str, str]:
    """Every string literal of the package that calls Redis from Lua, by file and line (read, not
    imported: some modules load a config when imported)."""
    root = Path(shelly_dist.__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "redis.call(" in node.value:
                found[f"{path.relative_to(root)}:{node.lineno}"] = node.value
    return found


def key_names(script: str) -> set[str]:
    names: set[str] = set()
    for line in script.splitlines():
        if m := _LOCAL.match(line.strip()):
            lhs = [n.strip() for n in m.group(1).split(",")]
            rhs = [e.strip() for e in m.group(2).split(",")]
            names |= {n for n, e in zip(lhs, rhs, strict=False) if e.startswith("KEYS[")}
        if m := _IPAIRS.search(line):
            names.add(m.group(1))
        if m := _FUNCTION.search(line):
            names |= {p.strip() for p in m.group(1).split(",") if p.strip()}
    return names


def foreign_keys(script: str) -> list[str]:
    names = key_names(script)
    bad = []
    for command, first in _CALL.findall(script):
        first = first.strip()
        if command.upper() in UNKEYED:
            continue
        if not (re.fullmatch(r"KEYS\[[^\]]+\]", first) or first in names):
            bad.append(f"{command} {first}")
    return bad


def test_the_package_has_lua_scripts_to_check() -> None:
    files = {name.split(":")[0] for name in scripts()}
    assert {"runtime/celery/journal/scripts.py", "state/redis.py", "runtime/celery/journal/control_scripts.py"} <= files


def test_every_key_a_lua_script_touches_is_passed_in_keys() -> None:
    offenders = {name: bad for name, text in scripts().items() if (bad := foreign_keys(text))}
    assert offenders == {}


def test_a_key_built_inside_a_script_is_caught() -> None:
    built = "local ck = ARGV[1] .. 'run:' .. ARGV[2]\nredis.call('HSET', ck, 'a', 1)"
    assert foreign_keys(built) == ["HSET ck"]
