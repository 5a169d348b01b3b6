"""What each speculation policy would give, under load, over a set of acceptance traces.

Every policy becomes a step plan per request (policies.py); the replaying engine
(servers/emulator/replay.py) serves those requests in virtual time with the profile's cost
model, closed loop at each batch size (B users, each sending its next request when its last
ends, the traces taken in order and cycled until at least 4 x B requests were sent); the run
is measured exactly as a real run is (loadgen.measures.summary: output tokens per second over the
steady window). Speedup: a policy's throughput over no speculation's at the same batch size.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from loadgen.load.execute import LoadShape
from loadgen.measures.frame import request_frame
from loadgen.measures.summary import summarize
from loadgen.simulate.virtual import SimSpec, simulate
from loadgen.whatif import KS, policies
from loadgen.whatif.acceptance_traces import Trace
from loadgen.whatif.policies import Step
from servers.emulator import profile as profiles
from servers.emulator.engine import Engine, EngineConfig
from servers.emulator.replay import Live, ReplayEngine
from workloads import Request

START = 1  # served, the prefill writes output position 0; decoding steps start after it


class WhatIfError(ValueError):
    pass


@dataclass(frozen=True)
class Policy:
    name: str
    kind: str  # none | fixed | oracle | combination | adaptive | hybrid | adaptive_verification | schedule
    realisable: bool  # a server could run it without knowing the future
    plan: Callable[[Trace], list[Step]]
    price_as: str | None = None  # charge every drafter at this one's price
    # steps decided as the engine serves (servers/emulator/replay.py's Live): k by the batch's
    # size, vLLM's adaptive verification; `plan` is then unused
    live: Live | None = None
    # the drafter the server would be configured with: every step pays what its SD mode adds
    # (profile.Drafter.mode_time; a live policy's is its drafter's)
    mode: str | None = None


@dataclass
class Outcome:
    """One policy at one batch size."""

    policy: str
    kind: str
    realisable: bool
    batch: int
    requests: int
    output_tok_s: float
    speedup: float | None
    tokens_per_step: float  # tokens per decoding step, over the plans served
    drafts_per_step: float
    tpot_ms: float | None
    # traces of a reasoning model (reasoning_end): TPOT while thinking and while answering, and
    # each phase's speedup (no speculation's TPOT in that phase over the policy's); None without
    tpot_thinking_ms: float | None = None
    tpot_answering_ms: float | None = None
    thinking_speedup: float | None = None
    answering_speedup: float | None = None


def order_drafters(methods) -> list[str]:
    """n-gram first (the cheaper drafter wins ties in a combination), then the rest by name."""
    return sorted(methods, key=lambda m: (m != "ngram", m))


def oracle_caps(methods: list[str], depth: int | None) -> dict[str, int | None]:
    """How deep each drafter's oracle may propose: a model drafter pays a sequential pass per
    draft, so its oracle stops at `depth`; n-gram drafts cost nothing to propose, so its
    oracle takes the whole run its match gets right."""
    return {m: None if m == "ngram" else depth for m in methods}


def hybrid_possible(traces: list[Trace], methods: list[str]) -> bool:
    """The hybrid needs to know where the n-gram lookup matches: every trace's n-gram 'proposed'."""
    return "ngram" in methods and all(t.drafters["ngram"].proposed is not None for t in traces)


def _fixed(m: str, k: int) -> Callable[[Trace], list]:
    return lambda t: policies.fixed_k(m, t.drafters[m], k, START)


def _adaptive(m: str, k_max: int) -> Callable[[Trace], list]:
    return lambda t: policies.adaptive(m, t.drafters[m], k_max=k_max, start=START)


def _oracle(m: str, cap: int | None) -> Callable[[Trace], list]:
    return lambda t: policies.oracle(m, t.drafters[m], START, cap)


def _hybrid(m: str, k_max: int) -> Callable[[Trace], list]:
    return lambda t: policies.hybrid(
        "ngram", t.drafters["ngram"], m, t.drafters[m], k_ngram=k_max, k_model=3, start=START
    )


def confidences(traces: list[Trace], method: str, k: int) -> tuple[float, ...]:
    """Per draft position j < k, the chance a draft there is accepted once the ones before it
    were, over every position of every trace with room for k drafts after it: what vLLM's
    online acceptance estimator learns from its per-position terms (adaptive verification's
    confidences, when the draft's own probability says nothing more)."""
    acc = [t.drafters[method].acc_len for t in traces]
    rows = np.concatenate([a[: max(0, len(a) - k - 1)] for a in acc]) if acc else np.zeros(0)
    out = []
    for j in range(k):
        reached = np.sum(rows >= j + 1)
        out.append(float(np.sum(rows >= j + 2) / reached) if reached else 0.0)
    return tuple(out)


def adaptive_verification(method: str, k: int, traces: list[Trace]) -> Policy:
    """vLLM's adaptive verification of `method`'s k drafts a step (not for n-gram, whose drafts
    carry no probabilities, as in vLLM)."""
    live = Live(method, k, adaptive=True, confidence=confidences(traces, method, k))
    return Policy(f"{method} k={k} adaptive verification", "adaptive_verification", True, _fixed(method, k), live=live)


def schedule_policy(method: str, ranges: list[list[int]], max_num_seqs: int) -> Policy:
    """`method` at k by batch size (`ranges`: num_speculative_tokens_per_batch_size), each
    step's k looked up from the requests it scheduled as vLLM's scheduler does."""
    from servers.emulator.spec import SpecConfig

    k = max(1, max(r[2] for r in ranges))
    schedule = tuple((int(a), int(b), int(kk)) for a, b, kk in ranges)
    by_batch = SpecConfig(method, k, schedule=schedule).k_by_batch(max_num_seqs)
    name = f"{method} k by batch size " + ",".join(f"{a}-{b}:{kk}" for a, b, kk in ranges)
    return Policy(name, "schedule", True, _fixed(method, k), live=Live(method, k, k_by_batch=tuple(by_batch)))


def candidates(
    methods: list[str], ks=KS, k_max: int = max(KS), oracle_depth: int | None = max(KS), hybrid: bool = True
) -> list[Policy]:
    """No speculation; per drafter fixed k for each k, its oracle and adaptive k; with the
    n-gram drafter and a model drafter, the realisable hybrid; with two or more drafters, the
    combination oracle charged at each step's own drafter's price and at the n-gram price.
    `hybrid`: whether the traces allow the hybrid (hybrid_possible).
    Oracles of model drafters propose at most `oracle_depth` drafts (None: no limit)."""
    methods = order_drafters(methods)
    caps = oracle_caps(methods, oracle_depth)
    out = [Policy("none", "none", True, lambda t: policies.none(len(t.generated_token_ids), START))]
    for m in methods:
        for k in ks:
            out.append(Policy(f"{m} k={k}", "fixed", True, _fixed(m, k), mode=m))
        out.append(
            Policy(
                f"{m} adaptive k<={k_max}",
                "adaptive",
                True,
                _adaptive(m, k_max),
                mode=m,
            )
        )
        depth = f" <={caps[m]}" if caps[m] else ""
        out.append(Policy(f"{m} oracle{depth}", "oracle", False, _oracle(m, caps[m]), mode=m))
    if "ngram" in methods and hybrid:
        for m in methods:
            if m != "ngram":
                out.append(
                    Policy(
                        f"ngram k={k_max} where it matches, else {m} k=3",
                        "hybrid",
                        True,
                        _hybrid(m, k_max),
                        mode=m,
                    )
                )
    if len(methods) > 1:
        both = "+".join(methods)
        comb = lambda t: policies.combination({m: t.drafters[m] for m in methods}, START, caps)  # noqa: E731
        model = next((m for m in reversed(methods) if m != "ngram"), methods[-1])  # the costlier mode
        out.append(Policy(f"combination oracle ({both})", "combination", False, comb, mode=model))
        if "ngram" in methods:
            out.append(
                Policy(
                    f"combination oracle ({both}), n-gram price",
                    "combination",
                    False,
                    comb,
                    price_as="ngram",
                    mode="ngram",
                )
            )
    return out


def drafters_of(traces: list[Trace], profile: profiles.Profile, wanted: list[str] | None = None) -> list[str]:
    """The drafters every trace has (or those asked for); each must be one the profile prices."""
    if not traces:
        raise WhatIfError("no traces to evaluate")
    common = set(traces[0].drafters)
    for t in traces[1:]:
        common &= set(t.drafters)
    if wanted:
        missing = [m for m in wanted if m not in common]
        if missing:
            raise WhatIfError(
                f"not every trace has acc_{missing[0]}; the traces all have: {', '.join(sorted(common)) or 'none'}"
            )
        common = set(wanted)
    unpriced = sorted(m for m in common if m not in profile.drafters)
    if unpriced:
        raise WhatIfError(
            f"profile {profile.name!r} has no cost for drafter {unpriced[0]!r} "
            f"(it prices: {', '.join(sorted(profile.drafters))}); pick --drafters among those"
        )
    return order_drafters(common)


def evaluate(
    traces: list[Trace],
    profile: str,
    batches: list[int],
    chosen: list[Policy],
    *,
    requests: int | None = None,
    engine: EngineConfig = EngineConfig(),
    progress: Callable[[str], None] | None = None,
) -> list[Outcome]:
    prof = profiles.load(profile)
    served = [t for t in traces if len(t.generated_token_ids) >= 1]
    if not served:
        raise WhatIfError("no trace has generated tokens")
    plans = {
        p.name: [[(s.drafter, s.drafts, s.emitted) for s in p.plan(t)] for t in served] for p in chosen if not p.live
    }
    # per trace and policy: (steps, drafts, tokens emitted), for the per-step means
    totals = {
        name: np.array([(len(pl), sum(d for _, d, _ in pl), sum(e for _, _, e in pl)) for pl in trace_plans])
        for name, trace_plans in plans.items()
    }
    counts = {b: requests or max(len(served), 4 * b) for b in batches}
    by_name = {p.name: p for p in chosen}
    jobs = [(b, p.name, p.price_as) for b in batches for p in chosen]
    served_at = _run_all(
        jobs,
        lambda b, name, price_as: _serve(
            prof, served, plans.get(name, []), b, counts[b], engine, price_as, by_name[name].live, by_name[name].mode
        ),
    )
    out: list[Outcome] = []
    for batch in batches:
        count = counts[batch]
        baseline = None
        base_phases: tuple = (None, None)
        for p in chosen:
            tok_s, tpot, phase_tpot, live_steps = served_at[(batch, p.name, p.price_as)]
            if p.live is not None:  # decided as served: the engine's own count of its steps
                steps, drafts, emitted = live_steps
            else:
                steps, drafts, emitted = totals[p.name][np.arange(count) % len(served)].sum(axis=0)
            if p.kind == "none":
                baseline, base_phases = tok_s, phase_tpot
            out.append(
                Outcome(
                    p.name,
                    p.kind,
                    p.realisable,
                    batch,
                    count,
                    tok_s,
                    tok_s / baseline if baseline else None,
                    float(emitted / steps) if steps else float("nan"),
                    float(drafts / steps) if steps else float("nan"),
                    tpot,
                    *phase_tpot,
                    *(b / own if b and own else None for b, own in zip(base_phases, phase_tpot)),
                )
            )
        if progress:
            progress(f"batch {batch}: {len(chosen)} policies over {count} requests")
    return out


_WORK: Callable | None = None  # what a forked worker of _run_all runs


def _work(job):
    return _WORK(*job)


def _run_all(jobs: list[tuple], work: Callable) -> dict:
    """work(*job) for every job: in worker processes forked from this one (one per CPU), where
    the platform forks, else one after another. Each job is a whole virtual-time simulation,
    independent of the others, so the results are the same either way."""
    global _WORK
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return {job: work(*job) for job in jobs}
    _WORK = work
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            return dict(zip(jobs, pool.map(_work, jobs)))
    finally:
        _WORK = None


def _serve(
    prof,
    traces: list[Trace],
    plans: list[list],
    batch: int,
    count: int,
    cfg: EngineConfig,
    price_as: str | None,
    live: Live | None = None,
    mode: str | None = None,
) -> tuple[float, float | None, tuple[float | None, float | None], tuple[int, int, int]]:
    """Output tokens per second (and mean TPOT, ms; and mean TPOT thinking and answering, for
    traces of a reasoning model) of `count` requests served closed loop by `batch` users, each
    request the next trace in turn with its plan (or, `live`, its steps decided as served); and
    the engine's decoding steps, drafts scheduled and tokens they emitted."""
    engine = ReplayEngine(prof, cfg, price_as=price_as, live=live, mode=None if live else mode)
    reqs = (
        Request(id=str(i), prompt="", max_tokens=len(traces[i % len(traces)].generated_token_ids), workload="traces")
        for i in range(count)
    )

    def submit(eng: Engine, req: Request, t_send: float, sink) -> None:
        assert isinstance(eng, ReplayEngine)  # the engine handed to simulate() below
        i = int(req.id)
        t = traces[i % len(traces)]
        if live is not None:
            a = t.drafters[live.drafter]
            eng.submit_live(
                req.id,
                t.prompt_token_ids,
                t.generated_token_ids,
                a.acc_len,
                offered=a.proposed,
                arrival=t_send,
                sink=sink,
                reasoning_end=t.reasoning_end,
            )
            return
        eng.submit_plan(
            req.id,
            t.prompt_token_ids,
            t.generated_token_ids,
            plans[i % len(traces)],
            arrival=t_send,
            sink=sink,
            reasoning_end=t.reasoning_end,
        )

    sim = SimSpec(prof.name, None, LoadShape(concurrency=batch), engine=cfg, num_requests=count)
    result = simulate(sim, reqs, engine=engine, submit=submit)
    frame = request_frame(result.run.records)
    failed = frame[~frame["ok"]]
    if len(failed):
        raise WhatIfError(
            f"{len(failed)} of the traces' requests cannot be served on {prof.name}: {failed['error_message'].iloc[0]}"
        )
    # the closed loop's own window (docs/metrics.md, "Throughput"), as loadgen simulate and run take it
    s = summarize(frame, ([], []), config={"clock": {"t0_ns": result.run.t0_ns}, "load": sim.load.describe()})
    tpot = s["tpot_ms"].get("mean") if s["tpot_ms"] else None
    ph = s.get("phases") or {}
    thinking, answering = ((ph.get(k) or {}).get("mean") for k in ("tpot_reasoning_ms", "tpot_answer_ms"))
    st = engine.stats
    decode_steps = int(st.itl.count)  # every emission after a request's first
    live_steps = (decode_steps, int(st.spec_draft_tokens), int(st.generation_tokens - len(frame)))
    return float(s["output_throughput_tok_s"]), tpot, (thinking, answering), live_steps


def best_realisable(outcomes: list[Outcome]) -> dict[int, Outcome]:
    """Per batch size, the realisable policy (speculating) with the highest throughput."""
    best: dict[int, Outcome] = {}
    for o in outcomes:
        if o.realisable and o.kind != "none" and (o.batch not in best or o.output_tok_s > best[o.batch].output_tok_s):
            best[o.batch] = o
    return best
