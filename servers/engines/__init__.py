"""Serving engines, a family: one module per engine, each an `Engine` (base.py) registered by
its name. Members: vLLM on GPUs (vllm.py), vLLM's CPU build (vllm_cpu.py), the emulated engine
(emulator.py: vLLM's flags, or SGLang's names with --flavor sglang), llama.cpp's llama-server
(llamacpp.py), SGLang (sglang.py) and a server started elsewhere (external.py). Every module of
this package is imported here, so a new engine is its file and nothing else
(docs/architecture.md, "The families")."""

from __future__ import annotations

import importlib
import pkgutil

from servers.engines.base import MARK, REGISTRY, Base, Engine, Metrics, RequestSD, register

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
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


def by_owner(owned_by: str | None) -> Engine | None:
    """The engine whose servers list their models as `owned_by` (None: not one of ours)."""
    return next((e for e in (REGISTRY[n] for n in names()) if owned_by and e.owned_by == owned_by), None)


def metric_names(kind: str) -> dict[str, tuple[str, ...]]:
    """Every engine's names for each key of `kind` ("counters", "gauges", "histograms"), in the
    registry's order, each name once: what a scrape tries, the first present used."""
    out: dict[str, tuple[str, ...]] = {}
    for n in names():
        for key, aliases in getattr(REGISTRY[n].metrics, kind).items():
            out[key] = tuple(dict.fromkeys((*out.get(key, ()), *aliases)))
    return out


def request_sd_keys() -> list[RequestSD]:
    """Every engine's per-request SD keys, each set once."""
    return list(dict.fromkeys(e.request_sd for n in names() if (e := REGISTRY[n]).request_sd is not None))


__all__ = [
    "MARK",
    "REGISTRY",
    "Base",
    "Engine",
    "Metrics",
    "RequestSD",
    "UnknownEngine",
    "by_owner",
    "get",
    "metric_names",
    "names",
    "register",
    "request_sd_keys",
]
