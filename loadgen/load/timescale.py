"""Time dilation: measuring an emulated GPU that runs S times slower than its model.

A machine too small to keep the emulated engine's pace in real time (servers/emulator/
timeline.py) can run it S times slower: every modeled duration takes S times as long. The
client then sends on a schedule S times slower (open-loop gaps, --duration, timeouts) and, once
the run is over, converts every timestamp back into the emulated hardware's time,

    t' = t0 + (t - t0) / S

so every figure (TTFT, TPOT, ITL, throughput, the server window's rates) is the emulated
hardware's, every ratio (speedup, acceptance) is unchanged, and the client's own delays (send
lateness, loop lag, chunks read late) count S times less, which is what they distort in
emulated terms. The self-check judges those converted delays.

The scale a server runs at is read from its own /metrics (`emulator:time_scale`): an emulator
started by hand with --time-scale is measured right without being told.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from array import array

import aiohttp
import numpy as np
import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from loadgen.client import columnar
from loadgen.load.execute import RunResult
from loadgen.load.scrape import Snapshot, Window

GAUGE = "emulator:time_scale"
CONTROL = "/emulator/clock"


class TimeScaleError(ValueError):
    pass


def parse_scale(text: str | float | None, *, flag: str = "--time-scale", auto: bool = False) -> float | str | None:
    """A scale from an option: a number > 0 (or "auto" where `auto` is allowed); None stays None."""
    if text is None:
        return None
    if auto and str(text).strip().lower() == "auto":
        return "auto"
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        allowed = "a number > 0" + (" or auto" if auto else "")
        raise TimeScaleError(f"{flag} {text!r}: give {allowed}, e.g. {flag} 2 (the emulated GPU twice as slow)")
    return value


def to_emulated(result: RunResult, scale: float) -> RunResult:
    """The run's timestamps in emulated time (in place; returned for convenience). Idempotent
    per result: a result already converted is returned as it is."""
    if scale == 1.0 or result.time_scale != 1.0:
        return result
    t0 = result.t0_ns

    def at(t: int) -> int:  # 0: never happened
        return t0 + round((t - t0) / scale) if t else 0

    for rec in result.records:
        rec.t_scheduled_ns, rec.t_call_ns, rec.t_send_ns = at(rec.t_scheduled_ns), at(rec.t_call_ns), at(rec.t_send_ns)
        rec.t_headers_ns, rec.t_end_ns = at(rec.t_headers_ns), at(rec.t_end_ns)
        rec.queue_delay_ns = round(rec.queue_delay_ns / scale)
        rec.read_delay_ns = round(rec.read_delay_ns / scale)
        rec.chunk_t_ns = array("q", (at(t) for t in rec.chunk_t_ns))
    ticks = np.asarray(result.loop_lag_at_ns, dtype=np.int64)
    result.loop_lag_at_ns = np.where(ticks != 0, t0 + np.rint((ticks - t0) / scale).astype(np.int64), 0)
    result.loop_lag_ns = np.rint(np.asarray(result.loop_lag_ns, dtype=np.int64) / scale).astype(np.int64)
    info = dict(result.load_info)
    if info.get("ramp_s") is not None:
        info["ramp_s"] /= scale
    if info.get("chunk_bound"):
        info["chunk_bound"] = [(round(ns / scale), n) for ns, n in info["chunk_bound"]]
    if info.get("first_sends_ns"):
        info["first_sends_ns"] = [at(t) for t in info["first_sends_ns"]]
    result.load_info = info
    if result.server_window is not None:
        result.server_window = _window(result.server_window, t0 / 1e9, scale)
    result.time_scale = scale
    return result


_TIMES = ("t_scheduled_ns", "t_call_ns", "t_send_ns", "t_headers_ns", "t_end_ns")
_SPANS = ("queue_delay_ns", "read_delay_ns")


def batch_to_emulated(batch: pa.RecordBatch, t0: int, scale: float) -> pa.RecordBatch:
    """A batch of records (loadgen.client.columnar, decoded) in emulated time, as `to_emulated`
    converts each record: the same arithmetic, for every value of the batch at once."""
    if scale == 1.0:
        return batch

    def at(t: np.ndarray) -> np.ndarray:  # 0: never happened
        return np.where(t != 0, t0 + np.rint((t - t0) / scale).astype(np.int64), 0)

    cols = []
    for name in batch.schema.names:
        col = batch.column(name)
        if name in _TIMES:
            col = pa.array(at(col.to_numpy(zero_copy_only=False)))
        elif name in _SPANS:
            col = pa.array(np.rint(col.to_numpy(zero_copy_only=False) / scale).astype(np.int64))
        elif name == "chunk_t_ns":
            values, offsets = columnar.flat(col)
            col = columnar.lists(at(values), offsets)
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=batch.schema)


def _window(w: Window, t0_s: float, scale: float) -> Window:
    def snap(s: Snapshot) -> Snapshot:
        return dataclasses.replace(s, t=t0_s + (s.t - t0_s) / scale)

    return Window(snap(w.before), snap(w.after), [snap(s) for s in w.during])


def scale_in(text: str) -> float | None:
    """The `emulator:time_scale` a /metrics text reports (None: not an emulator, or an old one)."""
    try:
        for fam in text_string_to_metric_families(text):
            if fam.name == GAUGE and fam.samples:
                return float(fam.samples[0].value)
    except ValueError:
        return None
    return None


def window_scales(w: Window | None) -> list[float]:
    """The time scales the server reported over a window (before, during, after)."""
    if w is None:
        return []
    return [v for s in (w.before, *w.during, w.after) for (name, _), v in s.samples.items() if name == GAUGE]


async def server_scale(session: aiohttp.ClientSession, metrics_url: str | None, timeout_s: float = 5.0) -> float | None:
    """The scale the server runs at, from its /metrics; None when it reports none."""
    if not metrics_url:
        return None
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(metrics_url) as resp:
                if resp.status != 200:
                    return None
                return scale_in(await resp.text())
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        return None


def control_url(api_base: str) -> str:
    root = api_base.rstrip("/")
    return (root[: -len("/v1")] if root.endswith("/v1") else root) + CONTROL


async def set_server_scale(
    session: aiohttp.ClientSession,
    api_base: str,
    scale: float,
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
) -> None:
    """Ask the emulator at `api_base` to run at `scale` from its next step on; TimeScaleError
    with the reason when it cannot (not an emulator, refused)."""
    url = control_url(api_base)
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(url, json={"time_scale": scale}, headers=headers or {}) as resp:
                body = await resp.text()
                if resp.status != 200:
                    raise TimeScaleError(
                        f"the server at {url} did not take time scale {scale:g} "
                        f"(HTTP {resp.status}: {body[:200]}); only the emulator runs dilated"
                    )
    except (aiohttp.ClientError, TimeoutError) as e:
        raise TimeScaleError(f"cannot set the time scale at {url}: {e or type(e).__name__}") from None
