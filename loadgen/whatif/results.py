"""What-if results as plain data (whatif.json) and as text: a table per batch size, with the
trace-level figures and what the figures assume."""

from __future__ import annotations

import json
from dataclasses import asdict

from loadgen.whatif import policies
from loadgen.whatif.acceptance_traces import Trace
from loadgen.whatif.evaluate import START, Outcome, best_realisable, oracle_caps

PRICING = (
    "combination oracle: each step is charged at the price of the drafter it used "
    "(a batch whose next steps use two drafters pays for both); the 'n-gram price' row "
    "charges each step's drafting once at the n-gram drafter's price, as the study did, which flatters it"
)


def _trace_figures(traces: list[Trace], methods: list[str], ks, caps: dict) -> dict:
    """Per drafter, tokens per decoding step of fixed k and the oracle over the traces alone
    (no costs, no batching), and of the combination oracle."""

    def tps(plan) -> float:
        steps = [s for t in traces for s in plan(t)]
        return policies.tokens_per_step(steps)

    out = {
        m: {
            **{f"k={k}": tps(lambda t, m=m, k=k: policies.fixed_k(m, t.drafters[m], k, START)) for k in ks},
            "oracle": tps(lambda t, m=m: policies.oracle(m, t.drafters[m], START, caps[m])),
        }
        for m in methods
    }
    if len(methods) > 1:
        out["combination"] = {
            "oracle": tps(lambda t: policies.combination({m: t.drafters[m] for m in methods}, START, caps))
        }
    return out


def notes(traces: list[Trace], methods: list[str], caps: dict, ks) -> list[str]:
    out = []
    for m in methods:
        sources = sorted({s for t in traces if (s := t.drafters[m].source) is not None})
        if sources:
            out.append(f"acc_{m}: " + "; ".join(sources[:3]) + (" ..." if len(sources) > 3 else ""))
        cens = {c for t in traces if (c := t.drafters[m].censored_at) is not None}
        if not cens:
            continue
        c = min(cens)
        affected = [f"k > {c}"] if max(ks) > c else []
        if caps[m] is None or caps[m] > c:
            affected = ["its oracle", "the combination"] + affected
        if affected:
            out.append(
                f"acc_{m} is censored at {c} drafts (a step that accepted all {c} only says at "
                f"least {c + 1} tokens): {', '.join(affected)} go beyond what was observed "
                "(lower bounds from exact traces, extrapolations from estimated ones)"
            )
    out.append(PRICING)
    capped = sorted({d for d in caps.values() if d})
    out.append(
        "oracle: proposes exactly what will be accepted, never a rejected draft"
        + (
            f"; a model drafter at most {capped[0]} (each draft is one more sequential drafting "
            "pass, and in a batch the deepest proposal sets the drafting time; --oracle-depth)"
            if capped
            else ""
        )
        + "; n-gram drafting costs the same however deep, so its oracle takes the whole run"
    )
    return out


PROTOCOLS = {
    "closed": "closed loop at each batch size B: B users, each sending its next request when its last ends, "
    "the traces in turn (what a deployment under steady load sees)",
    "offline": "offline batches, the study's measurement: B copies of each sampled request start together and "
    "run to the end, no new arrivals; speedup = mean batch throughput over no speculation's",
}


def to_json(
    traces: list[Trace],
    methods: list[str],
    profile: str,
    outcomes: list[Outcome],
    *,
    source: str,
    ks,
    oracle_depth: int | None,
    protocol: str = "closed",
) -> dict:
    from loadgen.whatif.schedule import schedules
    from servers.emulator import profile as profiles

    best = best_realisable(outcomes)
    caps = oracle_caps(methods, oracle_depth)
    results = [asdict(o) for o in outcomes]
    top = _best_oracles(outcomes)
    for r in results:  # each policy's share of the best oracle's throughput at its batch size
        o = top.get(r["batch"])
        r["oracle_share"] = r["output_tok_s"] / o.output_tok_s if o is not None and o.output_tok_s else None
    return {
        "source": source,
        "profile": profile,
        "traces": len(traces),
        "drafters": methods,
        "output_tokens": int(sum(len(t.generated_token_ids) for t in traces)),
        "tokens_per_step": _trace_figures(traces, methods, ks, caps),
        "results": results,
        "best_realisable": {str(b): o.policy for b, o in best.items()},
        "oracle_depth": oracle_depth,
        "protocol": protocol,
        "schedules": schedules(results, methods, profiles.load(profile).models[0]),
        "gap": gap(outcomes),
        "notes": notes(traces, methods, caps, ks),
    }


def _best_oracles(outcomes: list[Outcome]) -> dict[int, Outcome]:
    """Per batch size, the oracle (policy no server can run) with the highest throughput."""
    top: dict[int, Outcome] = {}
    for o in outcomes:
        if not o.realisable and (o.batch not in top or o.output_tok_s > top[o.batch].output_tok_s):
            top[o.batch] = o
    return top


def gap(outcomes: list[Outcome]) -> dict:
    """Per batch size: the best realisable policy's throughput over the best oracle's (how
    much of what is possible a deployable policy gets)."""
    best = best_realisable(outcomes)
    out = {}
    for b, o in best.items():
        oracles = [x for x in outcomes if x.batch == b and not x.realisable]
        if oracles:
            top = max(oracles, key=lambda x: x.output_tok_s)
            out[str(b)] = {
                "realisable": o.policy,
                "oracle": top.policy,
                "share": o.output_tok_s / top.output_tok_s if top.output_tok_s else None,
            }
    return out


def render(doc: dict) -> str:
    lines = [f"PROFILE MISMATCH (--profile-anyway): {doc['profile_mismatch']}"] if doc.get("profile_mismatch") else []
    lines += [
        f"What-if over {doc['traces']} traces ({doc['output_tokens']:,} output tokens) from "
        f"{doc['source']}, on profile {doc['profile']}; drafters: {', '.join(doc['drafters'])}",
        f"Protocol: {PROTOCOLS[doc.get('protocol', 'closed')]}",
        "",
        "Tokens per decoding step from the traces alone:",
    ]
    for m, figs in doc["tokens_per_step"].items():
        lines.append(f"  {m:12s} " + "  ".join(f"{k} {v:.2f}" for k, v in figs.items()))
    by_batch: dict[int, list[dict]] = {}
    for r in doc["results"]:
        by_batch.setdefault(r["batch"], []).append(r)
    width = max((len(r["policy"]) for r in doc["results"]), default=10)
    # traces of a reasoning model: each phase's speedup too (its TPOT against no speculation's)
    phased = any(r.get("thinking_speedup") is not None for r in doc["results"])
    x = lambda v: f"{v:.2f}x" if v is not None else "-"  # noqa: E731
    for batch, rows in by_batch.items():
        best = doc["best_realisable"].get(str(batch))
        unit = "batches" if doc.get("protocol") == "offline" else "requests"
        lines += [
            "",
            f"Batch {batch} ({rows[0]['requests']} {unit}):",
            f"  {'policy':{width}s}  {'tok/s':>9s}  {'speedup':>7s}  {'of oracle':>9s}  {'tok/step':>8s}  "
            f"{'drafts/step':>11s}" + (f"  {'thinking':>8s}  {'answering':>9s}" if phased else ""),
        ]
        for r in rows:
            mark = " <- best realisable" if r["policy"] == best else ("" if r["realisable"] else " (oracle)")
            phases = f"  {x(r.get('thinking_speedup')):>8s}  {x(r.get('answering_speedup')):>9s}" if phased else ""
            share = f"{r['oracle_share']:.0%}" if r.get("oracle_share") is not None else "-"
            lines.append(
                f"  {r['policy']:{width}s}  {r['output_tok_s']:9,.0f}  {x(r['speedup']):>7s}  {share:>9s}  "
                f"{r['tokens_per_step']:8.2f}  {r['drafts_per_step']:11.2f}{phases}{mark}"
            )
    if doc.get("gap"):
        lines += ["", "Best realisable policy against the best oracle (share of its throughput):"]
        lines += [
            f"  B={b}: {g['share']:.0%} ({g['realisable']} / {g['oracle']})"
            for b, g in doc["gap"].items()
            if g["share"] is not None
        ]
    if doc.get("schedules"):
        lines += ["", "k by batch size (num_speculative_tokens_per_batch_size; loadgen whatif --schedule):"]
        for m, s in doc["schedules"].items():
            ks = ", ".join(f"B={b}: {k}" for b, k in s["by_batch"].items())
            lines.append(f"  {m:12s} {ks}  ->  " + (json.dumps(s["ranges"]) if s["ranges"] else s.get("why", "")))
    lines += [""] + [f"note: {n}" for n in doc["notes"]]
    return "\n".join(lines)
