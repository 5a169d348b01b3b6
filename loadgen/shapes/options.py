"""A load shape from the options, asked of the family: every member declares its options
(`Shape.OPTIONS`) and builds itself from them (`Shape.from_options`), so the options of
`loadgen run` / `check` / `simulate` are the registry's and a new shape adds its own. What the
options of several members give together is judged here, once, in one line each."""

from __future__ import annotations

from dataclasses import field, make_dataclass
from functools import cache
from typing import Any

from loadgen.errors import LoadgenError, flagged
from loadgen.shapes.base import REGISTRY, Flag, Shape


def flags(*, sweep: bool = False) -> list[Flag]:
    """Every member's options, in the registry's order, each once. `sweep`: only those a sweep
    takes beside its own levels (--concurrency, --rates): of the members that are a load of
    their own (not the steady loops) and run as a sweep's cells (`Shape.SWEEPS`)."""
    out: dict[str, Flag] = {}
    for cls in REGISTRY.values():
        if sweep and (cls.STEADY or not cls.SWEEPS):
            continue
        for f in cls.OPTIONS:
            out.setdefault(f.name, f)
    return list(out.values())


@cache
def _model(names: tuple[str, ...]) -> type:
    types = {f.name: f.type for f in flags()}
    return make_dataclass("ShapeOptions", [(n, types[n] | None, field(default=None)) for n in names], frozen=True)


def model() -> type:
    """The shape options as a frozen dataclass, one field per member option (None: not given)."""
    return _model(tuple(f.name for f in flags()))


def options(**given: Any) -> Any:
    """The shape options for Python callers, e.g. `options(concurrency=8)`."""
    return model()(**given)


def _asks(cls: type[Shape], given: Any) -> bool:
    return bool(cls.OPTIONS) and getattr(given, cls.OPTIONS[0].name, None) is not None


def from_options(given: Any, context: Any = None) -> Shape:
    """The one shape the options ask for (its first option given), the other members' options
    refused where it does not read them. LoadgenError naming the option and the fix."""
    asked = [cls for cls in REGISTRY.values() if _asks(cls, given)]
    if not asked or (len(asked) > 1 and all(cls.STEADY for cls in asked)):
        loads = [
            f"{cls.OPTIONS[0].usage} ({cls.OPTIONS[0].what or cls.mode})" for cls in REGISTRY.values() if cls.OPTIONS
        ]
        raise LoadgenError(f"give exactly one of {', '.join(loads[:-1])} and {loads[-1]}")
    if len(asked) > 1:
        own = next(cls for cls in asked if not cls.STEADY)
        others = " / ".join(cls.OPTIONS[0].flag for cls in asked if cls is not own)
        raise LoadgenError(f"{own.OPTIONS[0].flag} is a load of its own: drop {others}")
    shape = asked[0]
    reads = {f.name for f in shape.OPTIONS} | set(shape.USES)
    for f in flags():
        if f.name not in reads and getattr(given, f.name, None) is not None:
            owner = next(cls for cls in REGISTRY.values() if f in cls.OPTIONS)
            applies = f.applies or f"{owner.OPTIONS[0].what or owner.mode}: give {owner.OPTIONS[0].usage}"
            raise LoadgenError(f"{f.flag} applies to {applies}, or drop {f.flag}")
    names = tuple(sorted((f.name for f in flags()), key=len, reverse=True))
    try:
        return shape.from_options(given, context)
    except ValueError as e:
        raise LoadgenError(flagged(str(e), names)) from None
