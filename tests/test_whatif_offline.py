"""`loadgen whatif --protocol offline` (loadgen/whatif/offline.py): the study's measurement, B
copies of each request run together to the end. Pinned by hand from the cost model, and
against the engine itself on emulator-made traces (bench/calibrate.py's offline batches)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.whatif import evaluate as ev
from loadgen.whatif import offline
from loadgen.whatif.acceptance_traces import Acceptance, Trace
from loadgen.whatif.reading import read
from servers.emulator import profile as profiles

pytestmark = pytest.mark.unit

PROFILE = "h100-llama-3.1-8b"
REPO = Path(__file__).resolve().parents[1]


def _policies(k: int = 1):
    return {p.name: p for p in ev.candidates(["eagle"], (k,), k_max=k, oracle_depth=3)}


def test_one_request_worked_by_hand():
    """Prompt 10 tokens, output 4, acc_len 2, 3, 2, 1 (a step at each position)."""
    prof = profiles.load(PROFILE)
    fwd, eagle, over = prof.forward, prof.drafters["eagle"], prof.step_overhead
    t = Trace("r", list(range(10)), [1, 2, 3, 4], {"eagle": Acceptance(np.array([2, 3, 2, 1]))})

    def none(b):  # prefill (KV 10, 10 tokens per copy), then one token a step at KV 11, 12, 13
        return sum(fwd.time(b * kv, b * n) + over for kv, n in ((10, 10), (11, 1), (12, 1), (13, 1)))

    def fixed_1(b):
        # the prefill writes token 0 and drafts 1 for position 1; position 1: 1 draft (KV 10 + 1 + 1),
        # acc_len 3 but k = 1: emits 2; position 3 is the last token: no draft, KV 10 + 3
        v0 = fwd.time(b * 10, b * 10)
        return (
            (v0 + over + eagle.time(1, b, b * 10, v0))
            + (fwd.time(b * 12, b * 2) + over)
            + (fwd.time(b * 13, b * 1) + over)
        )

    def oracle(b):  # position 1: acc_len 3, so exactly 2 drafts, emits 3 and ends
        v0 = fwd.time(b * 10, b * 10)
        return (v0 + over + eagle.time(2, b, b * 10, v0)) + (fwd.time(b * 13, b * 3) + over)

    pols = _policies()
    chosen = [pols["none"], pols["eagle k=1"], pols["eagle oracle <=3"]]
    out = {(o.policy, o.batch): o for o in offline.evaluate([t], PROFILE, [1, 4], chosen)}
    for b in (1, 4):
        for name, by_hand in (("none", none), ("eagle k=1", fixed_1), ("eagle oracle <=3", oracle)):
            assert out[(name, b)].output_tok_s == pytest.approx(b * 4 / by_hand(b), rel=1e-9), (name, b)
        assert out[("eagle k=1", b)].speedup == pytest.approx(none(b) / fixed_1(b), rel=1e-9)
        assert out[("eagle oracle <=3", b)].speedup == pytest.approx(none(b) / oracle(b), rel=1e-9)
    assert out[("eagle k=1", 1)].tokens_per_step == pytest.approx(3 / 2)  # 2 steps emit 2 + 1


def test_the_speedup_is_the_mean_batch_throughput_over_no_speculations():
    """Two requests of different lengths: the ratio of the means, not the mean of the ratios."""
    prof = profiles.load(PROFILE)
    traces = [
        Trace("a", [1] * 8, [2] * 3, {"eagle": Acceptance(np.array([3, 2, 1]))}),
        Trace("b", [1] * 30, [2] * 6, {"eagle": Acceptance(np.array([1, 1, 1, 1, 1, 1]))}),
    ]
    pols = _policies()
    out = {(o.policy, o.batch): o for o in offline.evaluate(traces, PROFILE, [2], [pols["none"], pols["eagle k=1"]])}

    def tput(t, name):
        p = pols[name]
        plan = [(s.drafter, s.drafts, s.emitted) for s in p.plan(t)]
        return 2 * len(t.generated_token_ids) / offline.step_times(prof, t, plan, np.array([2])).sum()

    base = np.mean([tput(t, "none") for t in traces])
    sd = np.mean([tput(t, "eagle k=1") for t in traces])
    assert out[("eagle k=1", 2)].speedup == pytest.approx(sd / base, rel=1e-9)


def test_sampling_is_seeded_and_capped():
    traces = [Trace(str(i), [1], [2, 3], {}) for i in range(10)]
    assert [t.id for t in offline.sample(traces, 4, seed=1)] == [t.id for t in offline.sample(traces, 4, seed=1)]
    assert [t.id for t in offline.sample(traces, 4, seed=1)] != [t.id for t in offline.sample(traces, 4, seed=2)]
    assert len(offline.sample(traces, None)) == 10 and len(offline.sample(traces, 4)) == 4


def test_agrees_with_the_engine_running_the_batches(tmp_path):
    """The same requests, B copies each started together on the engine itself (calibrate's
    offline batches), against the offline protocol over the engine's own traces: within 2%."""
    from bench import calibrate
    from servers.emulator.engine import Engine, EngineConfig
    from servers.emulator.spec import parse
    from workloads import kind_like

    prof = profiles.load(PROFILE)
    reqs = list(kind_like("math", 4, seed=7, output_len=256))
    traces = []
    for r in reqs:  # each request alone, to record its exact acceptance
        engine = Engine(prof, parse(calibrate.SPECS["eagle"]), EngineConfig(), trace_sink=traces.append)
        engine.submit(r.id, r.prompt, r.max_tokens, arrival=0.0, ignore_eos=r.ignore_eos, min_tokens=r.min_tokens)
        engine.run_to_end()
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in traces))
    loaded, _ = read(path)
    pols = {p.name: p for p in ev.candidates(["eagle"], (3,))}
    batches = [1, 4, 16]
    ours = {
        (o.policy, o.batch): o.speedup
        for o in offline.evaluate(loaded, PROFILE, batches, [pols["none"], pols["eagle k=3"]])
    }
    n = [len(t.generated_token_ids) for t in loaded]
    for b in batches:
        base = np.mean([b * k / calibrate._makespan(PROFILE, None, r, b) for r, k in zip(reqs, n)])
        sd = np.mean([b * k / calibrate._makespan(PROFILE, "eagle", r, b) for r, k in zip(reqs, n)])
        print(f"B={b}: offline {ours[('eagle k=3', b)]:.3f}, engine {sd / base:.3f}")
        assert ours[("eagle k=3", b)] == pytest.approx(sd / base, rel=0.02)
