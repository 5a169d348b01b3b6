"""What every load shape is: when requests are sent, and nothing else.

A shape is either driven by users (closed: each user sends its next request when its last one
ends; the shape says when each user joins) or by arrivals (open: requests go at scheduled
times whatever the server does; the shape says when each is due). The same two schedules serve
the real-time executors (loadgen.executors) and the simulator in virtual time
(loadgen.simulate.virtual), so a shape is defined once. A new shape is one module: a frozen dataclass
subclassing `Shape`, registered with `@register`, declaring its command-line options (`OPTIONS`:
the CLI makes them flags of every command that takes a load) and how it is built from them
(`from_options`). Nothing else is edited to add one: the package finds its modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

REGISTRY: dict[str, type[Shape]] = {}


def register(cls: type[Shape]) -> type[Shape]:
    """Add a shape class under its `mode` (the `load.mode` of a run's config record)."""
    REGISTRY[cls.mode] = cls
    return cls


@dataclass(frozen=True)
class Flag:
    """One command-line option a shape declares. `name` is its field in the options (the flag is
    --name with dashes); `what` says in a few words what giving it asks for (for the one-line
    error that lists the loads); `applies` what it belongs to, for the refusal when another
    load is given with it."""

    name: str
    type: type = str
    help: str = ""
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    what: str = ""
    applies: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def usage(self) -> str:
        """The flag with its value, e.g. `--ramp [users:|rate:]A:B:S`."""
        return f"{self.flag} {self.metavar or self.name.upper()}"


class Shape:
    """The interface. Attributes other parts read (None or the default where a shape has none):
    `concurrency` (users at most, closed), `rate` (requests/s at most, open), `arrival` and
    `burstiness` (the open-loop gap process), `max_concurrency` (an open-loop cap)."""

    mode: ClassVar[str]
    closed: ClassVar[bool]
    OPTIONS: ClassVar[tuple[Flag, ...]] = ()  # the first asks for this shape; the rest tune it
    USES: ClassVar[tuple[str, ...]] = ()  # other shapes' options this one reads too
    STEADY: ClassVar[bool] = False  # one of the two steady loads (closed, open)
    SWEEPS: ClassVar[bool] = True  # a sweep's cells can run it (loadgen sweep --its-option)
    concurrency: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None

    @classmethod
    def from_options(cls, given: Any, context: Any = None) -> Shape:
        """The shape from the options (`given`: loadgen.shapes.options.model()'s fields; `context`:
        the command's other options, for a shape that needs one, such as the trace's
        --skip-bad); called when this shape's first option is given. ValueError naming the
        option, or a LoadgenError."""
        raise NotImplementedError

    def requests(self) -> int | None:
        """The requests this load itself defines (a trace window's), None for a schedule that
        runs as long as it is fed."""
        return None

    @property
    def max_in_flight(self) -> int | None:
        """The most requests in flight at once (sizes the connection pool), None for no bound."""
        return self.concurrency if self.closed else self.max_concurrency

    def describe(self) -> dict:
        """The shape as plain data, for the run's config record (`mode` names the shape)."""
        raise NotImplementedError

    @staticmethod
    def label(described: dict) -> str:
        """One line for people, from `describe()`'s record (also of an earlier run)."""
        raise NotImplementedError

    def level(self) -> str:
        """A short name for the load level (live metrics' `level` label)."""
        raise NotImplementedError

    def join_s(self, gap_s: float) -> list[float]:
        """Closed: when each user joins, seconds from the start; users join at least `gap_s`
        apart by number (k * gap_s at the earliest), so a crowd does not start in one burst."""
        raise NotImplementedError

    def arrivals_s(self, *, num: int | None, duration_s: float | None, seed: int) -> np.ndarray:
        """Open: when each request is due, seconds from the start (seeded: the same seed gives
        the same schedule), up to `num` of them and all before `duration_s`."""
        raise NotImplementedError


def label_of(described: dict) -> str:
    """One line for a shape's config record, whatever its shape."""
    return REGISTRY[described.get("mode", "closed")].label(described)
