"""Scraping a server's metrics (vLLM's /metrics, or its dialect's path) around a measurement window.

A snapshot before and after the window (counters: deltas; histograms: bucket deltas) and
periodic samples within it (gauges as time series). Samples are summed over the `engine`
label (data-parallel engines); `_created` samples, which hold a Unix time, are never added in.
A counter that went down means the server restarted inside the window: its delta is then its
value after, and the window is flagged. The SD figures come from the counters each dialect
has, turned into one set of figures by its `window_sd` (servers/engines/dialect.py); vLLM's as
vLLM derives them (vllm.md): acceptance rate = accepted / draft tokens, mean acceptance length
= 1 + accepted / drafts, per-position acceptance = accepted at position i / drafts.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from loadgen.load.metric_names import COUNTERS, GAUGES, HISTOGRAMS
from servers import engines

if TYPE_CHECKING:  # aiohttp is loaded where a window is scraped: a summary's figures need none of it
    import aiohttp

Key = tuple[str, tuple[tuple[str, str], ...]]  # sample name, labels other than engine


@dataclass
class Snapshot:
    t: float  # time.monotonic() when taken
    samples: dict[Key, float]


def parse(text: str, t: float | None = None) -> Snapshot:
    samples: dict[Key, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "engine"))
            key = (s.name, labels)
            samples[key] = samples.get(key, 0.0) + s.value
    return Snapshot(time.monotonic() if t is None else t, samples)


async def fetch(session: aiohttp.ClientSession, url: str, timeout_s: float = 5.0) -> tuple[float, str] | None:
    """(time.monotonic(), text) of `url` (…/metrics), or None when the server has none or
    cannot answer."""
    import aiohttp

    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(url) as resp:
                if resp.status != 200:
                    return None
                t = time.monotonic()
                return t, await resp.text()
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return None


def parse_or_none(raw: tuple[float, str] | None) -> Snapshot | None:
    if raw is None:
        return None
    try:
        return parse(raw[1], raw[0])
    except ValueError:
        return None


def _values(snap: Snapshot, names: tuple[str, ...], suffix: str = "") -> dict[tuple, float]:
    """Samples of the first of `names` present: labels -> value."""
    for name in names:
        found = {labels: v for (n, labels), v in snap.samples.items() if n == name + suffix}
        if found:
            return found
    return {}


@dataclass
class Window:
    before: Snapshot
    after: Snapshot
    during: list[Snapshot] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.after.t - self.before.t

    @property
    def restarted(self) -> bool:
        """A counter went down: the server restarted inside the window, and counts from before
        the restart are missing."""
        names = {n for aliases in COUNTERS.values() for n in aliases}
        return any(v < self.before.samples.get(key, 0.0) for key, v in self.after.samples.items() if key[0] in names)

    def delta(self, names: tuple[str, ...], suffix: str = "") -> dict[tuple, float]:
        """After minus before, per label set; after alone where the counter went down."""
        a, b = _values(self.after, names, suffix), _values(self.before, names, suffix)
        return {labels: v - b.get(labels, 0.0) if v >= b.get(labels, 0.0) else v for labels, v in a.items()}

    def total(self, key: str) -> float:
        return sum(self.delta(COUNTERS[key]).values())

    def timeline(self, key: str) -> list[list[float]]:
        """[seconds since the window opened, value] for every snapshot that has the gauge."""
        return [
            [s.t - self.before.t, sum(_values(s, GAUGES[key]).values())]
            for s in (self.before, *self.during, self.after)
            if _values(s, GAUGES[key])
        ]

    def series(self, key: str, *, before: bool = True) -> list[float]:
        snaps = (self.before, *self.during, self.after) if before else (*self.during, self.after)
        return [sum(_values(s, GAUGES[key]).values()) for s in snaps if _values(s, GAUGES[key])]

    def histogram(self, key: str) -> dict | None:
        names = HISTOGRAMS[key]
        buckets = self.delta(names, "_bucket")
        if not buckets:
            return None
        by_le: dict = {}
        for labels, v in buckets.items():
            le = dict(labels).get("le")
            by_le[le] = by_le.get(le, 0.0) + v
        order = sorted(by_le, key=lambda le: float("inf") if le == "+Inf" else float(le))
        return {
            "buckets": {le: by_le[le] for le in order},
            "count": sum(self.delta(names, "_count").values()),
            "sum": sum(self.delta(names, "_sum").values()),
        }


class _Counts:
    """The window in one dialect's names (servers/engines/dialect.py's Counts)."""

    def __init__(self, w: Window, counters) -> None:
        self.w, self.counters, self.seconds = w, counters, w.seconds

    def present(self, key: str) -> bool:
        return key in self.counters and bool(_values(self.w.after, self.counters[key]))

    def by_label(self, key: str) -> dict[tuple, float]:
        return self.w.delta(self.counters[key]) if key in self.counters else {}

    def total(self, key: str) -> float:
        return sum(self.by_label(key).values())


def spec_decode(w: Window) -> dict | None:
    """The server's acceptance over the window, from its SD counters in the shape its dialect
    has (servers/engines: each dialect's `window_sd`, the first whose counters are there); None
    without speculative decoding."""
    for d in engines.dialects():
        if d.window_sd is not None and (found := d.window_sd(_Counts(w, d.metrics.counters))) is not None:
            return found
    return None


def server(w: Window) -> dict:
    """Everything else over the window: throughput, load and the server's own latency
    histograms (bucket deltas)."""

    def stats(values: list[float]) -> dict | None:
        return {"mean": sum(values) / len(values), "max": max(values), "samples": len(values)} if values else None

    gen = w.total("generation_tokens")
    success = w.delta(COUNTERS["request_success"])
    return {
        "window_s": w.seconds,
        "samples": 2 + len(w.during),
        "generation_tokens": gen,
        "generation_tok_s": gen / w.seconds if w.seconds > 0 else None,
        "prompt_tokens": w.total("prompt_tokens"),
        "preemptions": w.total("preemptions"),
        "prefix_cache_hit_rate": (
            w.total("prefix_cache_hits") / w.total("prefix_cache_queries") if w.total("prefix_cache_queries") else None
        ),
        "requests_finished": {dict(labels).get("finished_reason", "?"): v for labels, v in success.items()},
        "kv_usage": stats(w.series("kv_usage")),
        "running": stats(w.series("running")),
        "waiting": stats(w.series("waiting")),
        "gauges": {k: w.timeline(k) for k in ("running", "waiting", "kv_usage")},
        "histograms": {k: h for k in HISTOGRAMS if (h := w.histogram(k)) is not None},
        "restarted": w.restarted,
        "emulator": _emulator(w),
    }


def quantile_bound(hist: dict, q: float) -> float | None:
    """The upper edge of the bucket holding quantile q of a histogram's window (inf when it
    is beyond the last edge); None when the window has no samples."""
    if not hist or not hist["count"]:
        return None
    for le, cumulative in hist["buckets"].items():
        if cumulative >= q * hist["count"]:
            return float("inf") if le == "+Inf" else float(le)
    return float("inf")


LAG_LIMIT_S = 0.005  # emulated seconds: chunks written later than this at p99 (what figures carry)
LOST_LIMIT = 0.02  # share of the model's throughput lost to a schedule that fell behind


def _emulator(w: Window) -> dict | None:
    """The emulated engine's check on itself: did it deliver its model's throughput for the
    steps it ran in this window (modeled time over modeled plus lost time), and write each
    step's chunks on time? `behind` when it lost more than LOST_LIMIT of the model's throughput
    or wrote chunks more than LAG_LIMIT_S late at p99 (both in emulated time)."""
    lag = w.histogram("emulator_step_lag")
    slow = w.series("emulator_slowdown", before=False)  # each covers its last 200 steps
    if lag is None and not slow:
        return None
    p99 = quantile_bound(lag, 0.99) if lag is not None else None
    modeled, lost = w.total("emulator_modeled"), w.total("emulator_lost")
    delivered = modeled / (modeled + lost) if modeled + lost > 0 else None
    scales = sorted(set(w.series("emulator_time_scale")))
    return {
        "step_lag_p99_s_at_most": p99,
        "slowdown_max": max(slow) if slow else None,
        "modeled_s": modeled,
        "lost_s": lost,
        "delivered_of_model": delivered,
        "time_scales": scales,
        "behind": bool(
            (p99 is not None and p99 > LAG_LIMIT_S) or (delivered is not None and delivered < 1 - LOST_LIMIT)
        ),
    }


# the counters the timeline follows from sample to sample (the rest come from the first and last)
TIMELINE_COUNTERS = (
    "generation_tokens",
    "prompt_tokens",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
    "spec_accepted_per_pos",
)
_KEPT_NAMES = frozenset(
    [n for names in GAUGES.values() for n in names] + [n for k in TIMELINE_COUNTERS for n in COUNTERS[k]]
)


def gauge_lines(text: str) -> str:
    """A /metrics text cut to the gauges' samples and the timeline's counters (the snapshots
    between the first and the last are read for these only: timelines, means; every other
    counter and the histograms come from the first and the last). A line costs a split; an
    hour of scrapes a few MiB instead of 100s."""
    keep = []
    for line in text.splitlines():
        if line and line[0] != "#":
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in _KEPT_NAMES:
                keep.append(line)
    return "\n".join(keep) + "\n"


def _count(snap: Snapshot, key: str) -> dict[tuple, float]:
    return _values(snap, COUNTERS[key])


def timeline(w: Window) -> dict | None:
    """The window sample by sample (docs/metrics.md, "Over time"): for each interval between
    consecutive snapshots, its end (`t_s`, seconds since the window opened), length, and the
    counters' increase over it (a counter that went down counts its value after, as `delta`
    does), so each series sums to the window's own delta exactly; the gauges at its end.
    None when the window has no sample in between."""
    snaps = [w.before, *w.during, w.after]
    if len(snaps) < 3:
        return None

    def rises(key: str) -> list[list[float]]:
        per = [_count(s, key) for s in snaps]
        labels = sorted({lab for p in per for lab in p}, key=lambda lab: int(dict(lab).get("position", 0)))
        out = []
        for a, b in zip(per, per[1:]):
            row = []
            for lab in labels:
                x, y = a.get(lab, 0.0), b.get(lab, 0.0)
                row.append(y - x if y >= x else y)
            out.append(row)
        return out

    out: dict = {
        "t_s": [s.t - w.before.t for s in snaps[1:]],
        "dt_s": [b.t - a.t for a, b in zip(snaps, snaps[1:])],
    }
    for key in TIMELINE_COUNTERS:
        per = rises(key)
        if key == "spec_accepted_per_pos":
            out["accepted_per_position"] = per if any(per) else None
        else:
            out[key.removeprefix("spec_")] = [sum(r) for r in per]
    for key in ("running", "waiting", "kv_usage"):
        out[key] = [sum(_values(s, GAUGES[key]).values()) if _values(s, GAUGES[key]) else None for s in snaps[1:]]
    return out


class Recorder:
    """One window on a server's /metrics around a run: `begin()` when the measurement starts,
    a sample every `interval_s` within it, `end()` when it is over. While the run goes on only
    the text is fetched, on a connection of its own; parsing (milliseconds per scrape) waits
    until `end()`, off the client's timing path."""

    def __init__(self, url: str, interval_s: float = 1.0) -> None:
        self.url, self.interval_s = url, interval_s
        self._session: aiohttp.ClientSession | None = None
        self._before: tuple[float, str] | None = None
        self._during: list[tuple[float, str]] = []
        self._begin: asyncio.Task | None = None
        self._sampler: asyncio.Task | None = None

    async def begin(self) -> bool:
        """Take the snapshot before; False when the server has no /metrics."""
        if self._session is None:
            import aiohttp

            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
        self._before = await fetch(self._session, self.url)
        if self._before is not None and self.interval_s > 0:
            self._sampler = asyncio.get_running_loop().create_task(self._sample())
        return self._before is not None

    def begin_soon(self) -> None:
        """`begin()` from synchronous code (the feed handing out the first measured request)."""
        self._begin = asyncio.get_running_loop().create_task(self.begin())

    async def _sample(self) -> None:
        assert self._session is not None  # begin() made it
        while True:
            await asyncio.sleep(self.interval_s)
            raw = await fetch(self._session, self.url)
            if raw is not None:  # only the gauges' lines are kept: memory stays small over a long run
                self._during.append((raw[0], gauge_lines(raw[1])))

    async def end(self) -> Window | None:
        """The snapshot after, and the window (None when there was no snapshot before)."""
        try:
            if self._begin is not None:
                await self._begin  # a snapshot before still in flight comes first
            if self._sampler is not None:
                self._sampler.cancel()
                await asyncio.gather(self._sampler, return_exceptions=True)
            if self._before is None or self._session is None:
                return None
            after = parse_or_none(await fetch(self._session, self.url))
        finally:
            if self._session is not None:
                await self._session.close()
        before = parse_or_none(self._before)
        if before is None or after is None:
            return None
        during = [s for s in map(parse_or_none, self._during) if s is not None]
        return Window(before, after, during)


class RunWindow:
    """A run's window on its server's /metrics (`spec`: a loadgen.load.execute.RunSpec), by the
    one rule every backend follows: it opens when the first measured request goes (before the
    load when there is no warm-up, or with `from_start` for a backend that cannot tell when
    warm-up ends) and closes when the load ends. Without a metrics URL every call does nothing
    and `close()` gives None."""

    def __init__(self, spec, from_start: bool = False) -> None:
        self.recorder = Recorder(spec.metrics_url, spec.scrape_interval_s) if spec.metrics_url else None
        self.early = from_start or spec.warmup == 0
        self._open = False

    async def start(self) -> None:
        """The load is about to go: open now when the window starts with it."""
        if self.recorder is not None and self.early:
            self._open = True
            await self.recorder.begin()

    def measuring(self) -> None:
        """The first measured request is going (from synchronous code): open now, if not yet."""
        if self.recorder is not None and not self._open:
            self._open = True
            self.recorder.begin_soon()

    async def close(self) -> Window | None:
        return await self.recorder.end() if self.recorder is not None else None


def figures(w: Window | None) -> dict | None:
    """The window as the summary's figures (`spec_decode`, `server`): plain data, so the
    measures need nothing of the scrape (None: no window)."""
    if w is None:
        return None
    return {"spec_decode": spec_decode(w), "server": server(w), "timeline": timeline(w), "t0_s": w.before.t}
