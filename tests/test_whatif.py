"""What-if analysis (issue 12, first part): the acceptance-trace form and the step plans of
each speculation policy, pinned with hand-made traces whose answers are worked out by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen.whatif.acceptance_traces import Acceptance, Trace, write
from loadgen.whatif.reading import read

pytestmark = pytest.mark.servers


def _every_position_accepts(accepted: int, n: int) -> Acceptance:
    return Acceptance(np.minimum(accepted + 1, n - np.arange(n)))


# -- the virtual-time evaluation ---------------------------------------------------------------

PROFILE = "h100-llama-3.1-8b"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _eagle(k: int) -> str:
    return f'{{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": {k}}}'


def _policy(name: str, methods=("ngram", "eagle"), ks=(1, 3, 5)):
    from loadgen.whatif import evaluate as ev

    return next(p for p in ev.candidates(list(methods), ks) if p.name == name)


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
