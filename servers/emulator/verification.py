"""Adaptive verification (`"enable_adaptive_verification": true` in the speculative config), as
vLLM 0.32-0.33 computes it (vllm/v1/worker/gpu/spec_decode/adaptive_verification.py, read in
0.33's source; 0.32's is the same but for host copies).

Each step, from the requests it scheduled with drafts: every draft slot (request r, position j)
scores its survival probability, the running product of r's per-position confidences (the
chance that drafts 0..j are all accepted). The step verifies the `budget` best slots of the
whole batch, the budget B that maximises

    (sampling requests + the sum of the B best scores) / (draft cost[requests] + verify cost[tokens without drafts + B])

over B = 0 .. the drafts scheduled (`budget`). The budget is chosen on the host from each
request's confidences of one step before (vLLM copies them to the host a step late), the slots
admitted on the device by the current ones (`admit`); survival falls along a request, so the
admitted slots of a request are always its first. The costs come from curves vLLM profiles at
start-up (dummy steps of N target tokens, min(N, max_num_seqs) requests at a context of
VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN, 8192; the drafter's time by requests): here the
emulated GPU's own cost model at every size (it pads to no CUDA-graph size), made
non-decreasing as vLLM makes its curves (`cost_tables`).

What the emulator assumes: a draft's confidence is the probability its drafter's acceptance
model gives it (engine.py), i.e. the estimator vLLM fits online (a logistic model of the
draft's own probability, per position) at its best; vLLM's n-gram speculator has no draft
probabilities and no such flag, so there adaptive verification changes nothing (as in vLLM).
The scheduler counts the drafts it scheduled, not those verified: a draft cut by the budget is
counted drafted and not accepted (vllm:spec_decode_num_draft_tokens and the per-request metrics
alike), and a step whose k is 0 (num_speculative_tokens_per_batch_size) counts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PROFILE_CONTEXT_LEN = 8192  # vLLM's VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN default


@dataclass(frozen=True)
class CostTables:
    """Milliseconds: the drafter by requests in the step, the target by tokens in the step."""

    draft_ms: np.ndarray
    verify_ms: np.ndarray


def cost_tables(profile, drafter, k: int, max_num_seqs: int, max_batched_tokens: int, max_model_len: int) -> CostTables:
    """The cost curves vLLM's start-up profiling would measure on the emulated GPU."""
    context = min(PROFILE_CONTEXT_LEN, max_model_len)
    tokens = np.arange(max_batched_tokens + 1)
    verify = np.asarray(profile.forward.time(np.minimum(tokens, max_num_seqs) * context, tokens), dtype=np.float64)
    reqs = np.maximum(np.arange(max_num_seqs + 1), 1)  # the first profiled size below it, as vLLM's lookup
    kv = reqs * context
    draft = drafter.time(k, reqs, kv, profile.forward.time(kv, reqs * (1 + k)))
    draft = np.broadcast_to(np.asarray(draft, dtype=np.float64), reqs.shape)
    return CostTables(
        draft_ms=np.maximum(np.maximum.accumulate(draft * 1e3), 0.0),
        verify_ms=np.maximum(np.maximum.accumulate(verify * 1e3), 1e-6),
    )


def budget(
    stale: list[np.ndarray],
    scheduled: np.ndarray,
    non_draft_tokens: int,
    sampling: int,
    requests: int,
    tables: CostTables,
) -> int:
    """How many drafts the step verifies (vLLM's get_num_tokens): `stale`, the confidences of
    each request with drafts as the host has them (one step old); `scheduled`, its drafts;
    `non_draft_tokens`, the step's target tokens that are not drafts; `sampling`, the requests
    that sample a token this step; `requests`, all the step scheduled (the drafter's cost)."""
    max_budget = int(scheduled.sum())
    parts = [np.cumprod(np.asarray(c, dtype=np.float64))[:d] for c, d in zip(stale, scheduled)]
    scores = np.sort(np.concatenate(parts) if parts else np.zeros(0))[::-1][:max_budget]
    accepted = np.concatenate(([sampling], sampling + np.cumsum(scores)))
    costs = tables.draft_ms[requests] + tables.verify_ms[non_draft_tokens : non_draft_tokens + max_budget + 1]
    return int(np.argmax(accepted / costs))


def admit(current: list[np.ndarray], scheduled: np.ndarray, draft_budget: int) -> np.ndarray:
    """Drafts each request verifies: the `draft_budget` slots of highest survival by the current
    confidences (vLLM's _assign_draft_token_budget; ties to the earlier request, then position)."""
    scheduled = np.asarray(scheduled, dtype=np.int64)
    if draft_budget >= int(scheduled.sum()):
        return scheduled.copy()
    if draft_budget <= 0:
        return np.zeros_like(scheduled)
    scores, owner = [], []
    for r, (c, d) in enumerate(zip(current, scheduled)):
        s = np.cumprod(np.asarray(c, dtype=np.float64))[:d]
        scores.append(s)
        owner.append(np.full(len(s), r))
    flat, who = np.concatenate(scores), np.concatenate(owner)
    order = np.lexsort((np.arange(len(flat)), -flat))[:draft_budget]
    return np.bincount(who[order], minlength=len(scheduled)).astype(np.int64)
