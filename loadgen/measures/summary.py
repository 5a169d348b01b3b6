"""The run summary (`summary.json`): every figure defined in docs/metrics.md, from the request
frame in memory or on disk (loadgen.measures.rows): per-request figures one column at a time,
per-chunk figures in batches (loadgen.measures.chunks), so a run of any length is summarized in
bounded memory."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from loadgen.measures import phases, slo, timeline
from loadgen.measures.chunks import ChunkFigures, chunk_figures
from loadgen.measures.describe import describe
from loadgen.measures.reconcile import can_skip, declared_k, reconcile
from loadgen.measures.rows import Rows, counts
from loadgen.measures.selfcheck import self_check

_NS = 1e9


def _f(rows: Rows, name: str) -> np.ndarray:
    return rows.array(name, float)


def steady_window(
    rows: Rows, warmup: np.ndarray, measured: np.ndarray, flight: InFlight | None = None
) -> tuple[int, int, str] | None:
    """(start ns, end ns, kind) of the window throughput is measured over, or None when no
    request past warm-up was sent.

    Starts when the first request past warm-up is sent. An open loop's ends when the last
    request is sent: its arrivals stop there, and the load drains. A closed loop's (`flight`:
    its requests in flight over time) ends when they leave their peak for the last time, when
    its first user has nothing more to send: until then every user is busy, its last sends included (its last
    send ended the window before, a straggler's end: with two requests a user the window was the
    first wave alone, ending at its slowest request, and one prefill step more or less for three
    of 64 users moved the main job's figure by 7%). If the window is shorter than the median E2E
    of the measured requests there was no steady state: the window is then the whole measured
    run, to the last response (kind "full_run")."""
    send = rows.array("t_send_ns")
    sent = send[~warmup & (send > 0)]
    if sent.size == 0:
        return None
    start = int(sent.min())
    end = int(send.max())
    if flight is not None:
        end = flight.last_peak() or end
    e2e = pd.Series(_f(rows, "e2e_ms")[measured]).median()
    if end - start >= (0 if np.isnan(e2e) else e2e * 1e6) and end > start:
        return start, end, "steady"
    return start, int(rows.array("t_end_ns").max()), "full_run"


class InFlight:
    """The requests in flight after each send and end, in time order (`times`, `counts`; at one
    instant, ends before sends; a request that never ended (0) is in flight to the end), from
    every sent request (`send_ns` > 0): sorted once for the figures below."""

    NEVER = np.iinfo(np.int64).max

    def __init__(self, send_ns: np.ndarray, end_ns: np.ndarray) -> None:
        sent = send_ns > 0
        start = send_ns[sent]
        end = np.where(end_ns[sent] > 0, end_ns[sent], self.NEVER)
        times = np.concatenate([start, end])
        steps = np.concatenate([np.ones(len(start), np.int64), -np.ones(len(end), np.int64)])
        order = np.lexsort((steps, times))
        self.times, self.counts = times[order], np.cumsum(steps[order])

    def most(self) -> int:
        """The most requests in flight at once (0: nothing sent); one that ends as another is
        sent is not counted beside it."""
        return int(self.counts.max()) if len(self.counts) else 0

    def last_peak(self) -> int:
        """When the requests in flight leave their peak for the last time (0: nothing sent, or
        never left)."""
        if not len(self.counts):
            return 0
        after = np.flatnonzero(self.counts == self.counts.max())[-1] + 1  # the event that left the peak
        return int(self.times[after]) if after < len(self.times) and self.times[after] != self.NEVER else 0


def in_flight_at_most(send_ns: np.ndarray, end_ns: np.ndarray) -> int:
    """The most requests in flight at once (InFlight.most)."""
    return InFlight(send_ns, end_ns).most()


def _closed(config: dict) -> bool:
    """A closed loop's run (its load has users: --concurrency, a users ramp)."""
    return (config.get("load") or {}).get("concurrency") is not None


def _inside(times: np.ndarray, start: int, end: int) -> np.ndarray:
    return (times >= start) & (times <= end)


def sending(rows: Rows, load_info: dict, load: dict | None, flight: InFlight) -> dict:
    """What the client actually sent: count and achieved send rate (to compare with an
    open-loop target), the most requests it had in flight at once against the load's own bound
    (a closed loop's users, an open loop's cap; `short` when a closed loop never had all its users
    in flight: too few requests, or each ended before the last user joined), plus what the
    executor reported (a closed loop's ramp: the spread of its users' first sends), from how
    many worker processes, and any that died mid-run."""
    send = rows.array("t_send_ns")
    sent = send[send > 0]
    span = (int(sent.max()) - int(sent.min())) / _NS if len(sent) > 1 else 0.0
    load = load or {}
    users = load.get("concurrency")  # a closed loop's (and a users ramp's); None for arrivals
    bound = users if users is not None else load.get("max_concurrency")
    most = flight.most()
    return {
        "sent": int(len(sent)),
        "send_rate_req_s": (len(sent) - 1) / span if span > 0 else None,
        "in_flight_max": most,
        "in_flight_bound": bound,
        "short": bool(users is not None and most < users),
        "ramp_s": load_info.get("ramp_s"),
        "workers": load_info.get("workers", 1),
        "workers_lost": load_info.get("workers_lost", []),
        "worker_nodes": load_info.get("worker_nodes"),
    }


def acceptance_client(
    rows: Rows, measured: np.ndarray, chunks: ChunkFigures, server_figures: dict | None = None, config=None
) -> dict:
    """The client's view of speculative decoding over the measured requests: engine steps
    (from chunks, or reconstructed from bursts; loadgen.measures.steps), the stream's count of
    accepted drafts (loadgen.measures.reconcile: coalesced steps told by the server's step
    counter, never by its per-request counts), its reconciliation with the server's per-request
    counts and counters by the written rule (told by the run's speculative config whether a step
    may draft nothing), and the per-request counts themselves."""
    source = rows.col("steps_source")
    sources = counts(source[measured & (source != "none").to_numpy()])
    total = chunks.step_tokens
    figures = server_figures or {}
    declared = (config or {}).get("speculative_config")
    skip, k = can_skip(declared), declared_k(declared)
    rec = reconcile(rows, chunks, measured, figures.get("spec_decode"), figures.get("server"), skip, k)
    mine = rec["measured"]
    n = total - mine["accepted_tokens"]  # each step: one token + its delivered drafts (the stream's count)
    out: dict[str, Any] = {
        "steps_source": (next(iter(sources)) if len(sources) == 1 else "mixed") if sources else "none",
        "steps_sources": sources,
        "decode_steps": n,
        "tokens_per_step_mean": total / n if n else None,
        **mine,
        "reconciliation": rec["reconciliation"],
        "server_reported": None,
    }
    drafted_col, accepted_col = _f(rows, "server_draft_tokens"), _f(rows, "server_accepted_tokens")
    rep = measured & ~np.isnan(drafted_col) & ~np.isnan(accepted_col)
    if rep.any():
        drafted, accepted = int(drafted_col[rep].sum()), int(accepted_col[rep].sum())
        out["server_reported"] = {
            "requests": int(rep.sum()),
            "draft_tokens": drafted,
            "accepted_tokens": accepted,
            "acceptance_rate": accepted / drafted if drafted else None,
            "source": (
                "the server's per-request counts (its engine's: vLLM's metrics.speculative_decoding, "
                "SGLang's sglext.spec_tokens_details, llama.cpp's timings)"
            ),
        }
        steps = _f(rows, "server_spec_steps")[rep]
        steps = steps[~np.isnan(steps)]
        if len(steps):  # vLLM: verify steps too, so acceptance length, pooled and per request
            by_request = _f(rows, "server_acceptance_length")[rep]
            by_request = by_request[~np.isnan(by_request)]
            total_steps = int(steps.sum())
            out["server_reported"].update(
                spec_steps=total_steps,
                mean_acceptance_length=1 + accepted / total_steps if total_steps else None,
                per_request_acceptance_length=(
                    {
                        "mean": float(by_request.mean()),
                        "p10": float(np.percentile(by_request, 10)),
                        "p50": float(np.percentile(by_request, 50)),
                        "p90": float(np.percentile(by_request, 90)),
                        "requests": int(len(by_request)),
                    }
                    if len(by_request)
                    else None
                ),
            )
    return out


STEADY_RULE = (
    "requests sent once the requests in flight first reached the run's median (time-weighted over "
    "the sending period) and finished by the last send, when the drain begins"
)


def steady_state(rows: Rows, warmup: np.ndarray, ok: np.ndarray) -> tuple[int, int, np.ndarray] | None:
    """--steady-state: (start ns, end ns, which requests count) by STEADY_RULE, or None when no
    measured request falls inside (too short a run: then all count)."""
    measured = ok & ~warmup
    send, end_ns = rows.array("t_send_ns"), rows.array("t_end_ns")
    was_sent = send > 0
    if not measured.any() or was_sent.sum() < 2:
        return None
    t = np.concatenate([send[was_sent], end_ns[was_sent]]).astype(np.int64)
    n_sent = int(was_sent.sum())
    step = np.concatenate([np.ones(n_sent, np.int64), -np.ones(n_sent, np.int64)])
    order = np.lexsort((-step, t))
    t, level = t[order], np.cumsum(step[order])
    first, last = int(send[was_sent].min()), int(send[was_sent].max())
    inside = (t >= first) & (t < last)
    if inside.sum() < 2:
        return None
    ts, lv = t[inside], level[inside]
    dur = np.diff(np.append(ts, last)).astype(float)
    sorted_lv = np.argsort(lv, kind="stable")
    cum = np.cumsum(dur[sorted_lv])
    median = lv[sorted_lv][np.searchsorted(cum, cum[-1] / 2)]
    start = int(ts[np.argmax(lv >= median)])
    keep = measured & (send >= start) & (end_ns <= last)
    if not keep.any() or last <= start:
        return None
    return start, last, keep


def summarize(
    frame: pd.DataFrame | Rows,
    loop_lag: tuple,  # (tick times, lags[, each tick's worker]): loadgen.load.execute.RunResult.loop_lag
    *,
    config: dict,
    interrupted: bool = False,
    goodput: dict[str, float] | None = None,
    lateness_threshold_ms: float = 5.0,
    timing_threshold_ms: float = 4.0,
    load_info: dict | None = None,
    server_figures: dict | None = None,
    steady: bool = False,
) -> dict:
    """Every figure of docs/metrics.md from the request frame (a DataFrame, or loadgen.measures.rows'
    Rows over requests.parquet), the client's loop-lag ticks and `server_figures` (the server's
    /metrics window as figures: loadgen.load.scrape.figures)."""
    rows = frame if isinstance(frame, Rows) else Rows(frame)
    ok = rows.array("ok").astype(bool)
    warmup = rows.array("warmup").astype(bool)
    error_type = rows.col("error_type")
    cancelled = (error_type == "cancelled").to_numpy(dtype=bool, na_value=False)
    steady_info, window = None, None
    if steady:
        steady_info, warmup, window = _steady(rows, warmup, ok, config["clock"]["t0_ns"])
    measured = ok & ~warmup
    failed = ~ok & ~warmup & ~cancelled
    out: dict = {
        "config": config,
        "time_scale": config.get("time_scale") or 1.0,
        "completed": int(measured.sum()),
        "failed": int(failed.sum()),
        "cancelled": int(cancelled.sum()),
        "interrupted": interrupted,
        "errors": counts(error_type[failed]),
    }
    send = rows.array("t_send_ns")
    flight = InFlight(send, rows.array("t_end_ns"))  # the window's (a closed loop's) and `sending`'s
    if window is None and rows.n:
        window = steady_window(rows, warmup, measured, flight if _closed(config) else None)
    sent = send[send > 0]
    out["duration_s"] = (int(rows.array("t_end_ns").max()) - int(sent.min())) / _NS if len(sent) else 0.0
    lag_worker = loop_lag[2] if len(loop_lag) > 2 else None
    window_ns = None if window is None else window[:2]
    chunks = chunk_figures(rows, measured, ok, window_ns, loop_lag[0], loop_lag[1], lag_worker)
    out.update(_throughput(rows, ok, chunks, window, config["clock"]["t0_ns"]))
    gaps = chunks.gaps.result()  # once: the summary's inter-chunk figure and the self-check's yardstick
    check = _self_check(rows, loop_lag, chunks, gaps, load_info or {}, lateness_threshold_ms, timing_threshold_ms)
    with_chunks = rows.array("n_chunks") > 0
    sources = counts(rows.col("token_count_source")[measured & with_chunks])
    source = "none" if not sources else (next(iter(sources)) if len(sources) == 1 else "mixed")
    decode = chunks.decode()
    out.update(
        ttft_ms=describe(_f(rows, "ttft_ms")[measured]),
        tpot_ms=describe(_f(rows, "tpot_ms")[measured]),
        itl_ms=chunks.itl.result(),
        inter_chunk_ms=gaps,
        e2e_ms=describe(_f(rows, "e2e_ms")[measured]),
        ttft_from_scheduled_ms=describe(_f(rows, "ttft_from_scheduled_ms")[measured]),
        e2e_from_scheduled_ms=describe(_f(rows, "e2e_from_scheduled_ms")[measured]),
        queue_delay_ms=describe(_f(rows, "queue_delay_ms")[~warmup]),
        tokens_per_chunk_mean=chunks.decode_total / chunks.decode_count if chunks.decode_count else None,
        tokens_per_chunk=decode,
        acceptance_client=acceptance_client(rows, measured, chunks, server_figures, config),
        prompt_tokens_total=int(np.nan_to_num(_f(rows, "prompt_tokens")[measured]).sum()),
        completion_tokens_total=int(rows.array("completion_tokens")[measured].sum()),
        token_count_source=source,
        token_count_sources=sources,
        goodput=_goodput(rows, warmup, cancelled, ok, goodput, window_ns) if goodput else None,
        sending=sending(rows, load_info or {}, config.get("load"), flight),
        client_bound=check["client_bound"],
        self_check=check,
        spec_decode=(server_figures or {}).get("spec_decode"),
        server=(server_figures or {}).get("server"),
        steady_state=steady_info,
        conversations=conversations(rows, warmup, measured),
        phases=phases.summary(rows, measured),
        timeline=timeline.timeline(rows, server_figures),
        stopped_early=(load_info or {}).get("stopped_early"),
    )
    return out


def _steady(rows: Rows, warmup: np.ndarray, ok: np.ndarray, t0_ns: int):
    """--steady-state: (its record, the requests left out of the figures as warm-up, the
    window) by STEADY_RULE; all count where no request falls inside."""
    found = steady_state(rows, warmup, ok)
    before = int((ok & ~warmup).sum())
    if found is None:
        info = {
            "rule": STEADY_RULE,
            "found": False,
            "requests": before,
            "note": "no request falls inside: the run is too short for a steady state; all count",
        }
        return info, warmup, None
    start, end, keep = found
    ramp = int(((ok & ~warmup) & (rows.array("t_send_ns") < start)).sum())
    info = {
        "rule": STEADY_RULE,
        "found": True,
        "start_s": (start - t0_ns) / _NS,
        "end_s": (end - t0_ns) / _NS,
        "requests": int(keep.sum()),
        "left_out_ramp": ramp,
        "left_out_drain": before - int(keep.sum()) - ramp,
    }
    return info, warmup | (ok & ~keep), (start, end, "steady_state")  # the load, not the figures


def _throughput(rows: Rows, ok: np.ndarray, chunks, window, t0_ns: int) -> dict:
    """The throughput window's record and the throughputs over it (zero without one)."""
    if window is None:
        return dict(window=None, output_throughput_tok_s=0.0, total_throughput_tok_s=0.0, request_throughput_req_s=0.0)
    start, end, kind = window
    first = _f(rows, "t_first_token_ns")
    prompt = int(np.nan_to_num(_f(rows, "prompt_tokens")[ok & _inside(first, start, end)]).sum())
    done = int((ok & _inside(_f(rows, "t_last_token_ns"), start, end)).sum())
    out_tok = chunks.window_tokens
    span = (end - start) / _NS
    rate = (lambda x: x / span) if span > 0 else (lambda x: 0.0)
    return dict(
        window={
            "kind": kind,
            "start_s": (start - t0_ns) / _NS,
            "duration_s": span,
            "output_tokens": out_tok,
            "prompt_tokens": prompt,
            "completed": done,
        },
        output_throughput_tok_s=rate(out_tok),
        total_throughput_tok_s=rate(out_tok + prompt),
        request_throughput_req_s=rate(done),
    )


def _self_check(
    rows: Rows, loop_lag: tuple, chunks, gaps: dict, load_info: dict, lateness_ms: float, timing_ms: float
) -> dict:
    """Is the client the bottleneck? (loadgen.measures.selfcheck), with where its chunk times
    were taken and which path measured."""
    check = self_check(
        rows,
        loop_lag[0],
        loop_lag[1],
        lateness_ms,
        timing_ms,
        chunk_lag=chunks.lag_all(),
        chunk_lag_by_worker={w: chunks.lag(w) for w in chunks.lags if w >= 0},
        lag_worker=loop_lag[2] if len(loop_lag) > 2 else None,
        chunk_bound=load_info.get("chunk_bound"),
        chunk_times=load_info.get("chunk_times"),
        figures=_medians(rows, gaps),
    )
    check["chunk_times"] = load_info.get("chunk_times")  # where chunk times were taken
    check["client_path"] = load_info.get("client_path")  # compiled, or pure Python
    if reads := load_info.get("chunk_time_reads"):  # compiled: how many reads each way
        check["chunk_time_reads"] = reads
    return check


def _medians(rows: Rows, gaps: dict) -> dict:
    """The figures the self-check judges the client's delays against: the median TTFT,
    inter-chunk gap and end-to-end latency of the requests that completed (None where none)."""
    ok = rows.array("ok").astype(bool)

    def median(values: np.ndarray):
        values = values[ok & ~np.isnan(values)]
        return float(np.median(values)) if len(values) else None

    return {
        "ttft_ms": median(_f(rows, "ttft_ms")),
        "gap_ms": gaps["p50"],
        "e2e_ms": median(_f(rows, "e2e_ms")),
    }


def conversations(rows: Rows, warmup: np.ndarray, measured: np.ndarray) -> dict | None:
    """Multi-turn runs: how many conversations, how many of them ran every turn, and per turn
    number the requests, mean prompt tokens and TTFT p50 (measured requests; None when the
    run had no conversation)."""
    if "session" not in rows:
        return None
    session = rows.col("session")
    in_conv = (session != "").to_numpy(dtype=bool, na_value=False)
    if not in_conv.any():
        return None
    pick = in_conv & ~warmup
    conv = pd.DataFrame(
        {
            "session": session[pick].astype(str).to_numpy(),
            "turn": rows.array("turn")[pick],
            "ok": rows.array("ok")[pick].astype(bool),
            "measured": measured[pick],
            "prompt_tokens": _f(rows, "prompt_tokens")[pick],
            "ttft_ms": _f(rows, "ttft_ms")[pick],
        }
    )
    per = conv.groupby("session").agg(turns=("turn", "size"), ok=("ok", "all"))
    m = conv[conv["measured"]]
    by_turn = {
        int(k): {
            "requests": int(len(g)),
            "prompt_tokens_mean": float(g["prompt_tokens"].astype(float).mean()),
            "ttft_ms_p50": float(g["ttft_ms"].median()),
        }
        for k, g in m.groupby("turn")
    }
    return {
        "sessions": int(len(per)),
        "turns": int(len(conv)),
        "all_turns_ok": int(per["ok"].sum()),
        "by_turn": by_turn,
    }


def _goodput(
    rows: Rows,
    warmup: np.ndarray,
    cancelled: np.ndarray,
    ok: np.ndarray,
    objectives: dict[str, float],
    window_ns: tuple[int, int] | None,
) -> dict:
    """Share of measured requests meeting every objective, and good requests completed per
    second of the throughput window."""
    judged = ~warmup & ~cancelled
    columns = {slo.OBJECTIVES[name]: _f(rows, slo.OBJECTIVES[name]) for name in objectives}
    good = judged & slo.good(pd.DataFrame({"ok": ok, **columns}), objectives).to_numpy()
    n_good, n_judged = int(good.sum()), int(judged.sum())
    req_s = None
    if window_ns and window_ns[1] > window_ns[0]:
        inside = int((good & _inside(_f(rows, "t_last_token_ns"), *window_ns)).sum())
        req_s = inside / ((window_ns[1] - window_ns[0]) / _NS)
    return {
        "objectives_ms": objectives,
        "good": n_good,
        "judged": n_judged,
        "cancelled": int((~warmup & cancelled).sum()),  # cut by the end of the run: not judged
        "fraction": n_good / n_judged if n_judged else None,
        "req_s": req_s,
    }
