"""Trace replay: requests at the times a production trace recorded them (workloads.traces),
divided by `speed` (2: twice as fast; 0.5: half speed). Not the emulator's --time-scale, which
slows the emulated GPU. The schedule keeps the trace's own gaps from the window's first
request; a request sent late is measured and reported as for any open loop
(loadgen.executors.open_loop runs it)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.shapes.base import Shape, register


@register
@dataclass(frozen=True)
class TraceReplay(Shape):
    offsets_s: tuple[float, ...]   # trace time of each request, from the window's first
    speed: float = 1.0
    source: str = ""
    start_s: float = 0.0           # where the window starts in the trace
    mode = "trace"
    closed = False

    def __post_init__(self) -> None:
        if not 0 < self.speed < float("inf"):
            raise ValueError(f"trace_speed must be > 0 and finite, got {self.speed}")
        if not self.offsets_s:
            raise ValueError("the trace window holds no requests")

    @property
    def rate(self) -> float:
        """The replay's mean request rate (requests/s)."""
        span = (self.offsets_s[-1] - self.offsets_s[0]) / self.speed
        return len(self.offsets_s) / span if span > 0 else float(len(self.offsets_s))

    def describe(self) -> dict:
        return {"mode": "trace", "concurrency": None, "rate": self.rate, "arrival": "trace", "burstiness": None,
                "max_concurrency": None, "source": self.source, "speed": self.speed, "start_s": self.start_s,
                "requests": len(self.offsets_s), "span_s": (self.offsets_s[-1] - self.offsets_s[0]) / self.speed}

    @staticmethod
    def label(described: dict) -> str:
        return (f"trace replay of {described['source']} at {described['speed']:g}x from {described['start_s']:g} s: "
                f"{described['requests']} requests over {described['span_s']:.1f} s")

    def level(self) -> str:
        return f"trace{self.speed:g}x"

    def arrivals_s(self, *, num: int | None, duration_s: float | None, seed: int) -> np.ndarray:
        t = (np.asarray(self.offsets_s, float) - self.offsets_s[0]) / self.speed
        if duration_s is not None:
            t = t[t < duration_s]
        return t[:num]
