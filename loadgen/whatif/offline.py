"""`--protocol offline`: the study's measurement (paper.md: `LLM.generate` on B copies of one
prompt), beside the closed loop of evaluate.py.

For each sampled request (300 by default, drawn with a seed, as the study sampled its data
sets), a batch of B copies of it starts together and runs until all are done, with no new
arrivals; the copies are alike, so they step in lockstep. The batch's latency is its prefill
step plus, per decoding step, the step's cost as the replaying engine charges it
(servers/emulator/replay.py): the target's forward over every copy's KV and tokens (drafts
included), the fixed step overhead, and the drafting for the next step (the drafter's price for
B requests at that step's drafts; `price_as` charges every drafter at one's price). A batch's
throughput is B x output tokens / latency; a policy's speedup at B is the mean over batches of
its throughput over the mean over batches of no speculation's.

The plans are the policies' own (policies.py), so fixed k verifies k drafts a step (fewer only
where the request has fewer tokens left, or an n-gram lookup offers fewer) and emits
min(acc_len, k + 1), and an oracle proposes exactly acc_len - 1.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loadgen.whatif.acceptance_traces import Trace
from loadgen.whatif.evaluate import START, Outcome, Policy, WhatIfError
from servers.emulator import profile as profiles

SAMPLES = 300


def sample(traces: list[Trace], count: int | None, seed: int = 0) -> list[Trace]:
    """`count` traces (SAMPLES by default) drawn without replacement with `seed`, in file order;
    all of them when there are no more."""
    served = [t for t in traces if len(t.generated_token_ids) >= 1]
    count = SAMPLES if count is None else count
    if len(served) <= count:
        return served
    chosen = np.sort(np.random.default_rng(seed).choice(len(served), size=count, replace=False))
    return [served[i] for i in chosen]


def step_times(
    prof: profiles.Profile,
    trace: Trace,
    plan: list[tuple[str, int, int]],
    batches: np.ndarray,
    price_as: str | None = None,
) -> np.ndarray:
    """Seconds each step takes (the prefill first) when B copies of the request run together:
    one row per B in `batches`."""
    p = len(trace.prompt_token_ids)
    drafts = np.array([d for _, d, _ in plan], dtype=np.float64)
    emitted = np.array([e for _, _, e in plan], dtype=np.float64)
    before = START + np.concatenate([[0.0], np.cumsum(emitted)[:-1]])  # tokens out before each step
    # per copy, per step (the prefill first): KV read, tokens computed
    kv = np.concatenate([[p], p + before + drafts])
    batched = np.concatenate([[p], 1.0 + drafts])
    b = batches[:, None].astype(np.float64)
    verify = prof.forward.time(b * kv, b * batched)
    out = verify + prof.step_overhead
    # drafting in step s is for step s's successor: the prefill drafts for plan[0], and so on
    for name in {price_as or d for d, _, _ in plan if d}:
        k = np.array([max(1, d) if m and (price_as or m) == name else 0 for m, d, _ in plan] + [0], dtype=np.float64)
        out = out + prof.drafters[name].time(k, b, b * kv, verify)
    return out


def evaluate(
    traces: list[Trace],
    profile: str,
    batches: list[int],
    chosen: list[Policy],
    *,
    requests: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> list[Outcome]:
    prof = profiles.load(profile)
    picked = sample(traces, requests, seed)
    if not picked:
        raise WhatIfError("no trace has generated tokens")
    for t in picked:
        if len(t.prompt_token_ids) + len(t.generated_token_ids) > prof.max_model_len:
            raise WhatIfError(
                f"trace {t.id!r} needs {len(t.prompt_token_ids) + len(t.generated_token_ids)} tokens "
                f"of context; {prof.name} holds {prof.max_model_len}"
            )
    bs = np.asarray(batches)
    n_out = np.array([len(t.generated_token_ids) for t in picked], dtype=np.float64)
    out: list[Outcome] = []
    baseline = None
    for p in chosen:
        lat = np.empty((len(picked), len(bs)))
        tpot = np.full((len(picked), len(bs)), np.nan)
        steps = drafts = emitted = 0
        for r, t in enumerate(picked):
            plan = [(s.drafter, s.drafts, s.emitted) for s in p.plan(t)]
            times = step_times(prof, t, plan, bs, p.price_as)
            lat[r] = times.sum(axis=1)
            if n_out[r] > 1:
                tpot[r] = times[:, 1:].sum(axis=1) / (n_out[r] - 1)
            steps += len(plan)
            drafts += sum(d for _, d, _ in plan)
            emitted += sum(e for _, _, e in plan)
        tput = (bs[None, :] * n_out[:, None] / lat).mean(axis=0)  # mean over batches, per B
        if p.kind == "none":
            baseline = tput
        mean_tpot: list[float | None] = (
            (np.nanmean(tpot, axis=0) * 1e3).tolist() if np.isfinite(tpot).any() else [None] * len(bs)
        )
        for j, b in enumerate(bs):
            out.append(
                Outcome(
                    p.name,
                    p.kind,
                    p.realisable,
                    int(b),
                    len(picked),
                    float(tput[j]),
                    float(tput[j] / baseline[j]) if baseline is not None else None,
                    emitted / steps if steps else float("nan"),
                    drafts / steps if steps else float("nan"),
                    mean_tpot[j],
                )
            )
        if progress:
            progress(f"{p.name}: {len(picked)} batches at each of {len(bs)} sizes")
    return out
