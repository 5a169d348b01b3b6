"""test_whatif.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.whatif import policies
from loadgen.whatif.acceptance_traces import Acceptance, Trace, TraceError, ngram, write
from loadgen.whatif.reading import read
from tests.test_whatif import PROFILE, _every_position_accepts, _policy

pytestmark = pytest.mark.unit


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
    assert [(s.position, s.drafter, s.drafts, s.emitted) for s in policies.oracle("ngram", a)] == [
        (0, "", 0, 1),
        (1, "ngram", 4, 5),
    ]
    assert a.proposed[1] == 6  # after the match "14": 15 16 17 18 19 14
    k3 = policies.fixed_k("ngram", a, 3)
    # 0: no match; 1: three drafts, all right, plus the bonus; 5: the last token, nothing to draft
    assert [(s.drafts, s.emitted) for s in k3] == [(0, 1), (3, 4), (0, 1)]
    # served, the prefill writes position 0 and decoding starts at 1
    assert [(s.position, s.drafts, s.emitted) for s in policies.fixed_k("ngram", a, 3, start=1)] == [
        (1, 3, 4),
        (5, 0, 1),
    ]


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


def test_estimating_a_model_drafter_from_a_runs_steps():
    """Steps of a run at k=3 (the first: the prefill's token): a step that emitted fewer than
    4 is exact, and inside it the same drafts are right; one that emitted 4 is censored, and
    its run goes on into the next step's accepted drafts."""
    from loadgen.whatif.acceptance_traces import estimate

    a = estimate([1, 4, 2, 1, 4, 3], 15, 3)
    # pos 0: prefill. 1-4: censored, continued by the next step's 2 - 1 = 1 accepted draft.
    # 5-6: 2, 1. 7: 1. 8-11: censored, continued by the 3 - 1 = 2 of the step at 12. 12-14: 3 2 1
    assert a.acc_len.tolist() == [1, 5, 4, 3, 2, 2, 1, 1, 6, 5, 4, 3, 3, 2, 1]
    assert a.censored_at == 3 and "k=3" in a.source
    # replayed at the run's own k, the steps are the run's
    assert [s.emitted for s in policies.fixed_k("eagle", a, 3, start=1)] == [4, 2, 1, 4, 3]
    with pytest.raises(ValueError, match="the steps emit 14 tokens, the output has 15"):
        estimate([1, 4, 2, 1, 4, 2], 15, 3)


def test_traces_round_trip_and_a_bad_line_is_named(tmp_path):
    t = Trace(
        "r0",
        [1, 2, 3],
        [4, 5, 6, 7],
        {
            "ngram": Acceptance(np.array([1, 3, 2, 1]), np.array([0, 2, 2, 1])),
            "eagle": Acceptance(np.array([2, 2, 2, 1]), censored_at=1),
        },
    )
    path = tmp_path / "traces.jsonl"
    write(path, [t, t])
    back, reading = read(path)
    assert len(back) == 2 and back[0].id == "r0" and back[0].generated_token_ids == [4, 5, 6, 7]
    assert back[0].drafters["ngram"].acc_len.tolist() == [1, 3, 2, 1]
    assert back[0].drafters["ngram"].proposed.tolist() == [0, 2, 2, 1]
    assert back[0].drafters["eagle"].censored_at == 1
    assert not reading.repairs and not reading.skipped  # our own files need no repair
    path.write_text(path.read_text().splitlines()[0] + "\n" + '{"id": "r1", "prompt_token_ids": [1}\n')
    back, reading = read(path)
    assert len(back) == 1 and reading.first["not valid JSON"].startswith("line 2: ")
    with pytest.raises(TraceError, match="cannot read traces"):
        read(tmp_path / "none.jsonl")


def test_one_request_at_batch_1_costs_what_the_profile_says():
    """Worked by hand from the cost model: prefill, then two steps of 2 drafts each emitting 3."""
    from loadgen.whatif import evaluate as ev
    from servers.emulator import profile as profiles

    prof = profiles.load(PROFILE)
    prompt, output = list(range(10)), list(range(100, 107))
    t = Trace("r", prompt, output, {"eagle": _every_position_accepts(2, 7)})
    fwd, eagle, over = prof.forward, prof.drafters["eagle"], prof.step_overhead
    # step 1: prefill of 10 tokens (KV 10), then 2 drafts proposed for the first decoding step
    v1 = fwd.time(10, 10)
    t1 = v1 + over + eagle.time(2, 1, 10, v1)
    # step 2 at position 1: the last token + 2 drafts, over the prompt's KV: 10 + 3; emits 3;
    # proposes 2 more (a token's KV is written by the step that reads it as input)
    v2 = fwd.time(13, 3)
    t2 = v2 + over + eagle.time(2, 1, 13, v2)
    # step 3 at position 4: KV 13 + 3, emits the last 3 tokens; nothing left to draft
    v3 = fwd.time(16, 3)
    t3 = v3 + over
    [o] = ev.evaluate([t], PROFILE, [1], [_policy("eagle k=2", ("eagle",), (2,))], requests=1)
    assert o.output_tok_s == pytest.approx(7 / (t1 + t2 + t3), rel=1e-6)
    assert o.tokens_per_step == 3 and o.drafts_per_step == 2


def test_a_step_mixing_drafters_pays_each_once_or_the_ngram_price_once():
    """Two requests whose next steps use n-gram and EAGLE: the step that prefills them pays
    both drafters' prices; priced as n-gram, it pays the n-gram price once for both."""
    from servers.emulator import profile as profiles
    from servers.emulator.replay import ReplayEngine

    prof = profiles.load(PROFILE)
    fwd, over = prof.forward, prof.step_overhead
    verify = fwd.time(8, 8)  # two prompts of 4 tokens, prefilled together
    own = prof.drafters["ngram"].time(2, 1, 8, verify) + prof.drafters["eagle"].time(2, 1, 8, verify)
    cheap = prof.drafters["ngram"].time(2, 2, 8, verify)
    for price_as, drafting in ((None, own), ("ngram", cheap)):
        engine = ReplayEngine(prof, price_as=price_as)
        engine.submit_plan("a", [1, 2, 3, 4], [5, 6, 7, 8, 9], [("ngram", 2, 3), ("", 0, 1)], arrival=0.0)
        engine.submit_plan("b", [1, 2, 3, 5], [5, 6, 7, 8, 9], [("eagle", 2, 3), ("", 0, 1)], arrival=0.0)
        step = engine.plan(0.0)
        assert step.duration == pytest.approx(verify + over + drafting, rel=1e-12), price_as
    assert own > cheap


def test_whatif_bad_input_is_one_line(tmp_path):
    from tests.conftest import cli

    t = Trace("r0", [1, 2, 3], [4, 5, 6, 7], {"eagle": Acceptance(np.array([2, 2, 2, 1]))})
    write(tmp_path / "t.jsonl", [t])
    (tmp_path / "binary.parquet").write_bytes(b"PAR1\x80\x81\xfe")
    cases = [
        (["whatif", str(tmp_path / "binary.parquet"), "--profile", PROFILE], "is not a text file of JSON lines"),
        (
            [
                "simulate",
                "--profile",
                PROFILE,
                "--concurrency",
                "1",
                "--num-requests",
                "1",
                "--output",
                str(tmp_path / "sim"),
                "--acceptance-traces",
                "/proc/no/traces.jsonl",
            ],
            "cannot write --acceptance-traces",
        ),
        (["whatif", str(tmp_path / "none.jsonl"), "--profile", PROFILE], "cannot read traces"),
        (["whatif", str(tmp_path / "t.jsonl"), "--profile", PROFILE, "--batch", "0,8"], "--batch '0,8'"),
        (["whatif", str(tmp_path / "t.jsonl"), "--profile", "nope"], "unknown profile 'nope'"),
        (["whatif", str(tmp_path / "t.jsonl")], "give --profile"),
        (
            ["whatif", str(tmp_path / "t.jsonl"), "--profile", PROFILE, "--drafters", "ngram"],
            "not every trace has acc_ngram; the traces all have: eagle",
        ),
        (["whatif", str(tmp_path / "t.jsonl"), "--profile", "h100-glm-4.5-air-tp4"], "has no cost for drafter 'eagle'"),
    ]
    for args, message in cases:
        res = cli(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert res.stderr.count("\n") == 1 and message in res.stderr, (args, res.stderr)
