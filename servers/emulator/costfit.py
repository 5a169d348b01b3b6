"""A cost profile fitted to a real engine's measured steps, with no negative term.

Input: step samples, one row per engine step (the columns of STEP; loadgen/measures/enginesteps.py
reads them off a sweep's chunk times). The target's forward is a roofline in two terms
(profile.Forward with `weights`): a step reads the weights whatever it computes, and computes its
tokens; on a CPU a step of 1 and of 4 requests cost the same, then time grows with the tokens. It
is fitted on the baseline's steps: for each knee N* (the tokens where computing starts to cost
more than reading; a grid, then refined between its neighbours), non-negative least squares on
per KV token and per token past the knee, no constant (a step's fixed costs are what it reads
whatever it computes); the knee with the least error wins. Each drafter is then fitted on its own
steps' residuals over that forward, again non-negative: what SD mode adds to every step (per
step, per token), and the drafting itself priced as the method works: a lookup drafter (n-gram,
suffix) per drafting step, per drafting request and per proposed draft; a draft model as a model,
k forwards of its own over the requests it drafts for, that forward fitted (fit_forward) on the
draft model served alone, or, without that, its per token and per KV token from these steps.

Nothing here is tuned to the engine's own step count: the samples are what the chunk times say.
The time breakdown (`breakdown`) splits a step as the study does (paper.md, section 3.2):
drafting, verifying the accepted tokens, verifying the rejected drafts (what the forward costs
with them over what it would cost without), and the rest (prefill, SD mode, overhead).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from servers.emulator.profile import Drafter, Forward

# columns of a step sample
STEP = ("seconds", "kv", "batched", "running", "prefill", "drafting", "drafts", "accepted")
T, KV, BATCHED, RUNNING, PREFILL, DRAFTING, DRAFTS, ACCEPTED = range(len(STEP))


@dataclass(frozen=True)
class Fit:
    """A fitted part: its terms (seconds), how many steps it was fitted on, and the root mean
    square of its residuals (seconds)."""

    terms: dict[str, float]
    samples: int
    rms: float
    stderr: dict[str, float | None] = field(default_factory=dict)  # None: held at 0 by the bound


def _stderr(x: np.ndarray, y: np.ndarray, coef: np.ndarray, names: list[str]) -> dict[str, float | None]:
    """Each term's standard error from the least squares over the terms the bound left free
    (sigma^2 (X'X)^-1 on those columns); None for a term held at zero: the data did not place it."""
    free = coef > 0
    out: dict[str, float | None] = {n: None for n in names}
    dof = len(y) - int(free.sum())
    if not free.any() or dof <= 0:
        return out
    xa = x[:, free]
    r = y - x @ coef
    cov = float(r @ r) / dof * np.linalg.pinv(xa.T @ xa)
    for name, se in zip([n for n, f in zip(names, free) if f], np.sqrt(np.clip(np.diag(cov), 0, None))):
        out[name] = float(se)
    return out


def knees(n: np.ndarray) -> np.ndarray:
    """Candidate knees: 1, the tokens steps had, and a geometric grid between."""
    top = max(2.0, float(np.max(n)) if len(n) else 2.0)
    return np.unique(np.concatenate([[1.0], np.geomspace(1, top, 40), np.unique(n)]))


def fit_forward(steps: np.ndarray, weights: np.ndarray | None = None) -> tuple[Forward, Fit]:
    """A roofline forward from a model's own steps (a baseline's: every step counted, a cell's
    throughput is its mean step, stalls included): per KV token + max(weights, per token x
    tokens), no constant (a step's fixed costs are in what it reads whatever it computes).
    `weights`: each step's in the least squares (`loadgen fit`: every cell counts alike, however
    many steps it took)."""
    from scipy.optimize import minimize_scalar, nnls  # fitting only (the test extra); pricing needs none

    t, kv, n = steps[:, T], steps[:, KV], steps[:, BATCHED]
    sw = np.ones(len(t)) if weights is None else np.sqrt(weights)

    def err(knee: float) -> tuple[float, np.ndarray]:
        coef, res = nnls(np.column_stack([kv, np.maximum(knee, n)]) * sw[:, None], t * sw)
        return res, coef

    grid = knees(n)
    i = int(np.argmin([err(x)[0] for x in grid]))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    knee = float(minimize_scalar(lambda x: err(x)[0], bounds=(lo, hi), method="bounded").x) if hi > lo else grid[i]
    if err(grid[i])[0] < err(knee)[0]:
        knee = float(grid[i])
    a, b = err(knee)[1]
    fw = Forward(constant=0.0, per_kv_token=float(a), per_batched_token=float(b), weights=float(b * knee))
    r = t - fw.time(kv, n)
    x = np.column_stack([kv, np.maximum(knee, n)])
    se = _stderr(x * sw[:, None], t * sw, np.array([a, b]), ["per_kv_token", "per_batched_token"])
    se["weights"] = None if se["per_batched_token"] is None else se["per_batched_token"] * knee
    terms = {"per_kv_token": float(a), "per_batched_token": float(b), "weights": float(b * knee)}
    return fw, Fit(terms, len(t), _rms(r), se)


def _rms(r: np.ndarray) -> float:
    return float(np.sqrt(np.mean(r**2))) if len(r) else 0.0


def fit_drafter(
    method: str, k, steps: np.ndarray, forward: Forward, alone: Forward | None = None, weights: np.ndarray | None = None
) -> tuple[Drafter, Fit]:
    """A drafter's terms from its own steps' residuals over the target's `forward`: SD mode's
    (every step: mode_per_step, mode_per_token) and drafting's. A lookup drafter (n-gram,
    suffix): per_step in a step in which any request drafts, per_request drafting,
    per_draft_token proposed. A draft model: k forwards of its own a drafting step, over the
    requests drafting; with `alone` (its forward fitted from serving it alone: fit_forward on its
    own steps), that forward as it is, and only SD mode's terms fitted; without, its per KV token
    and per token from these steps (at one k a draft forward's fixed cost cannot be told from SD
    mode's per step, so it lands there and a prediction at another k misses it: serve it alone).
    `k`: one for every step, or each step's own (cells at several k fitted together; the
    profile's fit_k is the commonest)."""
    from scipy.optimize import nnls

    t, kv, n = steps[:, T], steps[:, KV], steps[:, BATCHED]
    resid = t - forward.time(kv, n)
    p = steps[:, DRAFTING]
    k = np.broadcast_to(np.asarray(k), (len(t),)) if np.ndim(k) else k
    fit_k = int(np.bincount(np.asarray(k, int)).argmax()) if np.ndim(k) and len(t) else int(np.max(k, initial=0))
    requests = steps[:, DRAFTS] / np.maximum(k, 1)  # the expected requests drafting k each
    cols = {"mode_per_step": np.ones(len(t)), "mode_per_token": n}
    if method == "draft_model" and alone is not None:
        resid = resid - k * p * alone.time(kv, requests) * (requests > 0)
    elif method == "draft_model":
        cols |= {"per_kv_token": k * p * kv, "per_batched_token": k * requests}
    else:
        cols |= {"per_step": p, "per_request": requests, "per_draft_token": steps[:, DRAFTS]}
    names = list(cols)
    sw = np.ones(len(t)) if weights is None else np.sqrt(weights)
    x = np.column_stack([cols[c] for c in names]) * sw[:, None]
    coef, _ = nnls(x, resid * sw)
    terms = dict(zip(names, (float(v) for v in coef)))
    se = _stderr(x, resid * sw, coef, names)
    mode_step, mode_token = terms["mode_per_step"], terms["mode_per_token"]
    if method == "draft_model":
        own = alone or Forward(0.0, terms["per_kv_token"], terms["per_batched_token"])
        d = Drafter(method, draft_forward=own, mode_per_step=mode_step, mode_per_token=mode_token, fit_k=fit_k)
    else:
        d = Drafter(
            method,
            per_step=terms["per_step"],
            per_request=terms["per_request"],
            per_draft_token=terms["per_draft_token"],
            mode_per_step=mode_step,
            mode_per_token=mode_token,
            fit_k=fit_k,
        )
    model = forward.time(kv, n) + d.mode_time(n) + drafting_time(d, k, steps, forward)
    return d, Fit(terms, len(t), _rms(t - model), se)


def drafting_time(d: Drafter, k: int, steps: np.ndarray, forward: Forward) -> np.ndarray:
    """The drafter's price of each step (profile.Drafter.time) for the expected requests drafting
    k each, its per-step cost weighed by the chance any request drafts (as the fit prices it)."""
    p, drafts = steps[:, DRAFTING], steps[:, DRAFTS]
    requests = drafts / np.maximum(k, 1)
    verify = forward.time(steps[:, KV], steps[:, BATCHED])
    t = d.time(k, requests, steps[:, KV], verify, drafts=drafts)
    return t + d.per_step * (p - (requests > 0))


def breakdown(
    steps: np.ndarray, forward: Forward, drafter: Drafter | None, k: int, overhead: float = 0.0
) -> dict[str, float]:
    """Shares of the steps' modelled time: drafting; verifying the rejected drafts (the forward
    with them less the forward without them); verifying the accepted tokens (the decode part of
    the forward without the rejected drafts: every running request's token and its accepted
    drafts, the weights read included); the rest (the prompts' prefill in the forward, SD mode, a
    profile's fixed step `overhead`). Also the
    modelled and measured seconds, so a reader sees how much of the measured time the model
    explains."""
    kv, n, pre = steps[:, KV], steps[:, BATCHED], steps[:, PREFILL]
    rejected = np.clip(steps[:, DRAFTS] - steps[:, ACCEPTED], 0, None)
    full = forward.time(kv, n)
    kept = forward.time(kv - rejected, n - rejected)
    no_prefill = np.where(n - rejected - pre > 0, forward.time(kv - rejected - pre, n - rejected - pre), 0.0)
    draft = drafting_time(drafter, k, steps, forward) if drafter is not None and k else np.zeros(len(n))
    mode = drafter.mode_time(n) if drafter is not None else np.zeros(len(n))
    parts = {
        "drafting": float(draft.sum()),
        "verify_rejected": float((full - kept).sum()),
        "verify_accepted": float(no_prefill.sum()),
    }
    total = float((full + draft + mode + overhead).sum())
    parts["rest"] = total - sum(parts.values())
    out = {f"{key}_share": v / total if total else 0.0 for key, v in parts.items()}
    out |= {"modelled_s": total, "measured_s": float(steps[:, T].sum()), "steps": int(len(n))}
    return out


def _forward_lines(fw: Forward) -> list[str]:
    return [
        f"constant = {fw.constant:.6e}",
        f"per_kv_token = {fw.per_kv_token:.6e}",
        f"per_batched_token = {fw.per_batched_token:.6e}",
        f"weights = {fw.weights:.6e}",
    ]


def profile_text(
    *,
    description: str,
    models: list[str],
    max_model_len: int,
    forward: tuple[Forward, Fit],
    drafters: dict[str, tuple[Drafter, Fit]],
    source: str,
    machine: dict | None = None,
    acceptance: dict[str, dict] | None = None,
    record: list[str] | tuple[str, ...] = (),
) -> str:
    """A profile file (servers/emulator/profile.py reads it): the roofline forward and each
    drafter's fitted terms, with where they came from in comments; the machine they were
    measured on ([machine], servers/emulator/fingerprint.py), each model drafter's acceptance
    fitted from its own traces per kind of request ([acceptance_fitted.METHOD.KIND]:
    RegimeParams, servers/emulator/acceptfit.py), and `record`, the fit's account in words, as
    the file's opening comment."""
    fw, fit = forward
    lines = [f"# {ln}" if ln else "#" for ln in record] + [
        f"# fitted by servers/emulator/costfit.py: {source}",
        f'description = "{description}"',
        f"models = {list(models)!r}".replace("'", '"'),
        'acceptance = "llama-3.1-8b"  # content (n-gram\'s) and any acceptance not fitted below: borrowed, and said',
        f"max_model_len = {max_model_len}",
        "kv_capacity_tokens = 1000000  # no cell preempted",
        f'source = "{fit.samples} baseline steps, residual rms {fit.rms * 1e3:.1f} ms"',
    ]
    if machine:
        lines += ["", "[machine]  # where these costs were measured: another machine is refused (fingerprint.py)"]
        lines += [f"{k} = {json.dumps(v)}" for k, v in machine.items()]
    lines += [
        "",
        "[forward]  # constant + per_kv_token x KV + max(weights, per_batched_token x tokens)",
        *_forward_lines(fw),
        "",
        "[step]",
        "overhead = 0.0  # a step's fixed costs are in weights (read whatever it computes)",
    ]
    for method, (d, f) in drafters.items():
        lines += _drafter_lines(method, d, f)
    for method, kinds in (acceptance or {}).items():
        for kind, (params, k) in kinds.items():
            lines += ["", f"[acceptance_fitted.{method}.{kind}]  # from its own traces at k {k}; beyond, extrapolated"]
            lines += [f"{key} = {getattr(params, key):.4f}" for key in ACCEPT_KEYS]
    return "\n".join(lines) + "\n"


ACCEPT_KEYS = ("easy_share", "stay", "easy_accept", "hard_accept", "depth_factor", "request_spread")


def _drafter_lines(method: str, d: Drafter, f: Fit) -> list[str]:
    lines = ["", f"[drafters.{method}]  # {f.samples} steps, residual rms {f.rms * 1e3:.1f} ms"]
    lines += [
        f"mode_per_step = {d.mode_per_step:.6e}",
        f"mode_per_token = {d.mode_per_token:.6e}",
        f"fit_k = {d.fit_k}",
    ]
    if method not in ("ngram", "suffix"):
        lines.append(f'acceptance = "{method}"  # where none is fitted: borrowed')
    if d.draft_forward is not None:
        lines += ["", f"[drafters.{method}.forward]  # the draft model's own forward, k of them a drafting step"]
        return lines + _forward_lines(d.draft_forward)
    return lines + [
        f"per_step = {d.per_step:.6e}",
        f"per_request = {d.per_request:.6e}",
        f"per_draft_token = {d.per_draft_token:.6e}",
    ]


def negative_terms(forward: Fit, drafters: dict[str, Fit]) -> list[str]:
    """Every fitted term below zero, by name (none: non-negative least squares)."""
    out = [f"forward.{k}" for k, v in forward.terms.items() if v < 0]
    return out + [f"{m}.{k}" for m, f in drafters.items() for k, v in f.terms.items() if v < 0]


def _robust(x: np.ndarray, y: np.ndarray, rounds: int = 3) -> tuple[np.ndarray, int]:
    """Least squares, then again without the samples more than 5 median absolute deviations off
    (a gap that spans a stall of the client or the server is not a step's cost); the
    coefficients and how many samples were dropped."""
    keep = np.ones(len(y), bool)
    for _ in range(rounds):
        coef = np.linalg.lstsq(x[keep], y[keep], rcond=None)[0]
        r = y - x @ coef
        mad = np.median(np.abs(r[keep] - np.median(r[keep]))) or 1e-12
        keep = np.abs(r - np.median(r[keep])) <= 5 * 1.4826 * mad
    return coef, int((~keep).sum())


def linear_fit(cells: list[tuple[str, np.ndarray]], baseline: str = "baseline", robust: bool = True) -> dict:
    """The plain linear cost model, gap = constant + per_kv_token x KV + per_batched_token x
    batched, by least squares (a coefficient may come out negative: `fit_forward` is the
    non-negative roofline). `cells`: (variant, samples of loadgen.measures.enginesteps.samples).
    The forward fitted on the baseline's, each other variant's drafting on its residuals
    (robustly: _robust; `robust` False: plain least squares, every gap counted, for a mean step
    time where stalls are part of what was measured)."""
    base = np.concatenate([s for v, s in cells if v == baseline])
    x = np.column_stack([np.ones(len(base)), base[:, 1], base[:, 2]])
    coef, dropped = _robust(x, base[:, 0]) if robust else (np.linalg.lstsq(x, base[:, 0], rcond=None)[0], 0)
    out = {
        "forward": {
            "constant": float(coef[0]),
            "per_kv_token": float(coef[1]),
            "per_batched_token": float(coef[2]),
            "samples": int(len(base)),
            "dropped": dropped,
        }
    }
    for variant in dict.fromkeys(v for v, _ in cells if v != baseline):
        s = np.concatenate([s for v, s in cells if v == variant])
        resid = s[:, 0] - (coef[0] + coef[1] * s[:, 1] + coef[2] * s[:, 2])
        d, dropped = _robust(np.column_stack([np.ones(len(s)), s[:, 3]]), resid)
        out[variant] = {"constant": float(d[0]), "per_request": float(d[1]), "samples": int(len(s)), "dropped": dropped}
    return out
