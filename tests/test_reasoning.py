"""Reasoning models and tool calls (docs/reasoning.md, docs/metrics.md "Reasoning and tool
calls"): the client times thinking and answering apart, checked request by request against the
emulator's own record of every chunk it wrote (--chunk-log); per-phase acceptance; TTFO in SLO
gates; tool-call conversations; the same figures in virtual time; a reasoning sweep's report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from servers.embedded import emulator_server
from tests.conftest import cli, run_cli

pytestmark = pytest.mark.servers

QWEN = "Qwen/Qwen3-8B"
NGRAM = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":3,"prompt_lookup_max":7}'
PARSERS = ("--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
SCALE = 2.0  # time dilation: the client's and the machine's delays count half
BOUND_MS = 2.0  # the truth-server tolerance of docs/metrics.md (tests/test_timing.py)
BUDGET = '{"thinking_token_budget": 100}'
# AIME-style prompts (reasoning-aime's offline stand-in), cut at 220 tokens: 102 thinking, the
# rest of the answer, so that a request takes seconds, not minutes
AIME = "synthetic:reasoning,output_len=220"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The emulator serving Qwen3-8B with n-gram drafting as a reasoning model that calls tools,
    SCALE times slower than its model, recording every chunk it writes."""
    log = tmp_path_factory.mktemp("emulator") / "chunks.jsonl"
    with emulator_server(
        QWEN, "--speculative-config", NGRAM, *PARSERS, "--time-scale", str(SCALE), "--chunk-log", str(log)
    ) as srv:
        yield srv.url, log


def _truth(rec: dict) -> dict:
    """docs/metrics.md's phase figures computed from the server's record of one response."""
    ch = np.array(rec["chunks"], dtype=np.int64)
    t, n, ph = ch[:, 0], np.diff(ch[:, 1], prepend=0), ch[:, 3]
    thinking = ph == 1
    first = int(np.argmax(thinking))
    rest = np.flatnonzero(~thinking[first:])
    s = first + int(rest[0]) if len(rest) else len(t)
    return {
        "t": t,
        "tokens": n,
        "t_first_reasoning": t[first],
        "t_first_answer": t[s] if s < len(t) else None,
        "i_first_reasoning": first,
        "i_first_answer": s,
        "reasoning_tokens": rec["reasoning_tokens"],
        "completion_tokens": rec["completion_tokens"],
        "reasoning_decode_chunks": max(s - 1, 0),
        "reasoning_decode_tokens": int(n[1:s].sum()),
        "answer_decode_chunks": len(t) - max(s, 1),
        "answer_decode_tokens": int(n[max(s, 1) :].sum()),
        "tpot_reasoning_ns": (t[s - 1] - t[0]) / (n[:s].sum() - 1),
        "tpot_answer_ns": (t[-1] - t[s]) / (n[s:].sum() - 1) if s < len(t) else None,
    }


@pytest.mark.timing  # figures against the server's own record: runs alone (tests/conftest.py)
def test_thinking_and_answering_timed_apart_against_the_emulators_record(served, tmp_path):
    url, log = served
    log.write_text("")
    out = tmp_path / "run"
    res = run_cli(
        *("run", "--base-url", url, "--endpoint", "chat", "--workload", AIME, "--num-requests", "4"),
        *("--concurrency", "4", "--extra-body", BUDGET, "--output", str(out)),
    )
    assert res.returncode == 0, res.stderr
    assert "TTFO (first answer)" in res.stdout and "TPOT thinking" in res.stdout
    summary = json.loads((out / "summary.json").read_text())
    frame = pd.read_parquet(out / "requests.parquet")
    t0 = summary["config"]["clock"]["t0_ns"]
    emulated = lambda t: t0 + (np.asarray(t, dtype=np.int64) - t0) / SCALE  # noqa: E731  # as the client converts
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == len(frame) == 4
    truths = [_truth(r) for r in records]
    errors = []
    for _, row in frame.iterrows():
        # the server's response with as many chunks, its first written closest to this row's first
        truth = min(
            truths,
            key=lambda tr: (len(tr["t"]) != row["n_chunks"], abs(emulated(tr["t"][0]) - row["t_first_token_ns"])),
        )
        for key in (
            "reasoning_tokens",
            "completion_tokens",
            "reasoning_decode_chunks",
            "reasoning_decode_tokens",
            "answer_decode_chunks",
            "answer_decode_tokens",
        ):
            assert row[key] == truth[key], key  # exact
        assert row["answer_tokens"] == truth["completion_tokens"] - truth["reasoning_tokens"]
        assert row["reasoning_tokens"] == 100  # the budget cut every thought
        assert list(row["chunk_tokens"]) == truth["tokens"].tolist()
        errors += list((np.asarray(row["chunk_t_ns"]) - emulated(truth["t"])) / 1e6)
        # TTFR and TTFO: the client's own times of the chunks where the server's thinking began and
        # its answer began (exactly), so as close to the server's as every chunk (the p99 below);
        # and none off by more than a scheduling hiccup
        send, times = row["t_send_ns"], np.asarray(row["chunk_t_ns"])
        assert row["ttfr_ms"] == pytest.approx((times[truth["i_first_reasoning"]] - send) / 1e6, abs=1e-3)
        assert row["ttfo_ms"] == pytest.approx((times[truth["i_first_answer"]] - send) / 1e6, abs=1e-3)
        assert row["ttfo_ms"] * 1e6 + send - emulated(truth["t_first_answer"]) <= 5 * BOUND_MS * 1e6
        assert row["tpot_reasoning_ms"] == pytest.approx(truth["tpot_reasoning_ns"] / SCALE / 1e6, abs=0.05)
        assert row["tpot_answer_ms"] == pytest.approx(truth["tpot_answer_ns"] / SCALE / 1e6, abs=0.05)
    errors_ms = np.asarray(errors)
    assert errors_ms.min() > -0.1, "a chunk seen before the server wrote it"
    assert np.percentile(errors_ms, 99) <= BOUND_MS
    ph = summary["phases"]
    assert ph["requests"] == ph["reasoning_requests"] == ph["answered"] == 4
    # n-gram drafting accepts more in the repetitive thinking than in the answer (docs/emulator.md)
    assert ph["tokens_per_chunk_reasoning"] > ph["tokens_per_chunk_answer"] > 1.0
    assert ph["tokens_per_chunk_reasoning"] == pytest.approx(
        frame["reasoning_decode_tokens"].sum() / frame["reasoning_decode_chunks"].sum()
    )
    assert ph["ttfo_ms"]["max"] > ph["ttfr_ms"]["max"]


def test_check_gates_on_ttfo(tmp_path):
    """`loadgen check --slo 'ttfo_p99<=...'` on a reasoning model: exit code and JUnit (its own
    server, in real time: the gate, not the timing, is checked here)."""
    junit = tmp_path / "junit.xml"
    slos = ("--slo", "ttfo_p99<=30s", "--slo", "ttfo_p99<=1ms")
    with emulator_server(QWEN, *PARSERS) as srv:
        res = run_cli(
            *("check", "--base-url", srv.url, "--endpoint", "chat", "--workload", "synthetic:reasoning,output_len=80"),
            *("--num-requests", "2", "--concurrency", "2", "--extra-body", '{"thinking_token_budget": 30}', *slos),
            *("--junit", str(junit), "--output", str(tmp_path / "check")),
        )
    assert res.returncode == 1, res.stderr
    checked = json.loads((tmp_path / "check" / "summary.json").read_text())
    p99 = checked["phases"]["ttfo_ms"]["p99"]
    assert p99 > checked["ttft_ms"]["p99"]  # the answer comes after the thinking
    assert "ttfo_p99<=1ms" in res.stdout and "FAIL" in res.stdout and "pass" in res.stdout
    xml = junit.read_text()
    assert 'failures="1"' in xml and "ttfo_p99&lt;=1ms" in xml and f"{p99:.4g}"[:3] in xml


def test_a_tool_call_conversation_of_three_turns(tmp_path):
    """Turns 1 and 2 call a tool (the second after the first call's result came back as a tool
    message); turn 3, after two results, answers. Time to the first tool call per turn; the
    same conversation in virtual time gives the same tokens."""
    out = tmp_path / "tools"
    args = (
        "--endpoint",
        "chat",
        "--workload",
        "synthetic:tool_use,turns=3,output_len=120",
        "--num-requests",
        "3",
        "--concurrency",
        "3",
    )
    with emulator_server(QWEN, "--speculative-config", NGRAM, *PARSERS) as srv:
        res = run_cli(
            "run", "--base-url", srv.url, *args, "--extra-body", '{"thinking_token_budget": 30}', "--output", str(out)
        )
    assert res.returncode == 0, res.stderr
    frame = pd.read_parquet(out / "requests.parquet").sort_values(["session", "turn"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["conversations"]["sessions"] == 3 and summary["conversations"]["all_turns_ok"] == 3
    assert frame.groupby("session")["turn"].apply(list).tolist() == [[1, 2, 3]] * 3
    calls = frame[frame["turn"] < 3]
    assert (calls["finish_reason"] == "tool_calls").all()
    assert (calls["ttftc_ms"] > calls["ttfr_ms"]).all() and (calls["tool_call_tokens"] >= 5).all()
    answers = frame[frame["turn"] == 3]
    assert answers["finish_reason"].isin(["stop", "length"]).all() and answers["ttftc_ms"].isna().all()
    # each later turn carried the earlier turns, the call and its result: longer prompts
    assert (frame.groupby("session")["prompt_tokens"].diff().dropna() > 20).all()
    assert summary["phases"]["tool_call_requests"] == 6

    sim = tmp_path / "sim"
    res = cli(
        *("simulate", "--profile", "h100-qwen3-8b", "--speculative-config", NGRAM, "--reasoning-parser", "qwen3"),
        *("--tool-call-parser", "hermes", *args, "--extra-body", '{"thinking_token_budget": 30}', "--output", str(sim)),
    )
    assert res.returncode == 0, res.stderr
    virtual = pd.read_parquet(sim / "requests.parquet").sort_values(["session", "turn"])
    cols = [
        "session",
        "turn",
        "finish_reason",
        "prompt_tokens",
        "completion_tokens",
        "reasoning_tokens",
        "tool_call_tokens",
    ]
    pd.testing.assert_frame_equal(frame[cols].reset_index(drop=True), virtual[cols].reset_index(drop=True))


def _simulate(tmp_path: Path, name: str, *args: str, parser: tuple[str, ...] = ("--reasoning-parser", "qwen3")) -> dict:
    out = tmp_path / name
    res = cli(
        *("simulate", "--profile", "h100-qwen3-8b", "--endpoint", "chat", *parser),
        *("--workload", "reasoning-aime", "--num-requests", "12", "--concurrency", "4", *args, "--output", str(out)),
    )
    assert res.returncode == 0, res.stderr
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def baseline_phases(tmp_path_factory) -> dict:
    """No speculation on the drafters' test's requests: one token a step in both phases."""
    return _simulate(tmp_path_factory.mktemp("base"), "base", "--extra-body", '{"thinking_token_budget": 1500}')[
        "phases"
    ]


def _chunk(delta: dict, completion: int, reasoning: int | None, compact: bool = True) -> bytes:
    usage: dict = {"prompt_tokens": 5, "total_tokens": 5 + completion, "completion_tokens": completion}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    obj = {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}], "usage": usage}
    return json.dumps(obj, separators=(",", ":") if compact else (", ", ": ")).encode()


def test_a_reasoning_sweeps_report_gives_each_phases_speedup(tmp_path):
    """sweep --virtual over Qwen3-8B's variants on a reasoning workload: the report says, per
    variant and load, the speedup of thinking and of answering apart (the baseline's TPOT in
    that phase over the variant's)."""
    out = tmp_path / "sweep"
    res = run_cli(
        *("sweep", "--servers", "qwen3-8b", "--engine", "emulator", "--virtual", "--endpoint", "chat"),
        *("--workloads", "reasoning-aime", "--variants", "baseline,ngram,eagle3", "--concurrency", "1,16"),
        *("--num-requests", "8", "--extra-body", '{"thinking_token_budget": 600}', "--output", str(out)),
    )
    assert res.returncode == 0, res.stderr
    res = cli("report", str(out))
    assert res.returncode == 0, res.stderr
    ph = pd.read_csv(out / "report" / "phases.csv")
    assert set(ph["variant"]) == {"baseline", "ngram", "eagle3"} and set(ph["level"]) == {1, 16}
    cells = pd.read_parquet(out / "cells.parquet")
    for _, row in ph.iterrows():
        mine = cells[(cells["variant"] == row["variant"]) & (cells["level"] == row["level"])]["path"].iloc[0]
        base = cells[(cells["variant"] == "baseline") & (cells["level"] == row["level"])]["path"].iloc[0]
        own = json.loads((out / "cells" / mine / "summary.json").read_text())["phases"]
        theirs = json.loads((out / "cells" / base / "summary.json").read_text())["phases"]
        assert row["thinking_speedup"] == pytest.approx(
            theirs["tpot_reasoning_ms"]["mean"] / own["tpot_reasoning_ms"]["mean"]
        )
        assert row["answering_speedup"] == pytest.approx(
            theirs["tpot_answer_ms"]["mean"] / own["tpot_answer_ms"]["mean"]
        )
    ngram = ph[ph["variant"] == "ngram"]
    assert (ngram["thinking_speedup"] > ngram["answering_speedup"]).all()  # n-gram pays on thinking
    md = (out / "report" / "report.md").read_text()
    assert "## Reasoning: thinking and answering" in md
    assert "reasoning-aime, ngram against baseline, per phase: thinking" in md


def test_whatif_gives_each_phase_as_simulate_does(tmp_path):
    """Exact traces of a reasoning model (simulate --acceptance-traces, with reasoning_end)
    replayed by loadgen whatif: at the k the simulator did not run, each phase's TPOT is the
    one the simulator gives at that k (one engine, one cost model), and the table shows each
    phase's speedup."""
    common = ("--concurrency", "4", "--num-requests", "12", "--extra-body", '{"thinking_token_budget": 600}')

    def eagle(k: int) -> str:
        return json.dumps({"method": "eagle3", "model": "AngelSlim/Qwen3-8B_eagle3", "num_speculative_tokens": k})

    traces = tmp_path / "traces.jsonl"
    _simulate(tmp_path, "k3", *common, "--speculative-config", eagle(3), "--acceptance-traces", str(traces))
    assert all("reasoning_end" in json.loads(line) for line in traces.read_text().splitlines())
    res = run_cli(
        *("whatif", str(traces), "--profile", "h100-qwen3-8b", "--batch", "4", "--drafters", "eagle3"),
        *("--k", "1", "--requests", "12", "--output", str(tmp_path)),
    )
    assert res.returncode == 0, res.stderr
    assert "thinking  answering" in res.stdout
    results = {r["policy"]: r for r in json.loads((tmp_path / "whatif.json").read_text())["results"]}
    for policy, spec in (("eagle3 k=1", ("--speculative-config", eagle(1))), ("none", ())):
        ph = _simulate(tmp_path, policy.replace(" ", ""), *common, *spec)["phases"]
        assert results[policy]["tpot_thinking_ms"] == pytest.approx(ph["tpot_reasoning_ms"]["mean"], rel=0.02)
        assert results[policy]["tpot_answering_ms"] == pytest.approx(ph["tpot_answer_ms"]["mean"], rel=0.02)
    k1 = results["eagle3 k=1"]
    assert k1["thinking_speedup"] == pytest.approx(results["none"]["tpot_thinking_ms"] / k1["tpot_thinking_ms"])
    assert k1["thinking_speedup"] > 1 and k1["answering_speedup"] > 1
