"""A deployment file's declared model: every key a TOML file may hold, with its type, bound and
the fix a wrong value gets (`Key`), checked by one function (`check`) rather than by hand for
each key. The dataclasses in catalog.py declare their keys with `key(...)` in their fields'
metadata, so the file's model and the object it builds are one declaration."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NoReturn


class DeploymentError(ValueError):
    pass


def fail(where: str, what: str) -> NoReturn:
    raise DeploymentError(f"deployment {where}: {what}")


@dataclass(frozen=True)
class Key:
    """One key of a deployment file. `kind`: str, int, float, bool, "strings" (a list of
    strings) or dict (a table); `least`: the smallest integer allowed; `choices`: the values
    allowed; `example`: how a right one looks, for the error."""

    kind: Any
    least: int | None = None
    choices: tuple[str, ...] | None = None
    example: str = ""
    required: bool = False


def key(kind: Any, **rule: Any) -> dict:
    """A dataclass field's metadata declaring its TOML key."""
    return {"toml": Key(kind, **rule)}


def keys(cls: type) -> dict[str, Key]:
    """The TOML keys a dataclass declares, by field name."""
    return {f.name: f.metadata["toml"] for f in dataclasses.fields(cls) if "toml" in f.metadata}


_ARGS = '["--enforce-eager"]'


def _wrong(name: str, k: Key, value: Any) -> str | None:
    """What is wrong with `value` for key `name` (None: nothing)."""
    if k.kind == "strings":
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            return f"{name} must be a list of strings, like {k.example or _ARGS}"
        return None
    if k.kind is int:
        if not isinstance(value, int) or isinstance(value, bool) or (k.least is not None and value < k.least):
            return f"{name} must be an integer >= {k.least if k.least is not None else 0}"
        return None
    if k.kind is float:
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            return f"{name} must be a number > 0"
        return None
    if k.kind is dict:
        return None if isinstance(value, dict) else f"{name} must be a table, like {k.example}"
    if not isinstance(value, k.kind) or (k.kind is str and not value):
        return f"needs {name} = {k.example}" if k.required else f"{name} must be a {k.kind.__name__}"
    if k.choices is not None and value not in k.choices:
        return f"{name} {value!r}: use one of {', '.join(k.choices)}"
    return None


def check(where: str, raw: dict, declared: dict[str, Key], *, unknown: str | None = None) -> None:
    """`raw` against the declared keys: unknown keys, missing required ones and wrong values
    each a DeploymentError naming the key and the fix (`unknown`: the message for an unknown
    key, default: the known keys listed)."""
    extra = set(raw) - set(declared)
    if extra:
        fail(where, unknown or f"unknown keys {', '.join(sorted(extra))} (known: {', '.join(sorted(declared))})")
    for name, k in declared.items():
        if name not in raw:
            if k.required:
                fail(where, f"needs {name} = {k.example}")
            continue
        problem = _wrong(name, k, raw[name])
        if problem:
            fail(where, problem)
