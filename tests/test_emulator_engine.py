"""The engine alone (no clock, no HTTP): scheduling, KV capacity, costs and counters."""

from __future__ import annotations

import pytest

from servers.emulator import profile as profiles
from servers.emulator.engine import Engine, EngineConfig, EngineError
from servers.emulator.spec import parse

pytestmark = pytest.mark.unit

EAGLE = parse('{"method": "eagle", "model": "e", "num_speculative_tokens": 3}')
NGRAM = parse('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 3, "prompt_lookup_max": 7}')


def prompt(n: int, tag: str = "") -> str:
    return " ".join(f"w{tag}{i}" for i in range(n))


def run_all(engine: Engine, t: float = 0.0) -> tuple[float, list]:
    out = []
    while engine.has_work:
        step = engine.plan(t)
        assert step is not None
        t += step.duration
        out.extend(engine.commit(step, t))
    return t, out


def test_baseline_step_time_is_the_profile_cost_model():
    prof = profiles.load("h100-llama-3.1-8b")
    e = Engine(prof, None, EngineConfig())
    e.submit("a", prompt(100), 5, arrival=0.0, ignore_eos=True)
    prefill = e.plan(0.0)
    assert prefill.batched_tokens == 100
    assert prefill.duration == pytest.approx(prof.forward.time(100, 100) + prof.step_overhead)
    e.commit(prefill, prefill.duration)
    decode = e.plan(prefill.duration)
    assert decode.batched_tokens == 1
    assert decode.duration == pytest.approx(prof.forward.time(101, 1) + prof.step_overhead)


def test_speculative_steps_verify_drafts_and_pay_for_drafting():
    prof = profiles.load("h100-llama-3.1-8b")
    e = Engine(prof, EAGLE, EngineConfig())
    e.submit("a", prompt(100), 20, arrival=0.0, ignore_eos=True)
    t = 0.0
    first = e.plan(t)
    t += first.duration
    e.commit(first, t)
    step = e.plan(t)
    assert step.batched_tokens == 1 + 3  # the last token plus 3 drafts
    verify = prof.forward.time(101 + 3, 4)
    drafting = prof.drafters["eagle"].time(3, 1, 101 + 3, verify)
    assert step.duration == pytest.approx(verify + drafting + prof.step_overhead)


def test_every_request_gets_exactly_its_tokens_and_counters_add_up():
    e = Engine(profiles.load("h100-llama-3.1-8b"), EAGLE, EngineConfig(max_num_seqs=4))
    for i in range(10):
        e.submit(str(i), prompt(50, str(i)), 40, arrival=0.0, ignore_eos=True)
    _, out = run_all(e)
    tokens = {}
    for em in out:
        tokens[em.seq.request_id] = tokens.get(em.seq.request_id, 0) + len(em.tokens)
    assert tokens == {str(i): 40 for i in range(10)}
    s = e.stats
    assert s.generation_tokens == 400
    first_chunks = len(tokens)  # each request's first emission is its prefill's one token
    # what was emitted, plus the drafts a last step accepted past max_tokens (at most k = 3 a
    # request: vLLM counts them too, docs/metrics.md "Accepted drafts")
    emitted = sum(len(em.tokens) - 1 for em in out)
    assert emitted <= s.spec_accepted_tokens <= emitted + 3 * 10
    # every later step verified k drafts, also a last step with fewer tokens left (as vLLM)
    assert s.spec_drafts == len(out) - first_chunks and s.spec_draft_tokens == 3 * s.spec_drafts
    assert sum(s.spec_accepted_per_pos) == s.spec_accepted_tokens
    assert s.request_success["length"] == 10


def test_max_num_seqs_and_token_budget_bound_each_step():
    e = Engine(profiles.load("h100-llama-3.1-8b"), None, EngineConfig(max_num_seqs=3, max_num_batched_tokens=120))
    for i in range(6):
        e.submit(str(i), prompt(100, str(i)), 5, arrival=0.0, ignore_eos=True)
    t = 0.0
    while e.has_work:
        step = e.plan(t)
        assert len(step.batch) <= 3 and step.batched_tokens <= 120
        t += step.duration
        e.commit(step, t)
    assert e.stats.generation_tokens == 30


def test_full_kv_cache_preempts_the_latest_request_and_everything_still_finishes():
    e = Engine(profiles.load("h100-llama-3.1-8b"), None, EngineConfig(max_num_seqs=8, kv_capacity_tokens=600))
    for i in range(6):
        e.submit(str(i), prompt(80, str(i)), 60, arrival=0.0, ignore_eos=True)
    _, out = run_all(e)
    assert e.stats.preemptions > 0
    assert e.stats.generation_tokens == 6 * 60
    assert e.stats.kv_usage == 0.0


def test_requests_too_long_for_the_model_or_cache_are_refused():
    e = Engine(profiles.load("h100-llama-3.1-8b"), None, EngineConfig(max_model_len=100))
    with pytest.raises(EngineError, match="maximum context length is 100"):
        e.submit("a", prompt(90), 20, arrival=0.0)
    e = Engine(profiles.load("h100-llama-3.1-8b"), None, EngineConfig(kv_capacity_tokens=50))
    with pytest.raises(EngineError, match="KV cache"):
        e.submit("a", prompt(40), 20, arrival=0.0)


def test_a_method_the_profile_lacks_is_refused():
    with pytest.raises(EngineError, match="no mtp drafter"):
        Engine(profiles.load("h100-llama-3.1-8b"), parse('{"method": "mtp", "num_speculative_tokens": 1}'))


def test_ngram_speeds_up_code_edits_more_than_chat():
    """n-gram acceptance comes from content: an edit repeats its code, a chat answer does not,
    so prompt lookup pays off on code edits (the study's finding)."""
    from workloads import kind_like

    prof = profiles.load("h100-llama-3.1-8b")

    def speedup(kind: str) -> float:
        times = []
        for spec in (None, NGRAM):
            e = Engine(prof, spec)
            for r in kind_like(kind, 8, seed=1, output_len=200):
                e.submit(r.id, r.prompt or "", r.max_tokens, arrival=0.0, ignore_eos=True)
            times.append(run_all(e)[0])
        return times[0] / times[1]

    code, chat = speedup("code_edit"), speedup("chat")
    assert code > 1.35 and chat < 1.3 and code > chat + 0.2


def test_aborting_frees_the_slot():
    e = Engine(profiles.load("h100-llama-3.1-8b"), None, EngineConfig())
    a = e.submit("a", prompt(10), 50, arrival=0.0, ignore_eos=True)
    step = e.plan(0.0)
    e.commit(step, 0.01)
    e.abort(a)
    assert not e.has_work and e.stats.kv_usage == 0.0
    assert e.stats.request_success["abort"] == 1
