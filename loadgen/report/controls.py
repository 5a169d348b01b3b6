"""vLLM's controls for verification that does not pay, in the report: where a sweep served a
drafter at fixed k and with a control (k by batch size, `num_speculative_tokens_per_batch_size`;
adaptive verification, `enable_adaptive_verification`), per workload and load level whether each
control pays over that drafter's best fixed k there, which of them all is best, and what share of
the drafter's oracle it reaches (the oracle proposes exactly what will be accepted; the what-if
over this directory's traces at that batch size, when the report has one: docs/whatif.md).
Nothing is measured anew."""

from __future__ import annotations

import json

import pandas as pd

from loadgen.report.numbers import short
from loadgen.report.tables import EVEN

COLUMNS = [
    "workload",
    "mode",
    "level",
    "drafter",
    "variant",
    "control",
    "output_throughput_tok_s",
    "vs_best_fixed",
    "oracle_share",
    "best",
]


def _spec(argv: list[str]) -> dict | None:
    """The --speculative-config a server command line gives, or None."""
    for i, a in enumerate(argv):
        if a == "--speculative-config" and i + 1 < len(argv):
            try:
                spec = json.loads(argv[i + 1])
            except ValueError:
                return None
            return spec if isinstance(spec, dict) else None
    return None


def kinds(manifest: dict) -> dict[str, tuple[str, str]]:
    """Per speculating variant: (its drafter, its control: 'fixed', 'k by batch size' or
    'adaptive verification'), from the server commands the sweep recorded."""
    out = {}
    for variant, server in (manifest.get("servers") or {}).items():
        spec = _spec(server.get("argv") or [])
        if not spec or not spec.get("method"):
            continue
        if spec.get("enable_adaptive_verification"):
            control = "adaptive verification"
        elif spec.get("num_speculative_tokens_per_batch_size"):
            control = "k by batch size"
        else:
            control = "fixed"
        out[variant] = (str(spec["method"]), control)
    return out


def _oracles(whatif: dict | None, drafter: str) -> dict[int, float]:
    """Per batch size, the throughput of the drafter's own oracle in the what-if results (it
    proposes exactly what will be accepted: what no control of that drafter can beat)."""
    top: dict[int, float] = {}
    for r in (whatif or {}).get("results", []):
        if r.get("kind") == "oracle" and str(r.get("policy", "")).startswith(f"{drafter} ") and r.get("output_tok_s"):
            top[int(r["batch"])] = max(top.get(int(r["batch"]), 0.0), float(r["output_tok_s"]))
    return top


def _oracle_docs(ok: pd.DataFrame, whatif: dict | None, per_workload: dict[str, dict] | None) -> dict[str, dict]:
    """Per workload, the what-if results its oracle is read from: its own (traces-WORKLOAD.jsonl),
    else the directory's one (traces.jsonl) when the sweep has that one workload only; a file
    shared by several workloads stands for none of them (acceptance, so the oracle, differs)."""
    workloads = sorted(set(ok["workload"])) if len(ok) else []
    docs = dict(per_workload or {})
    if whatif is not None and len(workloads) == 1:
        docs.setdefault(workloads[0], whatif)
    return docs


def table(
    ok: pd.DataFrame, manifest: dict, whatif: dict | None, per_workload: dict[str, dict] | None = None
) -> pd.DataFrame:
    """One row per (workload, mode, level, variant) of a drafter that was swept both at fixed k
    and with a control; empty when no control was swept. The oracle's share is each workload's
    own (`per_workload`: loadgen.report.whatif.per_workload; `whatif`: the directory's one,
    used for a sweep of one workload)."""
    kind = kinds(manifest)
    drafters = {d for d, c in kind.values() if c != "fixed"} & {d for d, c in kind.values() if c == "fixed"}
    if not drafters or ok.empty:
        return pd.DataFrame(columns=COLUMNS)
    docs = _oracle_docs(ok, whatif, per_workload)
    oracles = {(w, d): _oracles(doc, d) for w, doc in docs.items() for d in drafters}
    rows = []
    cells = ok[ok["variant"].isin(kind) & (ok["output_throughput_tok_s"] > 0)]
    for (workload, mode, level), g in cells.groupby(["workload", "mode", "level"], sort=True):
        for drafter in sorted(drafters):
            mine = g[g["variant"].map(lambda v, d=drafter: kind[v][0] == d)]
            fixed = mine[mine["variant"].map(lambda v: kind[v][1] == "fixed")]
            if fixed.empty or len(mine) == len(fixed):
                continue
            best_fixed = float(fixed["output_throughput_tok_s"].max())
            top = mine.loc[mine["output_throughput_tok_s"].idxmax(), "variant"]
            mine_oracle = oracles.get((workload, drafter), {})
            share = mine_oracle.get(int(level)) if mode == "closed" and float(level).is_integer() else None
            for _, r in mine.iterrows():
                tok_s = float(r["output_throughput_tok_s"])
                rows.append(
                    {
                        "workload": workload,
                        "mode": mode,
                        "level": level,
                        "drafter": drafter,
                        "variant": r["variant"],
                        "control": kind[r["variant"]][1],
                        "output_throughput_tok_s": tok_s,
                        "vs_best_fixed": tok_s / best_fixed,
                        "oracle_share": tok_s / share if share else None,
                        "best": r["variant"] == top,
                    }
                )
    return pd.DataFrame(rows, columns=COLUMNS)


def _verdict(ratio: float) -> str:
    """A control against the best fixed k: it pays, costs, or is even (within the report's
    EVEN, the margin under which it calls two throughputs the same)."""
    return "pays" if ratio > 1 + EVEN else ("costs" if ratio < 1 - EVEN else "even")


def sentences(t: pd.DataFrame, unit_of=lambda mode: "users" if mode == "closed" else "requests/s") -> list[str]:
    """Per workload and drafter: at each level the best of fixed k and the controls (with its
    share of the oracle where known), and each control against the best fixed k there: pays,
    costs or even (within 2%, the report's margin for the same)."""
    out: list[str] = []
    if t.empty:
        return out
    for (workload, mode, drafter), g in t.groupby(["workload", "mode", "drafter"], sort=False):
        parts = []
        for level, lv in g.groupby("level", sort=True):
            best = lv[lv["best"]].iloc[0]
            share = f", {best['oracle_share']:.0%} of {drafter}'s oracle" if pd.notna(best["oracle_share"]) else ""
            controls = "; ".join(
                f"{r['control']} {r['vs_best_fixed']:.2f}x ({_verdict(r['vs_best_fixed'])})"
                for _, r in lv[lv["control"] != "fixed"].iterrows()
            )
            parts.append(
                f"at {short(level)} {unit_of(mode)} {best['variant']} is best ({best['output_throughput_tok_s']:,.0f} "
                f"tok/s{share}); against the best fixed k: {controls}"
            )
        out.append(f"On {workload}, {drafter}'s controls: " + "; ".join(parts) + ".")
    missing = sorted(set(t.loc[t["oracle_share"].isna(), "workload"]))
    if missing:
        out.append(
            f"The oracle's share needs each workload's acceptance traces beside the results ({', '.join(missing)} "
            "has none): DIR/traces-WORKLOAD.jsonl (DIR/traces.jsonl serves a sweep of one workload; on the "
            "emulator: loadgen simulate ... --acceptance-traces DIR/traces-WORKLOAD.jsonl; from a real server: "
            "loadgen sweep --token-ids, then loadgen traces), and loadgen report again (docs/whatif.md)."
        )
    return out
