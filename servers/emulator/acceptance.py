"""Acceptance of a model drafter (EAGLE, EAGLE-3, a draft model, MTP), position by position.

For every output position i the process gives the tokens one verification step starting
there yields (accepted drafts + the bonus token), the same quantity the study's traces hold.
Text alternates between easy and hard stretches (a two-state Markov chain over positions:
`easy_share` of positions are easy, a stretch lasts 1/(1-stay) positions on average); the
draft for position i+d is right with probability `easy_accept` or `hard_accept` by the
stretch it falls in, times `depth_factor` for every draft after the first (a drafter predicting
from its own guesses does worse). Stretches make acceptance bursty, as in real traces: the
mean accepted length per step is lower than the per-position acceptance rate would suggest,
because steps crowd into the hard stretches. Requests differ too: with `request_spread` > 0
each request draws its own easy share from a Beta distribution with mean `easy_share` and
concentration 1/request_spread (some prompts are simply easier to draft for).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RegimeParams:
    easy_share: float
    stay: float
    easy_accept: float
    hard_accept: float
    depth_factor: float
    request_spread: float = 0.0

    def __post_init__(self) -> None:
        for name in ("easy_share", "stay", "easy_accept", "hard_accept", "depth_factor", "request_spread"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"acceptance parameter {name} must be in [0, 1], got {v}")


def _regimes(n: int, p: RegimeParams, rng: np.random.Generator) -> np.ndarray:
    """Easy (True) / hard stretches over n positions; stationary easy share `easy_share`, or a
    per-request draw around it."""
    share = p.easy_share
    if p.request_spread > 0 and 0 < share < 1:
        c = 1.0 / p.request_spread
        share = float(rng.beta(share * c, (1.0 - share) * c))
    leave = 1.0 - p.stay
    to_hard = min(1.0, 2.0 * leave * (1.0 - share))
    to_easy = min(1.0, 2.0 * leave * share)
    out = np.empty(n, dtype=bool)
    i, easy = 0, bool(rng.random() < share)
    while i < n:
        q = to_hard if easy else to_easy
        run = int(rng.geometric(q)) if q > 0 else n - i
        out[i : i + run] = easy
        i += run
        easy = not easy
    return out


DEPTH = 16  # drafts every position is drawn for, whatever k asks


def acceptance_lengths(n: int, k: int, p: RegimeParams, rng: np.random.Generator) -> np.ndarray:
    """For n positions: 1 + the number of the k drafts a step starting there would have
    accepted (int16).

    The draws do not depend on k (up to DEPTH): the same request and seed give, for any
    k <= DEPTH, min(acceptance_lengths(n, DEPTH), k + 1), as one model proposing more or fewer
    drafts would. So a run at one k and a run at another see the same text being easy or hard,
    and an exact trace (`acceptance_lengths(n, DEPTH)`) predicts both."""
    return acceptance_draws(n, k, p, rng)[0]


def acceptance_draws(n: int, k: int, p: RegimeParams, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`acceptance_lengths`, and for each of the n + max(k, DEPTH) positions the chance that a
    first draft for it is right (its stretch's rate; a later draft's is that times
    `depth_factor`): what a calibrated drafter's confidence in its draft would be
    (servers/emulator/verification.py). The same draws as `acceptance_lengths`."""
    if n <= 0 or k <= 0:
        return np.ones(max(n, 0), dtype=np.int16), np.zeros(max(n, 0), dtype=np.float32)
    d = max(k, DEPTH)
    easy = _regimes(n + d, p, rng)
    rate = np.where(easy, p.easy_accept, p.hard_accept)
    depth = np.full(d, p.depth_factor)
    depth[0] = 1.0
    window = np.lib.stride_tricks.sliding_window_view(rate, d)[:n]
    right = rng.random((n, d)) < window * depth
    return np.minimum(1 + np.cumprod(right, axis=1).sum(axis=1), k + 1).astype(np.int16), rate.astype(np.float32)


def trace_stats(acc_lens, ks=(1, 3, 5), depth: int = 5) -> dict:
    """The study's statistics of per-position acceptance arrays (paper.md): `tokens_per_step`
    at each k (stepping through each request: a step at position i emits min(acc[i], k+1)
    tokens and the next starts after them), and per-position `p` (p[0]: share of positions
    whose first draft is accepted; p[j]: of positions with j accepted, share with j+1)."""
    arrays = [np.asarray(a, dtype=np.int64) for a in acc_lens if len(a)]
    accepted = np.concatenate(arrays) - 1
    p = [float(np.mean(accepted >= 1))]
    for j in range(1, depth):
        base = np.sum(accepted >= j)
        p.append(float(np.sum(accepted >= j + 1) / base) if base else float("nan"))
    tps = {}
    for k in ks:
        tokens = steps = 0
        for a in arrays:
            i, n = 0, len(a)
            while i < n:
                e = min(int(a[i]), k + 1, n - i)
                tokens += e
                steps += 1
                i += e
        tps[k] = tokens / steps
    return {"tokens_per_step": tps, "p": p}
