"""The engine's own step timeline read off a run's chunk times (docs/metrics.md, "The engine's steps,
and the time breakdown"): what servers/emulator/costfit.py fits a real engine's cost model on,
and what the report's time breakdown prices. Nothing from the server but its per-request SD
counts (vLLM's --per-request-spec-decode-metrics) where it gives them; the step count is what the
chunk times say, and can be compared with the server's own (its iteration-tokens histogram).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def engine_steps(frame: pd.DataFrame, k: int = 0) -> np.ndarray:
    """The engine's own timeline, step by step, from every request's chunk times together: an
    engine step ends where its requests' chunks arrive, within a few milliseconds of each other
    (a cluster: no two chunks of one request, no gap over 0.3 x the median chunk gap), so the
    steps between them, prefills included, are all there (`samples` below has only
    the steps a running request's gaps span: a prefill the engine ran alone, at 1 user every one
    and at round boundaries under load, is in none). The count is what the chunk times say; no
    server's count of its steps is a target (compare them beside it: bench/cpu_profile.py). A step
    starts where the one before ended, or, where nothing was in the engine then, when its first
    request was sent. Per step:

        (seconds, KV tokens, batched tokens, running, prefilled tokens, drafting, drafts, accepted)

    running: the requests decoding in it (first token before it, last one not yet; a chunk vLLM
    coalesced into a later one does not take a request out of a step); prefilled: the prompts
    whose first token ends it; KV: the running requests' contexts, the tokens the step computes
    and those prompts (the emulator's KV of a step); batched: running + drafts + prefilled. With
    `k`, a drafter's: a running request drafts in a step where its chunk emitted more than one
    token, and in the others with the probability its server's count leaves (_draft_chances);
    drafting is the chance any does, drafts the expected count; accepted: the tokens past one of
    its decode chunks (drafts the step accepted; servers/emulator/costfit.py's STEP)."""
    m = frame[frame["ok"] & (frame["n_chunks"] > 0)].reset_index(drop=True)
    if m.empty:
        return np.zeros((0, 8))
    times = [np.asarray(t, np.int64) for t in m["chunk_t_ns"]]
    tokens = [np.asarray(n, np.int64) for n in m["chunk_tokens"]]
    t_all = np.concatenate(times)
    req = np.concatenate([np.full(len(t), i) for i, t in enumerate(times)])
    n_all, pos = np.concatenate(tokens), np.concatenate([np.arange(len(t)) for t in times])
    order = np.argsort(t_all, kind="stable")
    t_all, req, n_all, pos = t_all[order], req[order], n_all[order], pos[order]
    gaps = np.concatenate([np.diff(t) for t in times if len(t) > 1] or [np.zeros(0, np.int64)])
    split = 0.3 * float(np.median(gaps)) if len(gaps) else 0.0
    send = m["t_send_ns"].to_numpy(np.int64)
    first = np.array([t[0] for t in times])
    last = np.array([t[-1] for t in times])
    prompt = m["prompt_tokens"].fillna(0).to_numpy(np.int64)
    ctx = prompt.astype(float)
    p_draft, per_draft = _draft_chances(m, tokens, k)
    bounds = _clusters(t_all, req, split)
    out, prev_end = [], None
    for a, b in zip(bounds[:-1], bounds[1:]):
        begin, end = t_all[a], t_all[b - 1]
        ids, emitted = req[a:b], n_all[a:b]
        new = ids[pos[a:b] == 0]
        running = np.flatnonzero((first < begin) & (last >= begin))
        pending = bool(len(running)) or bool(len(new) and send[new].min() < (prev_end or 0))
        start = prev_end if prev_end is not None and pending else (send[new].min() if len(new) else begin)
        prefill = float(prompt[new].sum())
        drafting = drafts = 0.0
        if k and len(running):
            many = set(ids[emitted > 1].tolist())
            p = np.array([1.0 if r in many else p_draft[r] for r in running])
            drafting, drafts = 1.0 - float(np.prod(1.0 - p)), float((p * per_draft[running]).sum())
        kv = float(ctx[running].sum()) + len(running) + drafts + prefill  # with the tokens it computes
        step_accepted = float(np.clip(emitted[pos[a:b] > 0] - 1, 0, None).sum())
        out.append(
            (
                (end - start) / 1e9,
                kv,
                len(running) + drafts + prefill,
                len(running),
                prefill,
                drafting,
                drafts,
                step_accepted,
            )
        )
        np.add.at(ctx, ids, emitted)
        prev_end = end
    return np.array(out)


def _draft_chances(m: pd.DataFrame, tokens: list[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per request: the chance it drafts in a step whose chunk carried one token (what its
    num_spec_steps leaves after the steps that accepted a draft; 1 where the server does not say),
    and its mean drafts per drafting step (num_draft_tokens / num_spec_steps; k where not given)."""
    p_draft, per_draft = np.zeros(len(m)), np.full(len(m), float(k))
    if not k:
        return p_draft, per_draft
    for i, r in enumerate(m.itertuples()):
        n = tokens[i][1:]
        own, accepted = max(1, len(n)), int((n > 1).sum())
        spec = r.server_spec_steps if "server_spec_steps" in m else None
        spec = own if spec is None or pd.isna(spec) else float(spec)
        p_draft[i] = min(1.0, max(0.0, spec - accepted) / max(1, own - accepted))
        drafted = r.server_draft_tokens if "server_draft_tokens" in m else None
        if drafted is not None and not pd.isna(drafted) and spec:
            per_draft[i] = min(float(k), float(drafted) / spec)
    return p_draft, per_draft


def _clusters(t: np.ndarray, req: np.ndarray, split: float) -> list[int]:
    """Where each cluster of time-sorted chunk events starts (and the end): a new one past a gap
    over `split`, or at a second chunk of one request."""
    bounds, members = [0], {int(req[0])}
    for j in range(1, len(t)):
        if t[j] - t[j - 1] > split or int(req[j]) in members:
            bounds.append(j)
            members = set()
        members.add(int(req[j]))
    return bounds + [len(t)]


def samples(frame: pd.DataFrame, drafts_per_step: float = 0.0) -> np.ndarray:
    """(gap s, KV tokens, batched tokens, running) for every decode gap of every request: the
    gap between two of a request's chunks is one engine step, at the KV the running requests
    held at its start and the tokens it batched (their tokens and drafts, the prompts whose
    first token came at its end). It sees only the steps a running request's gaps span;
    `engine_steps` rebuilds every step."""
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
