"""The emulator's acceptance reproduces the study's trace statistics (paper.md) it was fitted to:
n-gram through real prompt lookup over the emulated content, model drafters through their
acceptance process. Guards the data files against drift in the code that uses them."""

from __future__ import annotations

import numpy as np
import pytest

from servers.emulator import content
from servers.emulator import profile as profiles
from servers.emulator.acceptance import acceptance_lengths, trace_stats
from servers.emulator.ngram import acceptance_lengths as ngram_lengths
from workloads import kind_like

# paper.md: tokens per step at k = 3, P(0) (EAGLE, n-gram), mean output length
PAPER = {
    "chat": (2.25, 0.69, 1.40, 0.35, 728),
    "summarization": (2.33, 0.69, 1.33, 0.30, 323),
    "math": (2.39, 0.72, 1.16, 0.16, 166),
    "code_edit": (2.35, 0.72, 2.03, 0.65, 262),
}


@pytest.mark.parametrize("kind", list(PAPER))
def test_acceptance_matches_the_study(kind):
    eagle_tps, eagle_p0, ngram_tps, ngram_p0, out_len = PAPER[kind]
    prof = profiles.load("h100-llama-3.1-8b")
    rng = np.random.default_rng(42)
    e = trace_stats([acceptance_lengths(out_len, 6, prof.acceptance("eagle", kind), rng) for _ in range(300)])
    assert e["tokens_per_step"][3] == pytest.approx(eagle_tps, rel=0.04)
    assert e["p"][0] == pytest.approx(eagle_p0, abs=0.05)
    # copied stretches are heavy-tailed: a sample of fewer requests varies by +-15%
    params = prof.content(kind)
    rng = np.random.default_rng(1000)
    traces = []
    for req in kind_like(kind, 96, seed=9):
        words, ids = content.tokenize(req.prompt)
        assert content.classify(req.prompt) == kind
        out, _ = content.generate(ids, words, out_len, params, rng)
        traces.append(ngram_lengths(ids, out, min_n=3, max_n=7, k=6))
    n = trace_stats(traces)
    assert n["tokens_per_step"][3] == pytest.approx(ngram_tps, rel=0.06)
    assert n["p"][0] == pytest.approx(ngram_p0, abs=0.06)
