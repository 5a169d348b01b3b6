"""What-if analysis (issue 12, first part): the acceptance-trace form and the step plans of
each speculation policy, pinned with hand-made traces whose answers are worked out by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen.whatif import policies
from loadgen.whatif.acceptance_traces import Acceptance, Trace, TraceError, ngram, write
from loadgen.whatif.reading import read

pytestmark = pytest.mark.servers


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


# -- the virtual-time evaluation ---------------------------------------------------------------

PROFILE = "h100-llama-3.1-8b"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _eagle(k: int) -> str:
    return f'{{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": {k}}}'


def _policy(name: str, methods=("ngram", "eagle"), ks=(1, 3, 5)):
    from loadgen.whatif import evaluate as ev

    return next(p for p in ev.candidates(list(methods), ks) if p.name == name)


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


def test_an_ngram_miss_verifies_no_drafts_and_costs_no_drafting():
    """An n-gram lookup that finds nothing proposes no drafts: vLLM verifies none and takes no
    drafting path in that step. A request whose lookup never matches therefore costs exactly
    what it costs without SD; one that matches at some steps pays for those alone."""
    from loadgen.whatif import evaluate as ev

    n = 40
    miss = Acceptance(np.ones(n, np.int64), np.zeros(n, np.int64))  # nothing offered anywhere
    some = np.zeros(n, np.int64)
    some[::4] = 3  # a match every 4th position, 3 drafts, none right
    traces = [Trace("m", list(range(50)), list(range(n)), {"ngram": miss})]
    out = {o.policy: o for o in ev.evaluate(traces, PROFILE, [1], [_policy("none"), _policy("ngram k=3")])}
    assert out["ngram k=3"].output_tok_s == pytest.approx(out["none"].output_tok_s, rel=1e-9)
    assert out["ngram k=3"].drafts_per_step == 0
    traces = [Trace("s", list(range(50)), list(range(n)), {"ngram": Acceptance(np.ones(n, np.int64), some)})]
    [o] = ev.evaluate(traces, PROFILE, [1], [_policy("ngram k=3")])
    assert 0 < o.drafts_per_step < 3 and o.output_tok_s < out["none"].output_tok_s


def test_the_combination_is_charged_per_drafter_and_at_the_ngram_price():
    from loadgen.whatif import evaluate as ev

    n = 40
    ngram_acc = Acceptance(np.minimum(6, n - np.arange(n)), np.full(n, 8))  # n-gram: 5 right everywhere
    eagle_acc = _every_position_accepts(1, n)
    traces = [
        Trace(str(i), list(range(50)), list(range(n)), {"ngram": ngram_acc, "eagle": eagle_acc}) for i in range(4)
    ]
    names = ["eagle k=1", "combination oracle (ngram+eagle)", "combination oracle (ngram+eagle), n-gram price"]
    out = {o.policy: o for o in ev.evaluate(traces, PROFILE, [4], [_policy("none")] + [_policy(p) for p in names])}
    own, cheap = out[names[1]], out[names[2]]
    # n-gram wins every position here: both rows are the same steps, and the n-gram price is
    # the price of the drafter used, so they are equal
    assert own.tokens_per_step == cheap.tokens_per_step == pytest.approx((n - 1) / 7, rel=0.2)
    assert own.output_tok_s == pytest.approx(cheap.output_tok_s, rel=1e-9)
    assert own.output_tok_s > out["eagle k=1"].output_tok_s > out["none"].output_tok_s
    # with EAGLE better everywhere the combination is EAGLE's oracle, and the n-gram price flatters it
    traces = [
        Trace(
            str(i),
            list(range(50)),
            list(range(n)),
            {
                "ngram": Acceptance(np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64)),
                "eagle": _every_position_accepts(3, n),
            },
        )
        for i in range(4)
    ]
    out = {
        o.policy: o
        for o in ev.evaluate(traces, PROFILE, [4], [_policy("eagle oracle <=5")] + [_policy(p) for p in names[1:]])
    }
    assert out[names[1]].output_tok_s == pytest.approx(out["eagle oracle <=5"].output_tok_s, rel=1e-9)
    assert out[names[2]].output_tok_s > out[names[1]].output_tok_s * 1.05


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


def test_replayed_fixed_k_reproduces_the_engine_at_that_k(tmp_path):
    """The simulator writes exact traces at k=3; replayed at k=1 and k=5 they give the
    throughput the simulator itself gives at k=1 and k=5 (one engine, one cost model)."""
    from tests.conftest import run_cli

    common = [
        "--profile",
        PROFILE,
        "--concurrency",
        "8",
        "--num-requests",
        "48",
        "--workload",
        "synthetic:chat",
        "--seed",
        "4",
    ]
    res = run_cli(
        "simulate",
        *common,
        "--speculative-config",
        _eagle(3),
        "--acceptance-traces",
        str(tmp_path / "traces.jsonl"),
        "--output",
        str(tmp_path / "k3"),
    )
    assert res.returncode == 0, res.stderr
    res = run_cli(
        "whatif",
        str(tmp_path / "traces.jsonl"),
        "--profile",
        PROFILE,
        "--batch",
        "8",
        "--drafters",
        "eagle",
        "--k",
        "1,5",
        "--requests",
        "48",
        "--output",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    predicted = {r["policy"]: r["output_tok_s"] for r in json.loads((tmp_path / "whatif.json").read_text())["results"]}
    for k in (1, 5):
        res = run_cli("simulate", *common, "--speculative-config", _eagle(k), "--output", str(tmp_path / f"k{k}"))
        assert res.returncode == 0, res.stderr
        actual = json.loads((tmp_path / f"k{k}" / "summary.json").read_text())["output_throughput_tok_s"]
        assert predicted[f"eagle k={k}"] == pytest.approx(actual, rel=0.02)
    res = run_cli("simulate", *common, "--output", str(tmp_path / "none"))
    actual = json.loads((tmp_path / "none" / "summary.json").read_text())["output_throughput_tok_s"]
    assert predicted["none"] == pytest.approx(actual, rel=0.02)


@pytest.mark.timing
def test_whatif_predicts_an_unseen_k_of_the_real_time_emulator(tmp_path):
    """The acceptance line: traces written by the emulator serving EAGLE at k=3 over HTTP
    predict the throughput of k=1 and k=5 within 10% of the emulator actually serving them."""
    from servers.embedded import emulator_server
    from tests.conftest import run_cli

    load = [
        "--concurrency",
        "8",
        "--num-requests",
        "32",
        "--workload",
        "synthetic:chat",
        "--output-len",
        "128",
        "--seed",
        "2",
        "--quiet",
    ]
    traces = tmp_path / "traces.jsonl"

    def serve_and_run(k: int, out: str, *extra: str) -> dict:
        with emulator_server(LLAMA, "--speculative-config", _eagle(k), "--seed", "2", *extra) as srv:
            res = run_cli("run", "--base-url", srv.url, *load, "--output", str(tmp_path / out))
            assert res.returncode == 0, res.stderr
        return json.loads((tmp_path / out / "summary.json").read_text())

    recorded = serve_and_run(3, "k3", "--acceptance-traces", str(traces))
    assert len(read(traces)[0]) == 32
    res = run_cli(
        "whatif",
        str(traces),
        "--profile",
        PROFILE,
        "--batch",
        "8",
        "--drafters",
        "eagle",
        "--k",
        "1,3,5",
        "--requests",
        "32",
        "--output",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    assert "Batch 8" in res.stdout and "eagle k=5" in res.stdout
    predicted = {r["policy"]: r["output_tok_s"] for r in json.loads((tmp_path / "whatif.json").read_text())["results"]}
    print(
        f"whatif eagle k=3: predicted {predicted['eagle k=3']:.0f}, "
        f"emulator {recorded['output_throughput_tok_s']:.0f} tok/s"
    )
    assert predicted["eagle k=3"] == pytest.approx(recorded["output_throughput_tok_s"], rel=0.10)
    for k in (1, 5):
        actual = serve_and_run(k, f"k{k}")["output_throughput_tok_s"]
        print(f"whatif eagle k={k}: predicted {predicted[f'eagle k={k}']:.0f}, emulator {actual:.0f} tok/s")
        assert predicted[f"eagle k={k}"] == pytest.approx(actual, rel=0.10), (k, predicted, actual)


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


def test_traces_from_a_run_with_token_ids_match_the_emulators_exact_ones(tmp_path):
    """A chat run asking for token ids against the emulator serving EAGLE k=3, turned into
    traces: the ids and the n-gram acceptance are the emulator's exactly; EAGLE's estimate is
    exact wherever a step started (censored at k + 1); inside steps it is an assumption (the
    same drafts right, the same one wrong), which the emulator's independent draws per step
    start do not follow, so it is not checked here."""
    import pandas as pd

    from servers.embedded import emulator_server
    from tests.conftest import cli, run_cli

    exact_path, out = tmp_path / "exact.jsonl", tmp_path / "run"
    with emulator_server(LLAMA, "--speculative-config", _eagle(3), "--acceptance-traces", str(exact_path)) as srv:
        res = run_cli(
            "run",
            "--base-url",
            srv.url,
            "--endpoint",
            "chat",
            "--concurrency",
            "4",
            "--num-requests",
            "12",
            "--workload",
            "synthetic:chat",
            "--output-len",
            "96",
            "--token-ids",
            "--quiet",
            "--output",
            str(out),
        )
        assert res.returncode == 0, res.stderr
    res = cli("traces", str(out), "--drafter", "eagle:3")
    assert res.returncode == 0, res.stderr
    assert "Wrote 12 traces" in res.stdout and "estimated from this run at k=3" in res.stderr
    exact = {tuple(t.generated_token_ids): t for t in read(exact_path)[0]}
    built = read(out / "traces.jsonl")[0]
    frame = pd.read_parquet(out / "requests.parquet")
    steps = {str(r.request_id): list(r.step_tokens) for r in frame.itertuples()}
    assert len(built) == 12
    for t in built:
        e = exact[tuple(t.generated_token_ids)]
        assert t.prompt_token_ids == e.prompt_token_ids
        assert t.drafters["ngram"].acc_len.tolist() == e.drafters["ngram"].acc_len.tolist()
        assert t.drafters["ngram"].proposed.tolist() == e.drafters["ngram"].proposed.tolist()
        est, truth = t.drafters["eagle"], e.drafters["eagle"].acc_len
        assert est.censored_at == 3
        starts = np.cumsum([0] + steps[t.id][:-1])[1:]  # decoding steps start after the prefill's token
        assert np.minimum(est.acc_len[starts], 4).tolist() == np.minimum(truth[starts], 4).tolist()
    res = cli("traces", str(out / "none"))
    assert res.returncode == 2 and "holds no run results" in res.stderr


def test_a_sweep_with_token_ids_makes_cells_loadgen_traces_reads(tmp_path):
    """`loadgen sweep --token-ids` keeps each request's ids in every cell, as `run --token-ids`
    does, so a cell is input for `loadgen traces` (bench/cpu_whatif.py takes traces from real
    vLLM's cells this way); in virtual time it is refused (the simulator's traces are exact)."""
    from tests.conftest import cli, run_cli

    out = tmp_path / "sweep"
    argv = ["sweep", "--variants", "ngram", "--concurrency", "2", "--num-requests", "6", "--warmup", "0"]
    res = run_cli(*argv, "--workloads", "code-edit", "--token-ids", "--output", str(out))
    assert res.returncode == 0, res.stderr[-2000:]
    cell = out / "cells" / "ngram" / "code-edit" / "c2"
    res = cli("traces", str(cell), "--ngram", "3,7")
    assert res.returncode == 0 and "Wrote 6 traces" in res.stdout, res.stderr
    traces = read(cell / "traces.jsonl")[0]
    assert len(traces) == 6 and all(t.generated_token_ids and t.prompt_token_ids for t in traces)
    res = cli(*argv, "--virtual", "--token-ids", "--output", str(tmp_path / "virtual"))
    assert res.returncode == 2 and "--token-ids does not apply to --virtual" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def _traces(n: int = 40, seed: int = 5) -> list[Trace]:
    """EAGLE traces of 60 tokens with bursty acceptance (0 to 6 drafts accepted per position)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        acc = np.minimum(1 + rng.integers(0, 7, 60), 60 - np.arange(60))
        out.append(Trace(f"r{i}", list(range(20)), list(range(100, 160)), {"eagle": Acceptance(acc, censored_at=16)}))
    return out


def test_steps_decided_as_served_are_the_planned_steps_when_the_rule_is_fixed_k():
    """The live replay (k looked up per step; servers/emulator/replay.py's Live) with one k at
    every batch size serves exactly what the planned fixed-k replay serves."""
    from loadgen.whatif import evaluate as ev

    traces = _traces()
    planned = _policy("eagle k=3", ("eagle",), (3,))
    live = ev.schedule_policy("eagle", [[1, 256, 3]], 256)
    for p, q in zip(*(ev.evaluate(traces, PROFILE, [1, 8], [x], requests=40) for x in (planned, live))):
        assert q.output_tok_s == pytest.approx(p.output_tok_s, rel=1e-12)
        assert (q.tokens_per_step, q.drafts_per_step) == pytest.approx((p.tokens_per_step, p.drafts_per_step))


def test_adaptive_verification_keeps_every_draft_that_is_always_accepted():
    """Traces where every draft is accepted: each draft's confidence is 1, every one is worth
    verifying, and adaptive verification serves what fixed k serves."""
    from loadgen.whatif import evaluate as ev

    traces = [
        Trace(t.id, t.prompt_token_ids, t.generated_token_ids, {"eagle": _every_position_accepts(16, 60)})
        for t in _traces(10)
    ]
    av = ev.adaptive_verification("eagle", 4, traces)
    assert av.live is not None and av.live.confidence == (1.0, 1.0, 1.0, 1.0)
    fixed = _policy("eagle k=4", ("eagle",), (4,))
    for a, f in zip(*(ev.evaluate(traces, PROFILE, [1, 16], [x], requests=20) for x in (av, fixed))):
        assert a.output_tok_s == pytest.approx(f.output_tok_s, rel=1e-12)


def test_whatif_serves_adaptive_verification_and_the_schedule_and_their_share_of_the_oracle(tmp_path):
    """`loadgen whatif` beside fixed k and the oracles: vLLM's adaptive verification (its
    budget binds under load: fewer tokens a step than fixed k of the same drafts) and the k
    schedule it derives, served; every row with its share of the best oracle at its batch size."""
    from tests.conftest import cli

    path = tmp_path / "traces.jsonl"
    write(path, _traces())
    res = cli(
        "whatif",
        str(path),
        "--profile",
        PROFILE,
        "--drafters",
        "eagle",
        "--batch",
        "1,32",
        "--k",
        "1,3,5",
        "--output",
        str(tmp_path / "out"),
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "out" / "whatif.json").read_text())
    rows = {(r["policy"], r["batch"]): r for r in doc["results"]}
    av = rows["eagle k=5 adaptive verification", 32]
    assert av["kind"] == "adaptive_verification" and av["realisable"]
    assert av["tokens_per_step"] < rows["eagle k=5", 32]["tokens_per_step"]
    assert av["drafts_per_step"] == pytest.approx(rows["eagle k=5", 32]["drafts_per_step"], rel=0.05)
    sched = [r for r in doc["results"] if r["kind"] == "schedule"]
    assert len(sched) == 2 and all(r["speedup"] for r in sched)
    for r in doc["results"]:
        best = max(x["output_tok_s"] for x in doc["results"] if x["batch"] == r["batch"] and not x["realisable"])
        assert r["oracle_share"] == pytest.approx(r["output_tok_s"] / best)
    assert "of oracle" in res.stdout and "adaptive verification" in res.stdout
