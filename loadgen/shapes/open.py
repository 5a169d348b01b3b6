"""Open loop: requests at a steady `rate`, gaps from an arrival process (Poisson, gamma with a
burstiness, constant; loadgen.shapes.arrivals), optionally capped in flight (`max_concurrency`);
loadgen.executors.open_loop runs them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.shapes import arrivals
from loadgen.shapes.base import Flag, Shape, register


def check_open(
    rate_name: str, rate: float, arrival: str, burstiness: float, max_concurrency: int | None, allow_zero: bool = False
) -> None:
    """The checks every open-loop shape shares, with the option's name in each message."""
    if not (0 <= rate if allow_zero else 0 < rate) or rate == float("inf") or rate != rate:
        raise ValueError(f"{rate_name} must be > 0 and finite, got {rate}")
    if arrival not in arrivals.PROCESSES:
        raise ValueError(f"unknown arrival process {arrival!r}; valid: {', '.join(arrivals.PROCESSES)}")
    if not 0 < burstiness < float("inf"):
        raise ValueError(f"burstiness must be > 0 and finite, got {burstiness}")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")


OPEN_ONLY = "an open loop: give --rate R or --ramp rate:A:B:S"


def gaps(given: Any) -> dict:
    """An open loop's gap options (--arrival, --burstiness, --max-concurrency) as its fields."""
    process = given.arrival or ("gamma" if given.burstiness is not None else "poisson")
    if given.burstiness is not None and process != "gamma":
        raise ValueError(f"--burstiness applies to gamma arrivals, not --arrival {process}")
    return {
        "arrival": process,
        "burstiness": 1.0 if given.burstiness is None else given.burstiness,
        "max_concurrency": given.max_concurrency,
    }


def open_label(head: str, described: dict) -> str:
    s = f"open loop, {described['arrival']} {head}"
    if described["arrival"] == "gamma":
        s += f", burstiness {described['burstiness']:g}"
    if described["max_concurrency"]:
        s += f", max concurrency {described['max_concurrency']}"
    return s


@register
@dataclass(frozen=True)
class OpenLoop(Shape):
    rate: float
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None
    mode = "open"
    closed = False
    STEADY = True
    OPTIONS = (
        Flag("rate", float, "Open loop: R requests per second.", metavar="R", what="open loop"),
        Flag(
            "arrival",
            str,
            "Open-loop gaps [default: poisson; gamma when --burstiness is given].",
            choices=("poisson", "gamma", "constant"),
            applies=OPEN_ONLY,
        ),
        Flag(
            "burstiness", float, "Gamma shape B: CV of gaps = 1/sqrt(B); 1 = Poisson, < 1 burstier.", applies=OPEN_ONLY
        ),
        Flag("max_concurrency", int, "Open loop: cap on requests in flight.", applies=OPEN_ONLY),
    )

    @classmethod
    def from_options(cls, given: Any, context: Any = None) -> OpenLoop:
        return cls(given.rate, **gaps(given))

    def __post_init__(self) -> None:
        check_open("rate", self.rate, self.arrival, self.burstiness, self.max_concurrency)

    def describe(self) -> dict:
        return {
            "mode": "open",
            "concurrency": None,
            "rate": self.rate,
            "arrival": self.arrival,
            "burstiness": self.burstiness if self.arrival == "gamma" else None,
            "max_concurrency": self.max_concurrency,
        }

    @staticmethod
    def label(described: dict) -> str:
        return open_label(f"{described['rate']:g} req/s", described)

    def level(self) -> str:
        return f"r{self.rate:g}"

    def arrivals_s(self, *, num: int | None, duration_s: float | None, seed: int) -> np.ndarray:
        return arrivals.schedule(
            self.rate, num=num, duration_s=duration_s, process=self.arrival, burstiness=self.burstiness, seed=seed
        )
