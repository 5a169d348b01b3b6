"""Trace replay: requests at the times a production trace recorded them (workloads.traces),
divided by `speed` (2: twice as fast; 0.5: half speed). Not the emulator's --time-scale, which
slows the emulated GPU. The schedule keeps the trace's own gaps from the window's first
request; a request sent late is measured and reported as for any open loop
(loadgen.executors.open_loop runs it). The trace's lengths and text are the workload's
(loadgen.run.options fits them from the shape's `window`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from loadgen.errors import LoadgenError
from loadgen.shapes.base import Flag, Shape, register

_REPLAY = "a trace replay: give --trace FORMAT:PATH"


@lru_cache(maxsize=4)
def _read(spec: str, skip_bad: bool, start: float, window: float | None, num: int | None):
    from workloads import WorkloadError
    from workloads.traces import read_trace  # its readers: loaded by a replay only

    try:
        trace = read_trace(spec, skip_bad=skip_bad)
    except WorkloadError as e:
        raise LoadgenError(str(e)) from None
    part = trace.window(start, window, num)
    if not len(part):
        raise LoadgenError(
            f"--trace {spec}: no requests between {start:g} s and "
            f"{'the end' if window is None else f'{start + window:g} s'} (it spans {trace.t_s[-1]:.0f} s)"
        )
    return trace, part


@register
@dataclass(frozen=True)
class TraceReplay(Shape):
    offsets_s: tuple[float, ...]  # trace time of each request, from the window's first
    speed: float = 1.0
    source: str = ""
    start_s: float = 0.0  # where the window starts in the trace
    trace: Any = field(default=None, compare=False, repr=False)  # the whole trace read (its repairs)
    window: Any = field(default=None, compare=False, repr=False)  # the replayed part (its lengths)
    mode = "trace"
    closed = False
    SWEEPS = True  # a sweep replays it at each of --trace-speeds (loadgen.planning.build)
    OPTIONS = (
        Flag(
            "trace",
            str,
            "Replay a production trace's arrivals and lengths (azure, mooncake, burstgpt, csv, "
            "jsonl; docs/workloads.md); its text from --workload.",
            metavar="FORMAT:PATH",
            what="a trace replay",
        ),
        Flag(
            "trace_speed",
            float,
            "Replay the trace X times faster (0.5: half speed); not the emulator's --time-scale [1].",
            applies=_REPLAY,
        ),
        Flag("trace_start", float, "Start the replay S seconds into the trace [0].", applies=_REPLAY),
        Flag("trace_window", float, "Replay S seconds of the trace [default: to its end].", applies=_REPLAY),
    )

    @classmethod
    def from_options(cls, given: Any, context: Any = None) -> TraceReplay:
        """The window of the trace the options give; `context`: --skip-bad, --num-requests
        (a cap on the window), and --workers / --ray (refused: a replay runs in one process)."""
        speed = 1.0 if given.trace_speed is None else given.trace_speed
        start = given.trace_start or 0.0
        if context is not None and (getattr(context, "workers", 1) > 1 or getattr(context, "ray_address", None)):
            raise LoadgenError("--trace replays from one process: drop --workers / --ray")
        if given.trace_window is not None and not given.trace_window > 0:
            raise LoadgenError(f"--trace-window must be > 0, got {given.trace_window}")
        if start < 0:
            raise LoadgenError(f"--trace-start must be >= 0, got {start}")
        trace, part = _read(
            given.trace,
            bool(getattr(context, "skip_bad", False)),
            start,
            given.trace_window,
            getattr(context, "num_requests", None),
        )
        return cls(tuple(part.t_s.tolist()), speed, given.trace, start, trace=trace, window=part)

    def requests(self) -> int:
        return len(self.offsets_s)

    def __post_init__(self) -> None:
        if not 0 < self.speed < float("inf"):
            raise ValueError(f"trace_speed must be > 0 and finite, got {self.speed}")
        if not self.offsets_s:
            raise ValueError("the trace window holds no requests")

    @property
    def rate(self) -> float:  # type: ignore[override]
        """The replay's mean request rate (requests/s)."""
        span = (self.offsets_s[-1] - self.offsets_s[0]) / self.speed
        return len(self.offsets_s) / span if span > 0 else float(len(self.offsets_s))

    def describe(self) -> dict:
        return {
            "mode": "trace",
            "concurrency": None,
            "rate": self.rate,
            "arrival": "trace",
            "burstiness": None,
            "max_concurrency": None,
            "source": self.source,
            "speed": self.speed,
            "start_s": self.start_s,
            "requests": len(self.offsets_s),
            "span_s": (self.offsets_s[-1] - self.offsets_s[0]) / self.speed,
        }

    @staticmethod
    def label(described: dict) -> str:
        return (
            f"trace replay of {described['source']} at {described['speed']:g}x from {described['start_s']:g} s: "
            f"{described['requests']} requests over {described['span_s']:.1f} s"
        )

    def level(self) -> str:
        return f"trace{self.speed:g}x"

    def arrivals_s(self, *, num: int | None, duration_s: float | None, seed: int) -> np.ndarray:
        t = (np.asarray(self.offsets_s, float) - self.offsets_s[0]) / self.speed
        if duration_s is not None:
            t = t[t < duration_s]
        return t[:num]
