"""What-if analysis (issue 12, first part): the acceptance-trace form and the step plans of
each speculation policy, pinned with hand-made traces whose answers are worked out by hand."""
from __future__ import annotations

import numpy as np
import pytest

from loadgen.whatif import policies
from loadgen.whatif.traces import Acceptance, Trace, TraceError, ngram, read, write


def _every_position_accepts(accepted: int, n: int) -> Acceptance:
    return Acceptance(np.minimum(accepted + 1, n - np.arange(n)))


def test_every_position_accepting_two_drafts():
    a = _every_position_accepts(2, 30)  # a step anywhere emits 3 tokens (2 drafts + the bonus)
    k1, k3, k5 = (policies.fixed_k("eagle", a, k) for k in (1, 3, 5))
    assert [s.emitted for s in k1] == [2] * 15 and all(s.drafts == 1 for s in k1)
    # the last step (position 27) has only 2 tokens after its bonus: it proposes 2
    assert [s.emitted for s in k3] == [3] * 10 and [s.drafts for s in k3] == [3] * 9 + [2]
    assert [s.emitted for s in k5] == [3] * 10 and sum(s.drafts for s in k5) == 9 * 5 + 2  # 3 of 5 wasted per step
    best = policies.oracle("eagle", a)
    assert [(s.emitted, s.drafts) for s in best] == [(3, 2)] * 10
    assert policies.tokens_per_step(k1) == 2 and policies.tokens_per_step(best) == 3


def test_ngram_is_perfect_on_a_copied_span():
    prompt = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    output = [14, 15, 16, 17, 18, 19]  # the prompt's tail, copied
    a = ngram(prompt, output, min_n=1, max_n=4)
    # position 0: the context ends in 19, seen nowhere before: no proposal. Position 1: it ends
    # in 14, seen at index 4, so it proposes 15 16 17 18 19 ..., all right: 5 tokens (the
    # request ends there, so no bonus). Position 5: ...18 seen before, proposes 19: right, and
    # the request ends.
    assert a.acc_len[0] == 1 and not a.proposed[0]
    assert a.acc_len[1] == 5 and a.proposed[1]
    assert a.acc_len[5] == 1
    assert [(s.position, s.drafter, s.drafts, s.emitted) for s in policies.oracle("ngram", a)] == \
        [(0, "", 0, 1), (1, "ngram", 4, 5)]
    assert a.proposed[1] == 6  # after the match "14": 15 16 17 18 19 14
    k3 = policies.fixed_k("ngram", a, 3)
    # 0: no match; 1: three drafts, all right, plus the bonus; 5: the last token, nothing to draft
    assert [(s.drafts, s.emitted) for s in k3] == [(0, 1), (3, 4), (0, 1)]
    # served, the prefill writes position 0 and decoding starts at 1
    assert [(s.position, s.drafts, s.emitted) for s in policies.fixed_k("ngram", a, 3, start=1)] == \
        [(1, 3, 4), (5, 0, 1)]


def test_the_combination_takes_the_best_drafter_at_each_position():
    ngram_acc = Acceptance(np.array([1, 1, 4, 3, 2, 1, 1, 1]), np.array([0, 0, 1, 1, 1, 0, 0, 1], dtype=bool))
    eagle_acc = Acceptance(np.array([2, 3, 2, 2, 2, 2, 2, 1]))
    steps = policies.combination({"ngram": ngram_acc, "eagle": eagle_acc})
    # 0: eagle 2 (0-1); 2: ngram 4 (2-5); 6: eagle 2 (6-7)
    assert [(s.position, s.drafter, s.emitted) for s in steps] == [(0, "eagle", 2), (2, "ngram", 4), (6, "eagle", 2)]
    assert sum(s.emitted for s in steps) == 8
    # each drafter alone, oracle: ngram 1,1,4,1,1 (5 steps), eagle 2,2,2,2 (4 steps)
    assert len(policies.oracle("ngram", ngram_acc)) == 5 and len(policies.oracle("eagle", eagle_acc)) == 4


def test_adaptive_k_settles_on_what_is_accepted_and_stays_within_k_max():
    steps = policies.adaptive("eagle", _every_position_accepts(2, 60), k_max=5)
    assert steps[0].drafts == 1  # starts cautious
    assert {s.drafts for s in steps[-5:-1]} == {3}  # two accepted each time: k = 2 + 1 (the last step has fewer left)
    assert max(s.drafts for s in policies.adaptive("eagle", _every_position_accepts(9, 60), k_max=5)) == 5
    assert sum(s.emitted for s in steps) == 60


def test_traces_round_trip_and_a_bad_line_is_named(tmp_path):
    t = Trace("r0", [1, 2, 3], [4, 5, 6, 7], {"ngram": Acceptance(np.array([1, 3, 2, 1]), np.array([0, 2, 2, 1])),
                                              "eagle": Acceptance(np.array([2, 2, 2, 1]), censored_at=1)})
    path = tmp_path / "traces.jsonl"
    write(path, [t, t])
    back = read(path)
    assert len(back) == 2 and back[0].id == "r0" and back[0].generated_token_ids == [4, 5, 6, 7]
    assert back[0].drafters["ngram"].acc_len.tolist() == [1, 3, 2, 1]
    assert back[0].drafters["ngram"].proposed.tolist() == [0, 2, 2, 1]
    assert back[0].drafters["eagle"].censored_at == 1
    path.write_text(path.read_text().splitlines()[0] + "\n" +
                    '{"id": "r1", "prompt_token_ids": [1], "generated_token_ids": [2, 3], "acc_eagle": {"acc_len": [1]}}\n')
    with pytest.raises(TraceError, match=r"traces.jsonl:2: acc_eagle.acc_len has 1 values for 2 generated tokens"):
        read(path)
    path.write_text('{"id": "r1", "prompt_token_ids": [1], "generated_token_ids": [2, 3], "acc_eagle": {"acc_len": [3, 1]}}\n')
    with pytest.raises(TraceError, match=r":1: acc_eagle.acc_len values must be between 1 and the tokens left"):
        read(path)
    with pytest.raises(TraceError, match="cannot read traces"):
        read(tmp_path / "none.jsonl")
