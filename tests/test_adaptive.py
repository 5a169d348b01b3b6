"""vLLM's newest SD controls in the emulated engine (issue 47): adaptive verification and k by
batch size, served as vLLM serves them and counted as vLLM counts them. The budget itself is held
to vLLM's own code in tests/test_vllm_side.py; here, what it does to a served load."""

from __future__ import annotations

import json

import pytest

from servers.emulator import profile as profiles
from servers.emulator import verification
from servers.emulator.engine import Engine, EngineConfig
from servers.emulator.spec import SpecError, parse
from workloads.synthetic import kind_like

pytestmark = pytest.mark.unit

PROFILE = profiles.load("h100-llama-3.1-8b")
EAGLE3 = {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 5}


def _serve(spec: dict, users: int = 16, n: int = 48, seed: int = 3) -> tuple[Engine, float]:
    """`n` chat requests of 120 tokens, `users` at a time in waves (offline batches in virtual
    time), every request's SD metrics kept: the engine and the virtual time it took."""
    engine = Engine(PROFILE, parse(json.dumps(spec)), EngineConfig(per_request_spec_decode_metrics="summary"))
    reqs = list(kind_like("chat", n, output_len=120, ignore_eos=True, seed=seed))
    seqs, now = [], 0.0
    for i in range(0, n, users):
        for r in reqs[i : i + users]:
            seqs.append(engine.submit(r.id, str(r.prompt), r.max_tokens, arrival=now, ignore_eos=True))
        now = engine.run_to_end(now)
    engine.served = seqs  # type: ignore[attr-defined]
    return engine, now


def _per_request_sums(engine) -> tuple[int, int, int]:
    steps = drafted = accepted = 0
    for seq in engine.served:
        d = seq.sd.to_dict()
        steps += d["num_spec_steps"]
        drafted += d["num_draft_tokens"]
        accepted += d["num_accepted_draft_tokens"]
    return steps, drafted, accepted


def test_the_config_key_is_checked_and_named():
    spec = parse(json.dumps({**EAGLE3, "enable_adaptive_verification": True}))
    assert spec.adaptive_verification and spec.label.endswith("adaptive verification")
    with pytest.raises(SpecError, match="enable_adaptive_verification must be true or false"):
        parse(json.dumps({**EAGLE3, "enable_adaptive_verification": "yes"}))


def test_drafts_that_cannot_pay_are_not_verified_and_are_counted_as_vllm_counts_them():
    """Synthetic acceptance 1, 1, 0, 0, 0 at k = 5: every draft after the second is rejected,
    and its confidence says so. Adaptive verification verifies two drafts a step, so each step
    emits what it emitted verifying five (3 tokens) for less: the same tokens in less time.
    The scheduler counted 5 drafts a step either way (vLLM counts what it scheduled), in the
    counters and in every request's metrics alike."""
    synthetic = {**EAGLE3, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [1, 1, 0, 0, 0]}
    fixed, t_fixed = _serve(synthetic)
    adaptive, t_adaptive = _serve({**synthetic, "enable_adaptive_verification": True})
    for engine in (fixed, adaptive):
        s = engine.stats
        assert s.spec_draft_tokens == 5 * s.spec_drafts
        assert s.spec_accepted_tokens == 2 * s.spec_drafts
        assert _per_request_sums(engine) == (s.spec_drafts, s.spec_draft_tokens, s.spec_accepted_tokens)
    assert adaptive.stats.generation_tokens == fixed.stats.generation_tokens
    assert adaptive.stats.spec_drafts == fixed.stats.spec_drafts
    assert t_adaptive < 0.97 * t_fixed


def test_a_drafter_that_earns_its_verification_keeps_it():
    """Rates 1 at every position: every draft is accepted and worth verifying; the budget
    admits them all, and the run is the fixed-k run, step for step."""
    synthetic = {**EAGLE3, "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [1] * 5}
    fixed, t_fixed = _serve(synthetic, users=4, n=16)
    adaptive, t_adaptive = _serve({**synthetic, "enable_adaptive_verification": True}, users=4, n=16)
    assert t_adaptive == pytest.approx(t_fixed, rel=1e-12)
    assert adaptive.stats.spec_accepted_tokens == fixed.stats.spec_accepted_tokens


def test_on_a_model_drafter_the_budget_binds_and_the_counts_stay_whole():
    """EAGLE-3's own acceptance: the budget cuts some drafts (fewer accepted of the same number
    scheduled), and the per-request metrics still sum to the counters."""
    fixed, _ = _serve(EAGLE3)
    adaptive, _ = _serve({**EAGLE3, "enable_adaptive_verification": True})
    f, a = fixed.stats, adaptive.stats
    assert a.spec_draft_tokens == 5 * a.spec_drafts  # scheduled, whatever was verified
    assert _per_request_sums(adaptive) == (a.spec_drafts, a.spec_draft_tokens, a.spec_accepted_tokens)
    assert a.spec_accepted_tokens / a.spec_drafts < f.spec_accepted_tokens / f.spec_drafts
    assert a.generation_tokens == f.generation_tokens


def test_ngram_notes_that_it_does_not_apply_and_serves_as_without():
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    plain, t_plain = _serve(ngram, users=4, n=8)
    noted, t_noted = _serve({**ngram, "enable_adaptive_verification": True}, users=4, n=8)
    assert noted.notes and "does not apply to ngram" in noted.notes[0] and not plain.notes
    assert t_noted == t_plain and noted.stats.spec_accepted_tokens == plain.stats.spec_accepted_tokens


def test_k_zero_steps_count_no_speculation():
    """k by batch size with 0 past 8 requests: the steps of a 16-request batch draft nothing and
    count nothing (vLLM's counters; an open PR would count them); the steps once the batch has
    shrunk to 8 or fewer draft again. Every count stays whole per request."""
    spec = {**EAGLE3, "num_speculative_tokens_per_batch_size": [[1, 8, 5], [9, 256, 0]]}
    engine, _ = _serve(spec, users=16, n=16)
    s = engine.stats
    assert s.spec_draft_tokens == 5 * s.spec_drafts
    assert _per_request_sums(engine) == (s.spec_drafts, s.spec_draft_tokens, s.spec_accepted_tokens)
    # all 16 run together to the end: no step ever has 8 or fewer requests, nothing is drafted
    assert s.spec_drafts == 0 and s.generation_tokens == 16 * 120
    few, _ = _serve(spec, users=8, n=16)
    assert few.stats.spec_drafts > 0


def test_the_cost_tables_grow_as_vllm_profiles_them():
    # the tables against vLLM's own build_cost_tables_from_curves: tests/test_vllm_side.py
    # (test_adaptive_verification_budgets_as_vllm_does); here, what the profile's physics says
    t = verification.cost_tables(PROFILE, PROFILE.drafters["eagle3"], 5, 256, 8192, PROFILE.max_model_len)
    # each profiled token up to max_num_seqs is a request at 8192 tokens of context: the curve
    # is steep there (a request's KV read), flat past it (a token's compute)
    assert t.verify_ms[33] - t.verify_ms[32] > 10 * (t.verify_ms[301] - t.verify_ms[300])
