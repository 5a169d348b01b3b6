"""How a speculation policy steps through one request, given its acceptance trace: which
drafter proposes how many drafts at each step, and how many tokens the step emits. Plain
step plans; what a step costs is the engine's business (servers/emulator/replay.py).

A plan starts at output position `start`: 1 when served (the prefill emits the first token
alone; decoding steps start after it), 0 for the study's tokens-per-step statistics. No step
proposes more drafts than tokens are left after its bonus (n - 1 - i), as vLLM caps them.

- fixed k (one drafter): every step proposes k drafts (an n-gram drafter: as many as its match
  offers, none without a match) and emits min(acc_len[i], drafts + 1);
- oracle (one drafter): proposes exactly what will be accepted, acc_len[i] - 1 drafts (at
  most `max_drafts` when given), and emits one more; where nothing would be accepted it
  proposes nothing;
- combination oracle: at each position the drafter with the longest acc_len (within its
  `max_drafts`), proposing exactly its acceptance (ties: the first listed, so list the
  cheaper drafter first);
- adaptive (realisable): k for the next step from the acceptance seen so far (an average of
  recent accepted drafts, plus one), within 1..k_max;
- hybrid (realisable): the n-gram drafter where its match offers drafts (known before
  verifying: the lookup found something), else the model drafter, each at a fixed k.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.whatif.acceptance_traces import Acceptance


@dataclass(frozen=True, slots=True)
class Step:
    position: int  # output position the step starts at
    drafter: str  # who proposed ("" for none)
    drafts: int  # drafts proposed (and verified)
    emitted: int  # tokens the step emits (accepted drafts + 1)


def _fixed_step(method: str, a: Acceptance, i: int, k: int) -> Step:
    n = len(a.acc_len)
    drafts = min(k, n - 1 - i)
    if a.proposed is not None:
        drafts = min(drafts, int(a.proposed[i]))
    if drafts <= 0:
        # the drafter ran and had nothing to offer (an n-gram miss) or the request is at its
        # last token: no drafts, one token
        return Step(i, method if a.proposed is not None and n - 1 - i > 0 else "", 0, 1)
    return Step(i, method, drafts, min(int(a.acc_len[i]), drafts + 1))


def fixed_k(method: str, a: Acceptance, k: int, start: int = 0) -> list[Step]:
    n, i, out = len(a.acc_len), start, []
    while i < n:
        out.append(_fixed_step(method, a, i, k))
        i += out[-1].emitted
    return out


def oracle(method: str, a: Acceptance, start: int = 0, max_drafts: int | None = None) -> list[Step]:
    acc = a.acc_len if max_drafts is None else np.minimum(a.acc_len, max_drafts + 1)
    n, i, out = len(acc), start, []
    while i < n:
        e = int(acc[i])
        out.append(Step(i, method if e > 1 else "", e - 1, e))
        i += e
    return out


def combination(
    accs: dict[str, Acceptance], start: int = 0, max_drafts: dict[str, int | None] | None = None
) -> list[Step]:
    names = list(accs)
    caps = max_drafts or {}
    table = np.vstack(
        [accs[m].acc_len if (cap := caps.get(m)) is None else np.minimum(accs[m].acc_len, cap + 1) for m in names]
    )
    best = table.argmax(axis=0)
    n, i, out = table.shape[1], start, []
    while i < n:
        m = int(best[i])
        e = int(table[m, i])
        out.append(Step(i, names[m] if e > 1 else "", e - 1, e))
        i += e
    return out


def adaptive(method: str, a: Acceptance, k_max: int = 5, memory: float = 0.5, start: int = 0) -> list[Step]:
    """k = round(recent accepted drafts) + 1, the recent mean an exponential average with
    weight `memory` on the past; starts at k = 1."""
    n, i, out = len(a.acc_len), start, []
    recent = 0.0
    while i < n:
        step = _fixed_step(method, a, i, min(k_max, max(1, int(round(recent)) + 1)))
        out.append(step)
        if step.drafts:
            recent = memory * recent + (1 - memory) * (step.emitted - 1)
        i += step.emitted
    return out


def hybrid(
    ngram_method: str,
    ngram: Acceptance,
    model: str,
    model_acc: Acceptance,
    *,
    k_ngram: int,
    k_model: int,
    start: int = 0,
) -> list[Step]:
    """n-gram at k_ngram where its lookup offers drafts, else the model drafter at k_model."""
    if ngram.proposed is None:
        raise ValueError(f"hybrid needs the n-gram trace's 'proposed' (acc_{ngram_method})")
    n, i, out = len(ngram.acc_len), start, []
    while i < n:
        if ngram.proposed[i] > 0 and n - 1 - i > 0:
            out.append(_fixed_step(ngram_method, ngram, i, k_ngram))
        else:
            out.append(_fixed_step(model, model_acc, i, k_model))
        i += out[-1].emitted
    return out


def none(n: int, start: int = 0) -> list[Step]:
    """No speculation: one token per step."""
    return [Step(i, "", 0, 1) for i in range(start, n)]


def tokens_per_step(steps: list[Step]) -> float:
    return sum(s.emitted for s in steps) / len(steps) if steps else float("nan")
