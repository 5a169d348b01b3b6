"""A cost profile from measured steps: what each engine step cost, read off the clients' chunk
times, against what the step had to do (bench/gpu_vllm.py; tests/test_stepfit.py checks it
recovers the emulator's own profile).

A streamed request gets one chunk per engine step it takes part in, so the gap between two of
its chunks is one step's time. What that step did follows from the requests' records: at the
gap's start, the requests running (first token received, last not yet) and their contexts
(prompt + tokens received: the KV the step reads), and the prompts whose first token arrives
at the gap's end (prefilled in that step). Then, per sample:

    gap = constant + per_kv_token x KV + per_batched_token x batched
    batched = running x (1 + drafts per step) + prompt tokens prefilled in the step

fitted by least squares over the baseline cells (no drafts); a drafter's cost is the SD cells'
residual, fitted as constant + per_request x running. (On a dilated emulator the records
already hold the emulated hardware's times: loadgen converts them, docs/metrics.md.)

`samples` sees only the steps a running request's gaps span; `engine_steps` rebuilds every
step the engine took, prefills it ran alone included, from all requests' chunk times together
(bench/cpu_profile.py fits on those: on 2 cores a prefill alone is a quarter of a cell's time).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from loadgen.measures.enginesteps import _clusters, engine_steps  # noqa: F401  (bench's callers)


def samples(frame: pd.DataFrame, drafts_per_step: float = 0.0) -> np.ndarray:
    """(gap s, KV tokens, batched tokens, running) for every decode gap of every request."""
    m = frame[frame["ok"] & (frame["n_chunks"] > 1)]
    if m.empty:
        return np.zeros((0, 4))
    times, dkv, drun, firsts, prompts = [], [], [], [], []
    for t, n, p in zip(m["chunk_t_ns"], m["chunk_tokens"], m["prompt_tokens"]):
        t, n, p = np.asarray(t, np.int64), np.asarray(n, np.int64), int(p or 0)
        times.append(t)
        add = n.copy()
        add[0] += p  # the prompt's KV exists from the first token on
        step = np.zeros(len(t), np.int64)
        step[0] = 1
        step[-1] -= 1
        add[-1] -= p + int(n.sum())  # a finished request frees its KV
        dkv.append(add)
        drun.append(step)
        firsts.append(t[0])
        prompts.append(p)
    t_all = np.concatenate(times)
    order = np.argsort(t_all, kind="stable")
    t_sorted = t_all[order]
    kv_after = np.cumsum(np.concatenate(dkv)[order])
    run_after = np.cumsum(np.concatenate(drun)[order])
    first_arr, prompt_arr = np.asarray(firsts), np.asarray(prompts)
    f_order = np.argsort(first_arr)
    f_sorted, p_cum = first_arr[f_order], np.concatenate([[0], np.cumsum(prompt_arr[f_order])])
    out = []
    for t in times:
        a, b = t[:-1], t[1:]
        i = np.searchsorted(t_sorted, a, side="right") - 1  # the state once everything up to a happened
        kv, running = kv_after[i], run_after[i]
        # prompts whose first token came at the step's end (within the gap): prefilled in it
        prefill = p_cum[np.searchsorted(f_sorted, b, side="right")] - p_cum[np.searchsorted(f_sorted, a, side="right")]
        batched = running * (1.0 + drafts_per_step) + prefill
        out.append(np.column_stack([(b - a) / 1e9, kv, batched, running]))
    return np.concatenate(out)


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


def fit(cells: list[tuple[str, np.ndarray]], baseline: str = "baseline", robust: bool = True) -> dict:
    """`cells`: (variant, samples). The forward fitted on the baseline's, each other variant's
    drafting on its residuals (robustly: _robust; `robust` False: plain least squares, every
    gap counted, for a mean step time where stalls are part of what was measured)."""
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
