"""Serving engines, a family: one module per engine, each a launcher (`Engine`, base.py)
registered by its name and the dialect its servers speak (`Dialect`, dialect.py). Members: vLLM
on GPUs (vllm.py), vLLM's CPU build (vllm_cpu.py), the emulated engine (emulator.py: vLLM's
flags, answering in any emulable dialect), llama.cpp's llama-server (llamacpp.py), SGLang
(sglang.py) and a server started elsewhere (external.py). Every module of this package is
imported here, so a new engine is its file and nothing else (docs/architecture.md, "The
families"). What loadgen asks of the family by a property, never by a name, is here."""

from __future__ import annotations

import importlib
import pkgutil

from servers.engines.base import REGISTRY, Base, Engine, register
from servers.engines.dialect import DIALECTS, Counts, Dialect, Metrics, RequestSD, sd_figures, speak

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "dialect"):
        importlib.import_module(f"{__name__}.{_module.name}")

# the order engines are listed in (choices, errors): vLLM's family first, the rest by name
_FIRST = ("vllm", "vllm-cpu", "emulator")


def names() -> tuple[str, ...]:
    return tuple(sorted(REGISTRY, key=lambda n: (n not in _FIRST, _FIRST.index(n) if n in _FIRST else 0, n)))


class UnknownEngine(ValueError):
    pass


def get(name: str) -> Engine:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownEngine(f"engine {name!r}: use one of {', '.join(names())}") from None


def _the(prop: str) -> str:
    """The one engine whose launcher says `prop` (embedded, emulates, file_default)."""
    found = [n for n in names() if getattr(REGISTRY[n], prop)]
    if len(found) != 1:
        raise TypeError(f"exactly one engine is {prop}; these are: {found}")
    return found[0]


def embedded() -> str:
    """The engine of the embedded default (a sweep given no deployment)."""
    return _the("embedded")


def emulator() -> str:
    """The engine that serves any deployment in its own engine's dialect."""
    return _the("emulates")


def file_default() -> str:
    """The engine of a deployment file that names none."""
    return _the("file_default")


def emulates(name: str) -> bool:
    return get(name).emulates


def starts(name: str) -> bool:
    return get(name).starts


def dialects() -> tuple[Dialect, ...]:
    """Every dialect, in the engines' order (a dialect of no launcher last)."""
    first = [d for n in names() if (d := REGISTRY[n].dialect) is not None]
    return tuple(DIALECTS[d] for d in dict.fromkeys([*first, *sorted(DIALECTS)]))


def dialect(name: str) -> Dialect:
    return DIALECTS[name]


def flavors() -> tuple[str, ...]:
    """The dialects the emulator answers in (its --flavor choices)."""
    return tuple(d.name for d in dialects() if d.emulable)


def by_owner(owned_by: str | None) -> Dialect | None:
    """The dialect whose servers list their models as `owned_by` (None: not one we know)."""
    return next((d for d in dialects() if owned_by and d.owned_by == owned_by), None)


def metric_names(kind: str) -> dict[str, tuple[str, ...]]:
    """Every dialect's names for each key of `kind` ("counters", "gauges", "histograms"), in the
    registry's order, each name once: what a scrape tries, the first present used."""
    out: dict[str, tuple[str, ...]] = {}
    for d in dialects():
        for key, aliases in getattr(d.metrics, kind).items():
            out[key] = tuple(dict.fromkeys((*out.get(key, ()), *aliases)))
    return out


def request_sd_keys() -> list[RequestSD]:
    """Every dialect's per-request SD keys, each set once."""
    return list(dict.fromkeys(d.request_sd for d in dialects() if d.request_sd is not None))


def marks() -> tuple[str, ...]:
    """What a response holds where it carries per-request SD counts: each dialect's drafted
    key (the client's hot path reads an event that holds one in full, loadgen/client)."""
    return tuple(dict.fromkeys(sd.drafted for sd in request_sd_keys()))


__all__ = [
    "DIALECTS",
    "REGISTRY",
    "Base",
    "Counts",
    "Dialect",
    "Engine",
    "Metrics",
    "RequestSD",
    "UnknownEngine",
    "by_owner",
    "dialect",
    "dialects",
    "embedded",
    "emulates",
    "emulator",
    "file_default",
    "flavors",
    "get",
    "marks",
    "metric_names",
    "names",
    "register",
    "request_sd_keys",
    "sd_figures",
    "speak",
    "starts",
]
