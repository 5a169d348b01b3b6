"""Closed loop: `concurrency` users, each sending its next request as soon as its previous one
ends (loadgen.executors.closed_loop runs them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.shapes.base import Flag, Shape, register


@register
@dataclass(frozen=True)
class ClosedLoop(Shape):
    concurrency: int
    mode = "closed"
    closed = True
    STEADY = True
    OPTIONS = (
        Flag(
            "concurrency",
            int,
            "Closed loop: N users, each sends when its last request ends.",
            metavar="N",
            what="closed loop",
        ),
    )

    @classmethod
    def from_options(cls, given: Any, context: Any = None) -> ClosedLoop:
        return cls(given.concurrency)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")

    def describe(self) -> dict:
        return {
            "mode": "closed",
            "concurrency": self.concurrency,
            "rate": None,
            "arrival": None,
            "burstiness": None,
            "max_concurrency": None,
        }

    @staticmethod
    def label(described: dict) -> str:
        return f"closed loop, concurrency {described['concurrency']}"

    def level(self) -> str:
        return f"c{self.concurrency}"

    def join_s(self, gap_s: float) -> list[float]:
        return [k * gap_s for k in range(self.concurrency)]
