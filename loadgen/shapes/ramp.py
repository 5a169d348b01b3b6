"""A ramp: the load rises (or, for a rate, falls) linearly from `start` to `end` over `over_s`
seconds, then holds at `end`, e.g. `--ramp 1:32:60` (users) or `--ramp rate:1:20:60`.

- Users (`of="users"`, closed loop): c(t) = start + (end - start) t / over_s. The first `start`
  users join at once (a join gap apart, as in a closed loop); user k (counting from 0, k >=
  start) joins when c(t) reaches k + 1: t_k = over_s (k + 1 - start) / (end - start). Users
  never leave, so a users ramp only rises.
- Rate (`of="rate"`, open loop): requests arrive at the rate r(t) = start + (end - start) t /
  over_s, then `end`. The arrival process (Poisson, gamma, constant) runs at rate 1 in the
  ramp's own time u and is carried into real time through the expected count
  L(t) = integral of r from 0 to t (a request at u arrives at t = L^-1(u)): for Poisson that is
  exactly the inhomogeneous Poisson process of rate r(t), for constant gaps one request each
  time L(t) passes a whole number. The first request goes at 0, as in an open loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.shapes import arrivals
from loadgen.shapes.base import Flag, Shape, register
from loadgen.shapes.open import check_open, gaps, open_label

OF = ("users", "rate")


def parse_ramp(text: str) -> dict:
    """`[users:|rate:]START:END:SECONDS` -> Ramp's fields; ValueError naming the fix."""
    parts = text.split(":")
    of = parts.pop(0) if parts and parts[0] in OF else "users"
    fix = "give [users:|rate:]START:END:SECONDS, e.g. 1:32:60 (users) or rate:1:20:60"
    if len(parts) != 3:
        raise ValueError(f"ramp {text!r}: {fix}")
    try:
        start, end, over = (float(p) for p in parts)
    except ValueError:
        raise ValueError(f"ramp {text!r}: not numbers; {fix}") from None
    if of == "users":
        if start != int(start) or end != int(end):
            raise ValueError(f"ramp {text!r}: users are whole numbers; {fix}")
        start, end = int(start), int(end)
    return {"of": of, "start": start, "end": end, "over_s": over}


@register
@dataclass(frozen=True)
class Ramp(Shape):
    of: str
    start: float
    end: float
    over_s: float
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None
    mode = "ramp"
    OPTIONS = (
        Flag(
            "ramp",
            str,
            "Load rising linearly from A to B over S seconds, then held at B: users (closed "
            "loop, the default) or requests per second (open loop), e.g. 1:32:60 or rate:1:20:60.",
            metavar="[users:|rate:]A:B:S",
            what="a ramp",
        ),
    )
    USES = ("arrival", "burstiness", "max_concurrency")

    @classmethod
    def from_options(cls, given: Any, context: Any = None) -> Ramp:
        fields = parse_ramp(given.ramp)
        if fields["of"] == "users":
            if given.arrival or given.burstiness is not None or given.max_concurrency:
                raise ValueError(
                    "--arrival, --burstiness and --max-concurrency apply to a rate ramp (--ramp rate:A:B:S) only"
                )
            return cls(**fields)
        return cls(**fields, **gaps(given))

    def __post_init__(self) -> None:
        if self.of not in OF:
            raise ValueError(f"ramp of {self.of!r}: valid: {', '.join(OF)}")
        if not 0 < self.over_s < float("inf"):
            raise ValueError(f"ramp seconds must be > 0 and finite, got {self.over_s:g}")
        if self.of == "users":
            if not 0 <= self.start <= self.end or self.end < 1:
                raise ValueError(
                    f"a users ramp rises from START >= 0 to END >= 1 (users never leave), "
                    f"got {self.start:g} to {self.end:g}"
                )
            if self.arrival != "poisson" or self.burstiness != 1.0 or self.max_concurrency is not None:
                raise ValueError("arrival, burstiness and max_concurrency apply to a rate ramp only")
        else:
            check_open(
                "ramp start rate", self.start, self.arrival, self.burstiness, self.max_concurrency, allow_zero=True
            )
            check_open("ramp end rate", self.end, self.arrival, self.burstiness, self.max_concurrency)

    @property
    def closed(self) -> bool:  # type: ignore[override]
        return self.of == "users"

    @property
    def concurrency(self) -> int | None:  # type: ignore[override]
        return int(self.end) if self.of == "users" else None

    @property
    def rate(self) -> float | None:  # type: ignore[override]
        return max(self.start, self.end) if self.of == "rate" else None

    def describe(self) -> dict:
        users = self.of == "users"
        return {
            "mode": "ramp",
            "of": self.of,
            "start": self.start,
            "end": self.end,
            "over_s": self.over_s,
            "concurrency": self.concurrency,
            "rate": self.rate,
            "arrival": None if users else self.arrival,
            "burstiness": self.burstiness if not users and self.arrival == "gamma" else None,
            "max_concurrency": self.max_concurrency,
        }

    @staticmethod
    def label(described: dict) -> str:
        span = f"{described['start']:g} to {described['end']:g}"
        if described["of"] == "users":
            return f"closed loop, users ramp {span} over {described['over_s']:g} s"
        return open_label(f"ramp {span} req/s over {described['over_s']:g} s", described)

    def level(self) -> str:
        return f"ramp-{'c' if self.of == 'users' else 'r'}{self.start:g}-{self.end:g}"

    def join_s(self, gap_s: float) -> list[float]:
        start, end = int(self.start), int(self.end)
        out = []
        for k in range(end):
            t = 0.0 if k < start else self.over_s * (k + 1 - start) / (end - start)
            out.append(max(t, k * gap_s))
        return out

    def expected(self, t: np.ndarray) -> np.ndarray:
        """L(t): the expected number of arrivals by t (the ramp's own time u at t)."""
        a, b, s = self.start, self.end, self.over_s
        t = np.asarray(t, dtype=float)
        inside = a * t + (b - a) * t * t / (2 * s)
        return np.where(t <= s, inside, s * (a + b) / 2 + b * (t - s))

    def at(self, u: np.ndarray) -> np.ndarray:
        """L^-1(u): when the ramp's own time reaches u."""
        a, b, s = self.start, self.end, self.over_s
        u = np.asarray(u, dtype=float)
        total = s * (a + b) / 2
        # inside the ramp: the root of (b - a)/(2s) t^2 + a t - u = 0, in a form that also
        # holds for a = 0 and a = b
        with np.errstate(invalid="ignore", divide="ignore"):  # u = 0 with a = 0: 0/0, which is t = 0
            inside = np.nan_to_num(2 * u / (a + np.sqrt(np.maximum(a * a + 2 * (b - a) * u / s, 0.0))))
            after = s + (u - total) / b
        return np.where(u <= total, inside, after)

    def arrivals_s(self, *, num: int | None, duration_s: float | None, seed: int) -> np.ndarray:
        if num is None and duration_s is None:
            raise ValueError("bound the schedule by num and/or duration_s")
        # the process at rate 1 in the ramp's own time, up to the count the bounds allow
        limit_u = math.inf if duration_s is None else float(self.expected(np.array(duration_s)))
        rng = np.random.default_rng(seed)
        parts, u, count = [], 0.0, 0
        while True:
            block = 4096 if num is None else min(4096, num - count)
            if block <= 0:
                break
            g = arrivals.gaps(1.0, block, process=self.arrival, burstiness=self.burstiness, rng=rng)
            offsets = u + np.concatenate(([0.0], np.cumsum(g[:-1])))
            u = offsets[-1] + g[-1]
            if offsets[-1] >= limit_u:
                parts.append(offsets[offsets < limit_u])
                break
            parts.append(offsets)
            count += block
        t = self.at(np.concatenate(parts)) if parts else np.empty(0)
        return t if duration_s is None else t[t < duration_s]
