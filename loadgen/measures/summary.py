"""The run summary (`summary.json`): every figure defined in docs/metrics.md."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from loadgen.measures import slo
from loadgen.measures.describe import describe
from loadgen.measures.frame import measured, token_gaps
from loadgen.measures.selfcheck import self_check

_NS = 1e9


def steady_window(frame: pd.DataFrame) -> tuple[int, int, str] | None:
    """(start ns, end ns, kind) of the window throughput is measured over, or None when no
    request past warm-up was sent.

    Starts when the first request past warm-up is sent; ends when the last request is sent
    (after that the load drains). If that is shorter than the median E2E of the measured
    requests there was no steady state: the window is then the whole measured run, to the
    last response (kind "full_run")."""
    sent = frame.loc[~frame["warmup"] & (frame["t_send_ns"] > 0), "t_send_ns"]
    if sent.empty:
        return None
    start = int(sent.min())
    end = int(frame["t_send_ns"].max())
    e2e = measured(frame)["e2e_ms"].median()
    if end - start >= (0 if np.isnan(e2e) else e2e * 1e6) and end > start:
        return start, end, "steady"
    return start, int(frame["t_end_ns"].max()), "full_run"


def _window_counts(frame: pd.DataFrame, start: int, end: int) -> tuple[int, int, int]:
    """Output tokens arriving, prompt tokens whose first token arrived, and requests
    completing within [start, end], over all successful requests (warm-up included: they
    are part of the load during the window)."""
    ok = frame[frame["ok"]]
    out_tokens = 0
    for t, n in zip(ok["chunk_t_ns"], ok["chunk_tokens"]):
        t = np.asarray(t, dtype=np.int64)
        inside = (t >= start) & (t <= end)
        out_tokens += int(np.asarray(n)[inside].sum())
    first = ok["t_first_token_ns"].astype("float64")
    in_first = (first >= start) & (first <= end)
    prompt = int(ok.loc[in_first, "prompt_tokens"].fillna(0).sum())
    done = ok["t_last_token_ns"].astype("float64")
    completed = int(((done >= start) & (done <= end)).sum())
    return out_tokens, prompt, completed


def _sources(frame: pd.DataFrame) -> tuple[str, dict[str, int]]:
    counts = dict(Counter(frame.loc[frame["n_chunks"] > 0, "token_count_source"]))
    if not counts:
        return "none", counts
    return (next(iter(counts)) if len(counts) == 1 else "mixed"), counts


def sending(frame: pd.DataFrame, load_info: dict) -> dict:
    """What the client actually sent: count and achieved send rate (to compare with an
    open-loop target), plus what the executor reported (a closed loop's ramp: the spread of
    its users' first sends), from how many worker processes, and any that died mid-run."""
    sent = frame.loc[frame["t_send_ns"] > 0, "t_send_ns"].astype("int64")
    span = (int(sent.max()) - int(sent.min())) / _NS if len(sent) > 1 else 0.0
    return {
        "sent": int(len(sent)),
        "send_rate_req_s": (len(sent) - 1) / span if span > 0 else None,
        "ramp_s": load_info.get("ramp_s"),
        "workers": load_info.get("workers", 1),
        "workers_lost": load_info.get("workers_lost", []),
        "worker_nodes": load_info.get("worker_nodes"),
    }


def acceptance_client(m: pd.DataFrame) -> dict:
    """The client's view of speculative decoding over the measured requests: engine steps
    (from chunks, or reconstructed from bursts; loadgen.measures.steps) and, where the server reports
    them per request, its draft and accepted counts."""
    decode = [n for steps in m["step_tokens"] for n in list(steps)[1:]]
    sources = dict(Counter(m.loc[m["steps_source"] != "none", "steps_source"]))
    out: dict[str, Any] = {
        "steps_source": (next(iter(sources)) if len(sources) == 1 else "mixed") if sources else "none",
        "steps_sources": sources,
        "decode_steps": len(decode),
        "tokens_per_step_mean": float(np.mean(decode)) if decode else None,
        "accepted_tokens": int(sum(decode) - len(decode)),
        "server_reported": None,
    }
    rep = m.dropna(subset=["server_draft_tokens", "server_accepted_tokens"])
    if len(rep):
        drafted, accepted = int(rep["server_draft_tokens"].sum()), int(rep["server_accepted_tokens"].sum())
        out["server_reported"] = {
            "requests": int(len(rep)),
            "draft_tokens": drafted,
            "accepted_tokens": accepted,
            "acceptance_rate": accepted / drafted if drafted else None,
            "source": "the server's per-request counts (vLLM's metrics.speculative_decoding, llama.cpp's timings)",
        }
        steps = rep["server_spec_steps"].dropna()
        if len(steps):  # vLLM: verify steps too, so acceptance length, pooled and per request
            by_request = rep["server_acceptance_length"].dropna().to_numpy(float)
            out["server_reported"].update(
                spec_steps=int(steps.sum()),
                mean_acceptance_length=1 + accepted / int(steps.sum()) if int(steps.sum()) else None,
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


def steady_state(frame: pd.DataFrame) -> tuple[int, int, pd.Series] | None:
    """--steady-state: (start ns, end ns, which requests count) by STEADY_RULE, or None when no
    measured request falls inside (too short a run: then all count)."""
    m = measured(frame)
    sent = frame.loc[frame["t_send_ns"] > 0]
    if m.empty or len(sent) < 2:
        return None
    t = np.concatenate([sent["t_send_ns"].to_numpy(np.int64), sent["t_end_ns"].to_numpy(np.int64)])
    step = np.concatenate([np.ones(len(sent), np.int64), -np.ones(len(sent), np.int64)])
    order = np.lexsort((-step, t))
    t, level = t[order], np.cumsum(step[order])
    first, last = int(sent["t_send_ns"].min()), int(sent["t_send_ns"].max())
    inside = (t >= first) & (t < last)
    if inside.sum() < 2:
        return None
    ts, lv = t[inside], level[inside]
    dur = np.diff(np.append(ts, last)).astype(float)
    sorted_lv = np.argsort(lv, kind="stable")
    cum = np.cumsum(dur[sorted_lv])
    median = lv[sorted_lv][np.searchsorted(cum, cum[-1] / 2)]
    start = int(ts[np.argmax(lv >= median)])
    keep = frame["ok"] & ~frame["warmup"] & (frame["t_send_ns"] >= start) & (frame["t_end_ns"] <= last)
    if not keep.any() or last <= start:
        return None
    return start, last, keep


def summarize(
    frame: pd.DataFrame,
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
    """Every figure of docs/metrics.md from the request frame, the client's loop-lag ticks and
    `server_figures` (the server's /metrics window as figures: loadgen.load.scrape.figures)."""
    steady_info, window = None, None
    if steady:
        found = steady_state(frame)
        m0 = measured(frame)
        before = int(len(m0))
        if found is None:
            steady_info = {
                "rule": STEADY_RULE,
                "found": False,
                "requests": before,
                "note": "no request falls inside: the run is too short for a steady state; all count",
            }
        else:
            start, end, keep = found
            ramp = int((m0["t_send_ns"] < start).sum())
            steady_info = {
                "rule": STEADY_RULE,
                "found": True,
                "start_s": (start - config["clock"]["t0_ns"]) / _NS,
                "end_s": (end - config["clock"]["t0_ns"]) / _NS,
                "requests": int(keep.sum()),
                "left_out_ramp": ramp,
                "left_out_drain": before - int(keep.sum()) - ramp,
            }
            frame = frame.assign(warmup=frame["warmup"] | (frame["ok"] & ~keep))  # the load, not the figures
            window = (start, end, "steady_state")
    m = measured(frame)
    failed = frame[~frame["ok"] & ~frame["warmup"] & (frame["error_type"] != "cancelled")]
    cancelled = int((frame["error_type"] == "cancelled").sum())
    itl, gaps, decode = token_gaps(m)
    check = self_check(
        frame,
        loop_lag[0],
        loop_lag[1],
        lateness_threshold_ms,
        timing_threshold_ms,
        lag_worker=loop_lag[2] if len(loop_lag) > 2 else None,
    )
    check["chunk_times"] = (load_info or {}).get("chunk_times")  # where chunk times were taken
    source, sources = _sources(m)
    out: dict = {
        "config": config,
        "time_scale": config.get("time_scale") or 1.0,
        "completed": int(len(m)),
        "failed": int(len(failed)),
        "cancelled": cancelled,
        "interrupted": interrupted,
        "errors": dict(Counter(failed["error_type"])),
    }
    if window is None:
        window = steady_window(frame) if not frame.empty else None
    window_ns = None
    sent = frame.loc[frame["t_send_ns"] > 0, "t_send_ns"]
    out["duration_s"] = (int(frame["t_end_ns"].max()) - int(sent.min())) / _NS if len(sent) else 0.0
    if window is None:
        out.update(window=None, output_throughput_tok_s=0.0, total_throughput_tok_s=0.0, request_throughput_req_s=0.0)
    else:
        start, end, kind = window
        window_ns = (start, end)
        out_tok, prompt_tok, done = _window_counts(frame, start, end)
        span = (end - start) / _NS
        rate = (lambda x: x / span) if span > 0 else (lambda x: 0.0)
        out.update(
            window={
                "kind": kind,
                "start_s": (start - config["clock"]["t0_ns"]) / _NS,
                "duration_s": span,
                "output_tokens": out_tok,
                "prompt_tokens": prompt_tok,
                "completed": done,
            },
            output_throughput_tok_s=rate(out_tok),
            total_throughput_tok_s=rate(out_tok + prompt_tok),
            request_throughput_req_s=rate(done),
        )
    out.update(
        ttft_ms=describe(m["ttft_ms"]),
        tpot_ms=describe(m["tpot_ms"]),
        itl_ms=describe(itl),
        inter_chunk_ms=describe(gaps),
        e2e_ms=describe(m["e2e_ms"]),
        ttft_from_scheduled_ms=describe(m["ttft_from_scheduled_ms"]),
        e2e_from_scheduled_ms=describe(m["e2e_from_scheduled_ms"]),
        queue_delay_ms=describe(frame.loc[~frame["warmup"], "queue_delay_ms"]),
        tokens_per_chunk_mean=float(decode.mean()) if decode.size else None,
        tokens_per_chunk=describe(decode),
        acceptance_client=acceptance_client(m),
        prompt_tokens_total=int(m["prompt_tokens"].fillna(0).sum()),
        completion_tokens_total=int(m["completion_tokens"].sum()),
        token_count_source=source,
        token_count_sources=sources,
        goodput=_goodput(frame, goodput, window_ns) if goodput else None,
        sending=sending(frame, load_info or {}),
        client_bound=check["client_bound"],
        self_check=check,
        spec_decode=(server_figures or {}).get("spec_decode"),
        server=(server_figures or {}).get("server"),
        steady_state=steady_info,
        conversations=conversations(frame),
        stopped_early=(load_info or {}).get("stopped_early"),
    )
    return out


def conversations(frame: pd.DataFrame) -> dict | None:
    """Multi-turn runs: how many conversations, how many of them ran every turn, and per turn
    number the requests, mean prompt tokens and TTFT p50 (measured requests; None when the
    run had no conversation)."""
    if "session" not in frame or not (frame["session"] != "").any():
        return None
    conv = frame[(frame["session"] != "") & ~frame["warmup"]]
    per = conv.groupby("session").agg(turns=("turn", "size"), ok=("ok", "all"))
    m = measured(conv)
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


def _goodput(frame: pd.DataFrame, objectives: dict[str, float], window_ns: tuple[int, int] | None) -> dict:
    """Share of measured requests meeting every objective, and good requests completed per
    second of the throughput window."""
    judged = frame[~frame["warmup"] & (frame["error_type"] != "cancelled")]
    good = slo.good(judged, objectives)
    n_good = int(good.sum())
    req_s = None
    if window_ns and window_ns[1] > window_ns[0]:
        done = judged.loc[good, "t_last_token_ns"].astype("float64")
        inside = int(((done >= window_ns[0]) & (done <= window_ns[1])).sum())
        req_s = inside / ((window_ns[1] - window_ns[0]) / _NS)
    return {
        "objectives_ms": objectives,
        "good": n_good,
        "judged": int(len(judged)),
        "fraction": n_good / len(judged) if len(judged) else None,
        "req_s": req_s,
    }
