"""What Go Shelly's YAML decoding forgives: unknown keys and ``null`` values.

Go's ``yaml.Unmarshal`` ignores a key no struct field declares and turns ``null`` into the
field's zero value. Configs in the wild depend on both (a ``browser:`` section from Shelly's own
README; ``skills:`` left empty), so before validation :func:`prune` walks the parsed YAML along
the schema of :mod:`shelly_dist.engine.config_models`, removes every unknown key (returning its
path, so the loader can warn, or refuse under strict mode) and removes every ``null`` the field
cannot hold, so the field takes its default, which is the empty list, mapping or section.
Free-form values (``effects[].params``) are left alone, and so are unknown keys in shelly-dist's
own sections (``go_section = False``), which validation then rejects.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel


def _admits_none(annotation: Any) -> bool:
    if annotation is None or annotation is type(None) or annotation is Any:
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _admits_none(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return any(_admits_none(a) for a in get_args(annotation))
    return False


def _candidates(annotation: Any, value: Any) -> list[Any]:
    """The concrete annotations (models, lists, dicts) ``value`` may be validated against."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _candidates(get_args(annotation)[0], value)
    if origin in (Union, types.UnionType):
        return [c for a in get_args(annotation) for c in _candidates(a, value)]
    if isinstance(value, dict) and isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if isinstance(value, dict) and origin is dict:
        return [annotation]
    if isinstance(value, list) and origin is list:
        return [annotation]
    return []


def _walk(value: Any, annotation: Any, path: str, unknown: list[tuple[str, list[str]]]) -> None:
    found = _candidates(annotation, value)
    if not found:
        return
    target = found[0]
    if isinstance(target, type) and issubclass(target, BaseModel):
        fields = target.model_fields
        lenient = getattr(target, "go_section", True)
        for key in list(value):
            at = f"{path}.{key}" if path else str(key)
            if key not in fields:
                if lenient:  # shelly-dist's own sections keep unknown keys, for pydantic to reject
                    unknown.append((at, sorted(fields)))
                    del value[key]
            elif value[key] is None and not _admits_none(fields[key].annotation):
                del value[key]
            else:
                _walk(value[key], fields[key].annotation, at, unknown)
    elif isinstance(value, list):
        item = get_args(target)[0]
        for i, element in enumerate(value):
            _walk(element, item, f"{path}[{i}]", unknown)
    else:
        item = get_args(target)[1]
        for key, element in value.items():
            _walk(element, item, f"{path}.{key}", unknown)


def prune(data: dict[str, Any], model: type[BaseModel]) -> list[tuple[str, list[str]]]:
    """Drop unknown keys and unholdable ``null``s from ``data`` in place; return the unknown
    keys' paths (``agents[0].browser``), in file order, each with the keys its section knows (a
    typo's suggestion comes from those, not from every section's)."""
    unknown: list[tuple[str, list[str]]] = []
    _walk(data, model, "", unknown)
    return unknown
