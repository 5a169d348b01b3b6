"""How a speculation policy steps through one request, given its acceptance trace: which
drafter proposes how many drafts at each step, and how many tokens the step emits. Plain
step plans; what a step costs is the engine's business (the virtual-time evaluation).

- fixed k (one drafter): every step proposes k drafts (none where an n-gram drafter has no
  match) and emits min(acc_len[i], k + 1);
- oracle (one drafter): proposes exactly what will be accepted, acc_len[i] - 1 drafts, and
  emits acc_len[i];
- combination oracle: at each position the drafter with the longest acc_len, proposing
  exactly its acceptance (ties: the first listed, so list the cheaper drafter first);
- adaptive (realisable): k for the next step from the acceptance seen so far (an average of
  recent accepted drafts, plus one), within 1..k_max.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.whatif.traces import Acceptance


@dataclass(frozen=True, slots=True)
class Step:
    position: int   # output position the step starts at
    drafter: str    # who proposed ("" for none)
    drafts: int     # drafts proposed (and verified)
    emitted: int    # tokens the step emits (accepted drafts + 1)


def _fixed_step(method: str, a: Acceptance, i: int, k: int) -> Step:
    if a.proposed is not None and not a.proposed[i]:
        return Step(i, "", 0, 1)
    return Step(i, method, k, min(int(a.acc_len[i]), k + 1))


def fixed_k(method: str, a: Acceptance, k: int) -> list[Step]:
    n, i, out = len(a.acc_len), 0, []
    while i < n:
        out.append(_fixed_step(method, a, i, k))
        i += out[-1].emitted
    return out


def oracle(method: str, a: Acceptance) -> list[Step]:
    acc, n, i, out = a.acc_len, len(a.acc_len), 0, []
    while i < n:
        e = int(acc[i])
        out.append(Step(i, method if e > 1 else "", e - 1, e))
        i += e
    return out


def combination(accs: dict[str, Acceptance]) -> list[Step]:
    names = list(accs)
    table = np.vstack([accs[m].acc_len for m in names])
    best = table.argmax(axis=0)
    n, i, out = table.shape[1], 0, []
    while i < n:
        m = int(best[i])
        e = int(table[m, i])
        out.append(Step(i, names[m] if e > 1 else "", e - 1, e))
        i += e
    return out


def adaptive(method: str, a: Acceptance, k_max: int = 5, memory: float = 0.5) -> list[Step]:
    """k = round(recent accepted drafts) + 1, the recent mean an exponential average with
    weight `memory` on the past; starts at k = 1."""
    n, i, out = len(a.acc_len), 0, []
    recent = 0.0
    while i < n:
        step = _fixed_step(method, a, i, min(k_max, max(1, int(round(recent)) + 1)))
        out.append(step)
        if step.drafts:
            recent = memory * recent + (1 - memory) * (step.emitted - 1)
        i += step.emitted
    return out


def tokens_per_step(steps: list[Step]) -> float:
    return sum(s.emitted for s in steps) / len(steps) if steps else float("nan")
