"""The report's tables, each a plain frame computed from a sweep's cells (definitions in
docs/report.md): throughput and speedup per load level, where SD stops paying, the best
variant per level, latency, acceptance (server and client side), waste, and per-request
variability."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from loadgen.report import speedup as speedups
from loadgen.report.numbers import num, short
from loadgen.results.reading import Sweep

KEYS = ["workload", "mode", "level", "variant"]


def _keys(sw: Sweep) -> list[str]:
    """A per-measurement table's keys: the cell's, and which repeat where a sweep has repeats."""
    return KEYS + ["repeat"] if sw.has_repeats else KEYS


def throughput(sw: Sweep) -> pd.DataFrame:
    cols = KEYS + ["output_throughput_tok_s", "request_throughput_req_s", "completed", "client_bound"]
    more = ("server_behind", "short_of_users", "in_flight_max", "time_scale")
    cols += [c for c in more if c in sw.ok]  # sweeps before these: without
    if sw.has_repeats:  # the mean over the repeats, how many, and their spread
        cols += ["repeats", "output_throughput_tok_s_sd"]
    return sw.ok[cols].sort_values(KEYS).reset_index(drop=True)


def speedup(sw: Sweep) -> pd.DataFrame:
    """Each variant's speedup per workload and level (with repeats: of the mean throughputs,
    beside each round's lowest and highest, speedup.spread)."""
    out = speedups.speedup(sw.ok, sw.baseline)
    if sw.has_repeats:
        out = out.merge(speedups.spread(sw.measured, sw.baseline), on=KEYS, how="left")
    return out.sort_values(["workload", "variant", "level"]).reset_index(drop=True)


EVEN = 0.02  # a speedup within 2% of 1 is no measurable difference (open loop below saturation: all 1)


def break_even(sp: pd.DataFrame) -> pd.DataFrame:
    """Per workload and SD variant: the load where speedup first falls below 1 - EVEN after
    being above 1 + EVEN, interpolated where it crosses 1 between the two measured levels
    around it (linearly in log load); or that it paid (or was even) at every level measured,
    or never paid."""
    rows = []
    for (workload, variant), g in sp.groupby(["workload", "variant"], sort=False):
        g = g.sort_values("level")
        levels, s = g["level"].to_numpy(float), g["speedup"].to_numpy(float)
        pays, costs = s > 1 + EVEN, s < 1 - EVEN
        row = {
            "workload": workload,
            "variant": variant,
            "mode": g["mode"].iloc[0],
            "levels": f"{short(levels.min())}..{short(levels.max())}",
            "break_even_level": None,
        }
        if not costs.any():
            row["verdict"] = (
                f"pays at every level measured (up to {short(levels.max())})"
                if pays.all()
                else f"pays or is even (within {EVEN:.0%}) at every level measured (up to {short(levels.max())})"
            )
        elif not pays.any():
            row["verdict"] = f"never pays (from {short(levels.min())})"
        else:
            i = int(np.argmax(costs))
            if not pays[:i].any():
                row["verdict"] = f"below 1 at {short(levels[i])}, above it later: no single break-even"
            else:
                l0, l1, s0, s1 = levels[i - 1], levels[i], s[i - 1], s[i]
                frac = (s0 - 1) / (s0 - s1) if s0 > 1 else 0.0
                at = math.exp(math.log(l0) + frac * (math.log(l1) - math.log(l0))) if l0 > 0 else l0 + frac * (l1 - l0)
                row["break_even_level"] = at
                row["verdict"] = f"stops paying at about {num(at)} (between {short(l0)} and {short(l1)})"
        rows.append(row)
    return pd.DataFrame(rows, columns=["workload", "variant", "mode", "levels", "break_even_level", "verdict"])


def break_even_acceptance(sp: pd.DataFrame, templates: list[str], lengths: list[float]) -> pd.DataFrame:
    """With an acceptance axis (`sweep --acceptance-lengths`): per workload, SD variant and load
    level, the lowest mean acceptance length at which SD still pays (speedup 1), interpolated
    linearly between the two measured lengths around the crossing; or that it paid at every
    length measured (at or below the lowest) or at none (above the highest)."""
    from servers.deployments import acceptance_variant

    cols = ["workload", "mode", "level", "variant", "speedups", "break_even_acceptance", "verdict"]
    rows = []
    if sp.empty or not templates:
        return pd.DataFrame(columns=cols)
    for t in templates:
        names = {acceptance_variant(t, length): length for length in lengths}
        g = sp[sp["variant"].isin(names)].assign(acceptance=lambda d, names=names: d["variant"].map(names))
        for (workload, mode, level), h in g.groupby(["workload", "mode", "level"], sort=False):
            h = h.sort_values("acceptance")
            al, s = h["acceptance"].to_numpy(float), h["speedup"].to_numpy(float)
            row = {
                "workload": workload,
                "mode": mode,
                "level": level,
                "variant": t,
                "speedups": ", ".join(f"{short(a)}: {x:.2f}" for a, x in zip(al, s)),
                "break_even_acceptance": None,
            }
            pays = s >= 1.0
            if pays.all():
                row["verdict"] = f"pays at every acceptance length measured (from {short(al[0])})"
            elif not pays.any():
                row["verdict"] = f"pays at none (up to {short(al[-1])})"
            elif not pays[int(np.argmax(pays)) :].all():
                row["verdict"] = "not monotone in acceptance: no single break-even"
            else:
                i = int(np.argmax(pays))
                a0, a1, s0, s1 = al[i - 1], al[i], s[i - 1], s[i]
                row["break_even_acceptance"] = a0 + (1.0 - s0) / (s1 - s0) * (a1 - a0)
                row["verdict"] = f"pays from acceptance length {row['break_even_acceptance']:.2f}"
            rows.append(row)
    return pd.DataFrame(rows, columns=cols).sort_values(["workload", "variant", "level"]).reset_index(drop=True)


def best(sw: Sweep) -> pd.DataFrame:
    """Per workload and level: the variant with the highest output throughput."""
    ok = sw.ok
    rows = []
    for (workload, level), g in ok.groupby(["workload", "level"], sort=True):
        top = g.loc[g["output_throughput_tok_s"].idxmax()]
        base = g[g["variant"] == sw.baseline]["output_throughput_tok_s"]
        rows.append(
            {
                "workload": workload,
                "mode": top["mode"],
                "level": level,
                "best_variant": top["variant"],
                "output_throughput_tok_s": top["output_throughput_tok_s"],
                "speedup": top["output_throughput_tok_s"] / base.iloc[0] if len(base) and base.iloc[0] else None,
            }
        )
    return pd.DataFrame(rows)


def latency(sw: Sweep) -> pd.DataFrame:
    cols = KEYS + ["ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_p50_ms", "output_throughput_tok_s"]
    return sw.ok[cols].sort_values(KEYS).reset_index(drop=True)


def acceptance(sw: Sweep) -> pd.DataFrame:
    """Server-side acceptance (its counters over the window) beside the client's step trace:
    the accepted drafts three ways (the stream's count, the server's per-request counts, its
    counter) and their reconciliation by the written rule (loadgen.measures.reconcile): what
    was accepted past max_tokens, what arrived coalesced, and whether the three agree."""
    rows = []
    for _, c in sw.measured.iterrows():
        s = sw.summaries[c["path"]]
        client = s.get("acceptance_client") or {}
        rec = client.get("reconciliation") or {}
        server_acc = c["accepted_tokens"]
        client_acc = client.get("accepted_tokens")
        rows.append(
            {
                **{k: c[k] for k in _keys(sw)},
                "acceptance_rate": c["acceptance_rate"],
                "mean_acceptance_length": c["mean_acceptance_length"],
                "server_accepted_tokens": server_acc,
                "client_accepted_tokens": client_acc,
                "client_stream_accepted_tokens": client.get("stream_accepted_tokens"),
                "server_per_request_accepted_tokens": rec.get("server_per_request"),
                "past_end_tokens": (rec.get("past_end") or {}).get("tokens"),
                "coalesced_tokens": (rec.get("coalesced") or {}).get("tokens"),
                "reconciled": rec.get("exact"),
                "reconciliation": rec.get("checked"),
                "accepted_source": client.get("accepted_source"),
                "client_tokens_per_step": client.get("tokens_per_step_mean"),
                "client_steps_source": client.get("steps_source"),
                "client_over_server": (
                    client_acc / server_acc if server_acc and client_acc is not None and not _nan(server_acc) else None
                ),
            }
        )
    return pd.DataFrame(rows).sort_values(_keys(sw)).reset_index(drop=True) if rows else pd.DataFrame()


def per_position(sw: Sweep) -> pd.DataFrame:
    rows = []
    for _, c in sw.measured.iterrows():
        sd = sw.summaries[c["path"]].get("spec_decode") or {}
        for pos, p in enumerate(sd.get("per_position") or []):
            rows.append({**{k: c[k] for k in _keys(sw)}, "position": pos, "acceptance": p})
    return pd.DataFrame(rows, columns=_keys(sw) + ["position", "acceptance"])


def step_distribution(sw: Sweep) -> pd.DataFrame:
    """Client side, per workload and variant over all levels: the share of decode steps that
    emitted 1, 2, ... tokens (chunks for vLLM; bursts for llama.cpp)."""
    counts: dict[tuple, dict[int, int]] = {}
    for _, c in sw.measured.iterrows():
        frame = sw.requests(c["path"])
        if frame is None or "step_tokens" not in frame:
            continue
        bucket = counts.setdefault((c["workload"], c["variant"]), {})
        measured = frame[frame["ok"] & ~frame["warmup"]]
        for steps in measured["step_tokens"]:
            for n in list(steps)[1:]:
                bucket[int(n)] = bucket.get(int(n), 0) + 1
    rows = []
    for (workload, variant), bucket in counts.items():
        total = sum(bucket.values())
        rows += [
            {"workload": workload, "variant": variant, "tokens_per_step": n, "steps": k, "share": k / total}
            for n, k in sorted(bucket.items())
        ]
    return pd.DataFrame(rows, columns=["workload", "variant", "tokens_per_step", "steps", "share"])


def waste(sw: Sweep, per_batched_token_s: float | None) -> pd.DataFrame:
    """Draft tokens verified and rejected per generated token; and, with a cost profile's
    per-token forward cost, the estimated share of the window spent verifying them."""
    rows = []
    for _, c in sw.measured.iterrows():
        if _nan(c["draft_tokens"]) or not c["draft_tokens"]:
            continue
        srv = sw.summaries[c["path"]].get("server") or {}
        rejected = c["draft_tokens"] - c["accepted_tokens"]
        gen, window = srv.get("generation_tokens"), srv.get("window_s")
        share = rejected * per_batched_token_s / window if per_batched_token_s and window else None
        rows.append(
            {
                **{k: c[k] for k in _keys(sw)},
                "rejected_draft_tokens": rejected,
                "generation_tokens": gen,
                "rejected_per_generated_token": rejected / gen if gen else None,
                "est_rejected_verify_share": share,
            }
        )
    return pd.DataFrame(
        rows,
        columns=_keys(sw)
        + ["rejected_draft_tokens", "generation_tokens", "rejected_per_generated_token", "est_rejected_verify_share"],
    )


def per_request(sw: Sweep) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per request: its own acceptance (mean tokens per decode step) and TPOT; per cell: the
    spread of that acceptance and its rank correlation with TPOT (negative: requests whose
    drafts were accepted less finished their tokens more slowly)."""
    reqs, cells = [], []
    for _, c in sw.measured.iterrows():
        frame = sw.requests(c["path"])
        if frame is None or "step_tokens" not in frame:
            continue
        m = frame[frame["ok"] & ~frame["warmup"]]
        server_al = (
            m["server_acceptance_length"].to_numpy(float)
            if "server_acceptance_length" in m
            else np.full(len(m), np.nan)
        )  # the server's own per-request figure, where it sends one
        per = pd.DataFrame(
            {
                "tokens_per_step": [_mean_decode(s) for s in m["step_tokens"]],
                "tpot_ms": m["tpot_ms"].to_numpy(float),
                "completion_tokens": m["completion_tokens"].to_numpy(float),
                "server_acceptance_length": server_al,
            }
        ).dropna(subset=["tokens_per_step", "tpot_ms"])
        for k in _keys(sw):
            per[k] = c[k]
        reqs.append(per)
        rho = (
            per["tokens_per_step"].rank().corr(per["tpot_ms"].rank())
            if len(per) >= 3 and per["tokens_per_step"].nunique() > 1
            else None
        )
        q = per["tokens_per_step"].quantile([0.1, 0.5, 0.9]) if len(per) else None
        cells.append(
            {
                **{k: c[k] for k in _keys(sw)},
                "requests": len(per),
                "tokens_per_step_p10": None if q is None else q.iloc[0],
                "tokens_per_step_p50": None if q is None else q.iloc[1],
                "tokens_per_step_p90": None if q is None else q.iloc[2],
                "spearman_tokens_per_step_vs_tpot": None if rho is None or _nan(rho) else rho,
                **_server_spread(per),
            }
        )
    per_req = (
        pd.concat(reqs, ignore_index=True)
        if reqs
        else pd.DataFrame(
            columns=["tokens_per_step", "tpot_ms", "completion_tokens", "server_acceptance_length", *KEYS]
        )
    )
    return per_req, pd.DataFrame(cells)


def _server_spread(per: pd.DataFrame) -> dict:
    """The server-reported per-request acceptance length (vLLM's mean_acceptance_length): its
    spread over requests, the mean of requests (each counts once, where the server's counters
    weigh long answers more) and its rank correlations with output length and TPOT."""
    al = per.dropna(subset=["server_acceptance_length"])
    if al.empty:
        return {"server_al_requests": 0}
    q = al["server_acceptance_length"].quantile([0.1, 0.5, 0.9])

    def rank(x: str) -> float | None:
        if len(al) >= 3 and al["server_acceptance_length"].nunique() > 1 and al[x].nunique() > 1:
            return al["server_acceptance_length"].rank().corr(al[x].rank())
        return None

    return {
        "server_al_requests": int(len(al)),
        "server_al_mean_of_requests": float(al["server_acceptance_length"].mean()),
        "server_al_p10": q.iloc[0],
        "server_al_p50": q.iloc[1],
        "server_al_p90": q.iloc[2],
        "spearman_server_al_vs_output_tokens": rank("completion_tokens"),
        "spearman_server_al_vs_tpot": rank("tpot_ms"),
    }


def _mean_decode(steps) -> float:
    decode = list(steps)[1:]
    return float(np.mean(decode)) if decode else float("nan")


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA
