"""Capacity search: the highest load (concurrency or rate) at which a variant meets the SLOs
(docs/check.md). Doubling from `start` until a level fails, then bisection between the last
level that held and the first that failed, down to `resolution`; then both boundary levels
are measured again (`repeats` times in all) so that one noisy run cannot move the answer, and
the result says how often each held."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Probe:
    level: float
    passed: bool
    output_tok_s: float | None = None
    failing: list[str] = field(default_factory=list)
    detail: dict | None = None  # how it was judged, where a preset says more (loadgen.capacity.mlperf)


@dataclass
class Capacity:
    variant: str
    capacity: float | None  # the highest level that held; None: even `start` failed
    held_at_capacity: str = ""  # e.g. "3/3"
    failed_above: str = ""  # e.g. "3/3 at 24"
    above_limit: bool = False  # held at every level up to the limit
    sure: bool = False  # every repeat agreed
    probes: list[Probe] = field(default_factory=list)

    @property
    def statement(self) -> str:
        if self.capacity is None:
            return f"fails the SLOs already at the lowest level ({self.probes[0].level:g})"
        if self.above_limit:
            return f"holds at every level up to the limit {self.capacity:g} ({self.held_at_capacity})"
        how = "sure" if self.sure else "not sure: the repeats disagree"
        return f"capacity {self.capacity:g} (held {self.held_at_capacity}; failed {self.failed_above}); {how}"


def _next(lo: float, hi: float, integer: bool) -> float | None:
    mid = (lo + hi) / 2
    if integer:
        mid = math.floor(mid)
        return mid if lo < mid < hi else None
    return mid


def search(
    variant: str,
    probe: Callable[[float], Probe],
    *,
    start: float,
    limit: float,
    integer: bool,
    resolution: float = 0.1,
    repeats: int = 3,
) -> Capacity:
    probes: list[Probe] = []

    def run(level: float) -> Probe:
        p = probe(level)
        probes.append(p)
        return p

    lo, hi, level = None, None, start
    while level <= limit:
        if run(level).passed:
            lo = level
            if level == limit:
                break
            level = min(level * 2, limit)
        else:
            hi = level
            break
    if lo is None:
        return Capacity(variant, None, probes=probes)
    if hi is None:
        held = 1 + sum(run(lo).passed for _ in range(repeats - 1))
        return Capacity(variant, lo, f"{held}/{repeats}", "", True, held == repeats, probes)
    while True:  # bisection down to one concurrency step, or `resolution` of the level
        if not integer and hi - lo <= resolution * lo:
            break
        mid = _next(lo, hi, integer)
        if mid is None:
            break
        if run(mid).passed:
            lo = mid
        else:
            hi = mid
    held = 1 + sum(run(lo).passed for _ in range(repeats - 1))
    failed = 1 + sum(not run(hi).passed for _ in range(repeats - 1))
    return Capacity(
        variant,
        lo,
        f"{held}/{repeats}",
        f"{failed}/{repeats} at {hi:g}",
        False,
        held == repeats and failed == repeats,
        probes,
    )


def recommend(results: list[Capacity], baseline: str) -> list[str]:
    """Which variant carries the most load within the SLOs; and, from the throughput each
    variant reached at the levels all of them measured, the lowest of those levels at which the
    baseline carried at least as much as every SD variant: above it, SD should be off."""
    lines = []
    ranked = sorted((r for r in results if r.capacity is not None), key=lambda r: r.capacity or 0.0, reverse=True)
    if not ranked:
        return ["No variant meets the SLOs even at the lowest level: relax the SLOs or add capacity."]
    best = ranked[0]
    ties = [r.variant for r in ranked if r.capacity == best.capacity]
    lines.append(
        f"Most load within the SLOs: {' and '.join(ties)} (capacity {best.capacity:g}"
        + (", at the limit searched" if best.above_limit else "")
        + ")."
    )
    base = next((r for r in results if r.variant == baseline), None)
    sd = [r for r in results if r.variant != baseline]
    if base is None or not sd:
        return lines
    tput = {r.variant: {p.level: p.output_tok_s for p in r.probes if p.output_tok_s} for r in results}
    common = sorted(set.intersection(*(set(t) for t in tput.values()))) if tput else []
    off = [lv for lv in common if all(tput[baseline][lv] >= tput[r.variant][lv] for r in sd)]
    if off:
        lines.append(
            f"Speculative decoding should be off from about {off[0]:g}: there {baseline} carried at least "
            "as many output tokens/s as every SD variant (levels measured by all variants: "
            f"{', '.join(f'{lv:g}' for lv in common)})."
        )
    elif common:
        lines.append(
            f"Speculative decoding paid at every level all variants measured ({', '.join(f'{lv:g}' for lv in common)})."
        )
    return lines
