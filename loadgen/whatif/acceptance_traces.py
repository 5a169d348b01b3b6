"""Acceptance traces: per request, its prompt and generated token ids and, per drafter, the
tokens one verification step starting at each output position would emit (`acc_len[i]`:
accepted drafts + the bonus token, with as many drafts as the drafter would make right).

JSONL, one request per line:

    {"id": "r0", "prompt_token_ids": [...], "generated_token_ids": [...],
     "acc_ngram": {"acc_len": [...], "proposed": [...]},
     "acc_eagle": {"acc_len": [...], "censored_at": 4}}

`reasoning_end` (optional): a reasoning model's output, whose first `reasoning_end` tokens are
its thinking (markers included, as the emulator writes it); the replay then times thinking and
answering apart (docs/reasoning.md).

`proposed` (optional, n-gram): how many drafts the drafter has to offer at that position (the
tokens after its match; 0: no match, and then it proposes nothing and nothing is verified). `censored_at`
(optional): the trace was estimated
from a fixed-k run, where a step that accepted all k drafts only says acc_len >= k + 1; such
values are recorded as k + 1.

Reading a file, with the repairs files from elsewhere need: loadgen/whatif/reading.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PREFIX = "acc_"


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file, line and field."""


@dataclass
class Acceptance:
    acc_len: np.ndarray
    proposed: np.ndarray | None = None
    censored_at: int | None = None
    source: str | None = None  # how it was obtained, in words (exact replay, estimated from a run)

    def to_json(self) -> dict:
        out: dict = {"acc_len": self.acc_len.tolist()}
        if self.source is not None:
            out["source"] = self.source
        if self.proposed is not None:
            out["proposed"] = self.proposed.tolist()
        if self.censored_at is not None:
            out["censored_at"] = self.censored_at
        return out


@dataclass
class Trace:
    id: str
    prompt_token_ids: list[int]
    generated_token_ids: list[int]
    drafters: dict[str, Acceptance] = field(default_factory=dict)
    reasoning_end: int = 0  # the output's first this many tokens are a reasoning model's thinking

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "prompt_token_ids": self.prompt_token_ids,
            "generated_token_ids": self.generated_token_ids,
            **({"reasoning_end": self.reasoning_end} if self.reasoning_end else {}),
            **{PREFIX + m: a.to_json() for m, a in self.drafters.items()},
        }


def write(path: str | Path, traces: list[Trace]) -> None:
    with open(path, "w") as f:
        for t in traces:
            f.write(json.dumps(t.to_json()) + "\n")


def ngram(prompt: list[int], output: list[int], *, min_n: int = 1, max_n: int = 4) -> Acceptance:
    """The n-gram drafter's acceptance over a recorded request, exactly as the engine's
    prompt-lookup drafter (servers.emulator.ngram) decides it, proposing as far as it can."""
    from servers.emulator.ngram import acceptance_lengths

    acc, matched = acceptance_lengths(
        prompt, output, min_n=min_n, max_n=max_n, k=max(1, len(output)), with_matches=True
    )
    rest = len(output) - np.arange(len(output))  # a step cannot emit past the request's end
    return Acceptance(
        np.minimum(np.asarray(acc, dtype=np.int64), rest),
        np.asarray(matched, dtype=np.int64),
        source=f"exact: prompt lookup {min_n}..{max_n} replayed over the token ids",
    )


def estimate(step_tokens, n: int, k: int) -> Acceptance:
    """A model drafter's acceptance estimated from a run at fixed k, from the tokens each
    engine step emitted (the first step: the prefill's).

    Where a step started, what it emitted is exact up to k + 1: a step that emitted fewer
    accepted exactly that many drafts; one that emitted all k + 1 only says at least k + 1
    (censored). Inside a step, the same drafts are taken to be right and the same one wrong for
    a step starting there: acc_len[i + j] = emitted - j. A censored step's run is taken to go
    on into the next step's accepted drafts (the bonus token between them assumed draftable):
    its positions get the next step start's acc_len - 1 more, so longer k than the run's is an
    extrapolation, not an observation."""
    steps = [int(e) for e in step_tokens]
    if sum(steps) != n or min(steps, default=1) < 1:
        raise ValueError(f"the steps emit {sum(steps)} tokens, the output has {n}")
    starts = np.cumsum([0] + steps[:-1])
    acc = np.empty(n, dtype=np.int64)
    following = 1  # acc_len at the next step's start (nothing after the last)
    for s, e in zip(reversed(starts.tolist()), reversed(steps)):
        acc[s : s + e] = e - np.arange(e) + (following - 1 if e == k + 1 else 0)
        following = int(acc[s])
    acc = np.minimum(acc, n - np.arange(n))
    return Acceptance(acc, censored_at=k, source=f"estimated from a run at k={k}: tokens per engine step")
