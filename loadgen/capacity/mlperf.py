"""MLPerf Inference's server scenario for an LLM, as `loadgen capacity --preset mlperf-server`
judges a probe (docs/check.md, "MLPerf server scenario").

What MLPerf's LoadGen checks, read in mlcommons/inference (loadgen/results.cc, early_stopping.cc,
loadgen.cc) and its limits file (loadgen/mlperf.conf); the early-stopping rule is the appendix of
mlcommons/inference_policies' inference_rules.adoc:
- Poisson arrivals at the target rate for at least 600 s (`min_duration`: the last request's
  scheduled time; LoadGen draws its schedule until a query lands at or after 600 s, so a probe
  sends a little past it, 10 gaps at its lowest rate, and is judged on LoadGen's queries only);
- latencies from each request's *scheduled* time (a late client counts against the server):
  TTFT, and TPOT = (latency - TTFT) / (tokens - 1) per request;
- the 99th percentile of each, LoadGen's way (the sorted values' element at floor(n * 0.99)),
  within the benchmark's limits;
- early stopping, for TTFT and TPOT apart: with t of the n requests over the limit, the run
  passes only if n >= h + t, h the smallest count with I(p - d; h, t + 1) < 1 - c (I the
  regularized incomplete beta function, p = 0.99, d = 0, c = 0.99): enough requests that a
  server whose true 99th percentile were over the limit would show more than t of them with
  99% confidence. With none over the limit that is 459 requests.
A request that failed counts as over both limits (LoadGen has no failed query: its run would be
invalid); a one-token answer has no TPOT and counts as under it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cache

# mlcommons/inference loadgen/mlperf.conf: <benchmark>.Server.ttft_latency, tpot_latency (ms)
LIMITS_MS: dict[str, tuple[float, float]] = {
    "llama2-70b": (2000, 200),
    "llama2-70b-interactive": (450, 40),
    "mixtral-8x7b": (2000, 200),
    "llama3_1-405b": (6000, 175),
    "llama3_1-405b-interactive": (4500, 80),
    "llama3_1-8b": (2000, 100),
    "llama3_1-8b-interactive": (500, 30),
    "deepseek-r1": (2000, 80),
    "deepseek-r1-interactive": (1500, 15),
}
DEFAULT_BENCHMARK = "llama3_1-8b"
PERCENTILE = 0.99  # *.Server.target_latency_percentile = 99
CONFIDENCE = 0.99  # results.cc EarlyStopping: confidence 0.99, tolerance 0
TOLERANCE = 0.0
MIN_DURATION_S = 600.0  # *.Server.min_duration = 600000 (ms)


def _odds(h: int, t: int, q: float) -> float:
    """P(at most t of h + t requests over the limit) when each is over it with probability
    1 - q: the binomial CDF, which is I(q; h, t + 1)."""
    n, terms = h + t, []
    for x in range(t + 1):
        log_choose = math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(n - x + 1)
        terms.append(log_choose + (n - x) * math.log(q) + x * math.log1p(-q))
    top = max(terms)
    return math.exp(top) * sum(math.exp(v - top) for v in terms)


@cache
def min_passing(t: int, p: float = PERCENTILE, d: float = TOLERANCE, c: float = CONFIDENCE) -> int:
    """The smallest h with I(p - d; h, t + 1) < 1 - c (early_stopping.cc's find_min_passing): a
    run with t requests over the limit passes early stopping from h + t requests on."""
    q = p - d
    lo = math.ceil(math.log(1 - c) / math.log(q))  # t = 0's answer; h grows with t
    hi = lo
    while _odds(hi, t, q) >= 1 - c:
        lo, hi = hi, hi * 2
    while lo < hi:  # the first h in [lo, hi] that passes (the odds fall as h grows)
        mid = (lo + hi) // 2
        if _odds(mid, t, q) < 1 - c:
            hi = mid
        else:
            lo = mid + 1
    return lo


def percentile(values, p: float = PERCENTILE) -> float:
    """LoadGen's percentile: the sorted values' element at floor(n * p)."""
    import numpy as np

    s = np.sort(values)
    return float(s[min(len(s) - 1, int(len(s) * p))])


@dataclass
class Verdict:
    """One probe judged as MLPerf's LoadGen would judge a server-scenario run."""

    benchmark: str
    n: int  # requests scheduled in the measured window
    ttft_p99_ms: float
    tpot_p99_ms: float
    ttft_limit_ms: float
    tpot_limit_ms: float
    ttft_over: int  # requests over the TTFT limit (failed ones included)
    tpot_over: int
    ttft_needed: int  # requests early stopping needs with that many over (h + t)
    tpot_needed: int
    scheduled_s: float  # the last request's scheduled time from the first's
    min_duration_s: float
    not_judged: int = 0  # sent after LoadGen's last query (the probe sends a little past it)

    @property
    def constraints_met(self) -> bool:
        return self.ttft_p99_ms <= self.ttft_limit_ms and self.tpot_p99_ms <= self.tpot_limit_ms

    @property
    def early_stopping_met(self) -> bool:
        return self.n >= self.ttft_needed and self.n >= self.tpot_needed

    @property
    def min_duration_met(self) -> bool:
        return self.scheduled_s >= self.min_duration_s

    @property
    def passed(self) -> bool:
        """What the capacity search goes by: the latency limits and early stopping. The minimum
        duration is said apart (a shorter --duration is a quick look, never a valid result)."""
        return self.constraints_met and self.early_stopping_met

    @property
    def valid(self) -> bool:
        return self.passed and self.min_duration_met

    @property
    def scheduled_per_s(self) -> float:
        """LoadGen's result for the server scenario: "Scheduled samples per second", (n - 1) over
        the last request's scheduled time."""
        return (self.n - 1) / self.scheduled_s if self.scheduled_s > 0 else 0.0

    def failing(self) -> list[str]:
        out = []
        if self.ttft_p99_ms > self.ttft_limit_ms:
            out.append(f"TTFT p99 {self.ttft_p99_ms:.0f} ms > {self.ttft_limit_ms:g} ms")
        if self.tpot_p99_ms > self.tpot_limit_ms:
            out.append(f"TPOT p99 {self.tpot_p99_ms:.2f} ms > {self.tpot_limit_ms:g} ms")
        if not self.early_stopping_met:
            out.append(f"early stopping ({self.early_stopping()})")
        return out

    def early_stopping(self) -> str:
        """LoadGen's early-stopping result in words, for TTFT and TPOT."""
        need = max(self.ttft_needed, self.tpot_needed)
        if self.n >= need:
            return (
                f"successful: {self.n} requests, {self.ttft_over} over the TTFT limit (needs >= {self.ttft_needed}), "
                f"{self.tpot_over} over the TPOT limit (needs >= {self.tpot_needed})"
            )
        return (
            f"unsuccessful: {self.n} requests with {self.ttft_over} over the TTFT limit and {self.tpot_over} over "
            f"the TPOT limit; it would need at least {need - self.n} more, every one under both"
        )

    def statement(self) -> str:
        duration = (
            f"min duration met ({self.scheduled_s:.0f} s)"
            if self.min_duration_met
            else f"min duration NOT met ({self.scheduled_s:.0f} s < {self.min_duration_s:g} s): not a valid MLPerf run"
        )
        return (
            f"{self.scheduled_per_s:.2f} scheduled samples/s; TTFT p99 {self.ttft_p99_ms:.0f} ms (limit "
            f"{self.ttft_limit_ms:g}), TPOT p99 {self.tpot_p99_ms:.2f} ms (limit {self.tpot_limit_ms:g}); "
            f"early stopping {self.early_stopping()}; {duration}"
        )

    def to_dict(self) -> dict:
        return asdict(self) | {
            "constraints_met": self.constraints_met,
            "early_stopping_met": self.early_stopping_met,
            "min_duration_met": self.min_duration_met,
            "valid": self.valid,
            "scheduled_samples_per_s": self.scheduled_per_s,
            "early_stopping": self.early_stopping(),
            "statement": self.statement(),
        }


def judge(frame, benchmark: str = DEFAULT_BENCHMARK, min_duration_s: float = MIN_DURATION_S) -> Verdict:
    """A probe's request frame (loadgen.measures.frame) judged as MLPerf's server scenario."""
    import numpy as np

    ttft_limit, tpot_limit = LIMITS_MS[benchmark]
    frame = frame.sort_values("t_scheduled_ns")
    sched = frame["t_scheduled_ns"].to_numpy(dtype=float)
    # LoadGen's queries: those scheduled before min_duration and the first at or after it (its
    # schedule is drawn until a query lands there; the probe sends a little past it)
    past = np.flatnonzero(sched - sched[0] >= min_duration_s * 1e9) if len(sched) else np.empty(0, int)
    sent = len(frame)
    if len(past):
        frame, sched = frame.iloc[: past[0] + 1], sched[: past[0] + 1]
    ok = frame["ok"].to_numpy(dtype=bool)
    ttft = np.where(ok, frame["ttft_from_scheduled_ms"].to_numpy(dtype=float), np.inf)
    tpot = frame["tpot_ms"].to_numpy(dtype=float)
    tpot = np.where(ok, np.nan_to_num(tpot, nan=0.0), np.inf)  # one token: no TPOT, under the limit
    n = len(frame)
    ttft_over, tpot_over = int((ttft > ttft_limit).sum()), int((tpot > tpot_limit).sum())
    return Verdict(
        benchmark=benchmark,
        n=n,
        ttft_p99_ms=percentile(ttft) if n else math.inf,
        tpot_p99_ms=percentile(tpot) if n else math.inf,
        ttft_limit_ms=ttft_limit,
        tpot_limit_ms=tpot_limit,
        ttft_over=ttft_over,
        tpot_over=tpot_over,
        ttft_needed=min_passing(ttft_over) + ttft_over,
        tpot_needed=min_passing(tpot_over) + tpot_over,
        scheduled_s=float(sched.max() - sched.min()) / 1e9 if n else 0.0,
        min_duration_s=min_duration_s,
        not_judged=sent - n,
    )


def lowest_rate(duration_s: float, margin: bool = True) -> float:
    """The lowest Poisson rate a probe of `duration_s` should run at to send the requests early
    stopping needs with none over the limits (459): its expected count that many (margin=False:
    below it, early stopping fails more often than not), or that many three standard deviations
    below its expectation (a Poisson count's sd is its mean's square root). Rounded up to two
    significant digits."""
    need = float(min_passing(0) + 1)
    if margin:
        need = ((3 + math.sqrt(9 + 4 * need)) / 2) ** 2  # m - 3 sqrt(m) = need
    rate = need / duration_s
    digits = 1 - math.floor(math.log10(rate))
    return math.ceil(rate * 10**digits) / 10**digits
