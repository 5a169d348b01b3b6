"""A model drafter's acceptance process (servers/emulator/acceptance.py's RegimeParams) fitted to
measured traces of that drafter: what `loadgen fit` writes into a profile as the model's own
acceptance, per kind of request, instead of another model's data.

The traces are a fixed-k run's (loadgen.whatif.acceptance_traces.estimate: a step that accepted
all k drafts only says "at least k + 1"), so what they say, and all the fit is held to, is what
a run at k' <= k would see: tokens per step at k' = 1..k and the per-position acceptance
P(j), j < k. Beyond k the process extrapolates (a profile says fitted_k). Search: Nelder-Mead
over the parameters' logits, the process simulated with fixed random numbers (no speedup is
ever a target)."""

from __future__ import annotations

import math

import numpy as np

from servers.emulator.acceptance import RegimeParams, acceptance_lengths, trace_stats

KEYS = ("easy_share", "stay", "easy_accept", "hard_accept", "depth_factor", "request_spread")


def nelder_mead(f, x0, step, iters: int = 120):
    """Minimise f from x0 (a plain Nelder-Mead; numpy only)."""
    pts = [np.array(x0, float)] + [np.array(x0, float) + np.eye(len(x0))[i] * step[i] for i in range(len(x0))]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centroid = np.mean(pts[:-1], axis=0)
        refl = centroid + (centroid - pts[-1])
        fr = f(refl)
        if fr < vals[0]:
            exp = centroid + 2 * (centroid - pts[-1])
            fe = f(exp)
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = centroid + 0.5 * (pts[-1] - centroid)
            fc = f(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:
                pts = [pts[0] + 0.5 * (p - pts[0]) for p in pts]
                vals = [f(p) for p in pts]
    best = int(np.argmin(vals))
    return pts[best], vals[best]


def observed(acc_lens: list[np.ndarray], k: int) -> dict:
    """What traces censored at k say: tokens per step at 1..k, P(j) for j < k."""
    s = trace_stats([np.minimum(a, k + 1) for a in acc_lens], ks=tuple(range(1, k + 1)), depth=k)
    return {"tokens_per_step": s["tokens_per_step"], "p": s["p"][:k]}


def _loss(sim: dict, target: dict) -> float:
    tps = sum(((sim["tokens_per_step"][j] - v) / v) ** 2 for j, v in target["tokens_per_step"].items())
    return 3 * tps + sum((a - b) ** 2 for a, b in zip(sim["p"], target["p"]) if b == b)


def _sig(v: float) -> float:
    return 1 / (1 + math.exp(-v))


def fit_probabilities(loss, starts, iters: int) -> tuple[float, ...]:
    """Probabilities minimising `loss(probs)`: Nelder-Mead over their logits (so every step
    stays in (0, 1)), from the best of `starts`."""
    f = lambda z: loss(tuple(_sig(v) for v in z))  # noqa: E731
    z0 = min((tuple(math.log(p / (1 - p)) for p in s) for s in starts), key=f)
    z, _ = nelder_mead(f, z0, (0.5,) * len(z0), iters=iters)
    return tuple(_sig(v) for v in z)


def fit_regime(acc_lens: list[np.ndarray], k: int, iters: int = 150, seed: int = 0) -> tuple[RegimeParams, dict]:
    """RegimeParams reproducing the traces' statistics up to k, and the fitted-vs-measured figures."""
    target = observed(acc_lens, k)
    n = max(64, int(np.median([len(a) for a in acc_lens])) if acc_lens else 64)

    def stats(probs) -> dict:
        rng = np.random.default_rng(seed)
        p = RegimeParams(*probs)
        return observed([acceptance_lengths(n, k, p, rng) for _ in range(80)], k)

    starts = (
        (0.5, 0.9, 0.97, 0.4, 0.85, 0.05),
        (0.75, 0.95, 0.975, 0.55, 0.95, 0.05),
        (0.4, 0.8, 0.9, 0.3, 0.8, 0.05),
    )
    probs = fit_probabilities(lambda q: _loss(stats(q), target), starts, iters)
    params = RegimeParams(*probs)
    return params, {"measured": target, "fitted": stats(probs)}


def toml_section(name: str, p: RegimeParams) -> list[str]:
    return [f"[{name}]"] + [f"{key} = {getattr(p, key):.4f}" for key in KEYS]
