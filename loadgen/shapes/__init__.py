"""Load shapes, a family: one module per shape, each a `Shape` (base.py) registered by its
mode and declaring its options. A shape decides when requests are sent and nothing else; the
executors (loadgen.executors) run it in real time and the simulator (loadgen.simulate.virtual) in
virtual time, from the same schedule. Members: closed loop (closed.py), open loop (open.py:
Poisson, gamma, constant gaps), ramp (ramp.py: users or rate rising linearly), trace replay
(trace.py: a production trace's times). Every module of this package is imported here, so a new
member is its file and nothing else (docs/architecture.md)."""

from __future__ import annotations

import importlib
import pkgutil

from loadgen.shapes.base import REGISTRY, Flag, Shape, label_of, register
from loadgen.shapes.closed import ClosedLoop
from loadgen.shapes.open import OpenLoop
from loadgen.shapes.ramp import Ramp, parse_ramp
from loadgen.shapes.trace import TraceReplay

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def LoadShape(
    concurrency: int | None = None,
    rate: float | None = None,
    arrival: str = "poisson",  # noqa: N802
    burstiness: float = 1.0,
    max_concurrency: int | None = None,
) -> Shape:
    """A closed loop (`concurrency`) or an open loop (`rate`, with its `arrival` process,
    `burstiness` for gamma, optional `max_concurrency`): the two steady shapes by their numbers."""
    if (concurrency is None) == (rate is None):
        raise ValueError("give exactly one of concurrency and rate")
    if concurrency is not None:
        if max_concurrency is not None:
            raise ValueError("max_concurrency applies to an open loop (rate) only")
        return ClosedLoop(concurrency)
    assert rate is not None
    return OpenLoop(rate, arrival, burstiness, max_concurrency)


__all__ = [
    "REGISTRY",
    "ClosedLoop",
    "Flag",
    "LoadShape",
    "OpenLoop",
    "Ramp",
    "Shape",
    "TraceReplay",
    "label_of",
    "parse_ramp",
    "register",
]
