"""test_reasoning.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from loadgen.client.events import on_events
from loadgen.client.record import RequestRecord
from loadgen.measures.frame import request_frame
from tests.conftest import cli
from tests.test_reasoning import BUDGET, _chunk, _simulate, baseline_phases  # noqa: F401 (a fixture)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("method", ["ngram", "suffix", "eagle3", "draft_model"])
def test_every_drafter_accepts_more_while_thinking(tmp_path, method, baseline_phases):  # noqa: F811
    """docs/emulator.md: thinking repeats itself, so n-gram and suffix drafting find more to
    reuse there (from the content), and the model drafters are given easier text (assumed)."""
    spec = {"method": method, "num_speculative_tokens": 3}
    if method in ("eagle3", "draft_model"):
        spec["model"] = "Qwen/Qwen3-0.6B" if method == "draft_model" else "AngelSlim/Qwen3-8B_eagle3"
    s = _simulate(
        tmp_path, method, "--speculative-config", json.dumps(spec), "--extra-body", '{"thinking_token_budget": 1500}'
    )
    ph = s["phases"]
    assert ph["tokens_per_chunk_reasoning"] > ph["tokens_per_chunk_answer"] + 0.1, ph
    base = baseline_phases
    # one token a step; the answer's first chunk also carries the </think> its step before sent
    # no chunk for (docs/metrics.md), so answering is a little above 1
    assert base["tokens_per_chunk_reasoning"] == 1.0 and 1.0 <= base["tokens_per_chunk_answer"] < 1.01
    assert ph["tpot_reasoning_ms"]["mean"] < base["tpot_reasoning_ms"]["mean"]


def test_max_tokens_cuts_the_thinking_as_vllm_does(tmp_path):
    """A thought longer than max_tokens: no answer at all (finish length, no TTFO), the
    reasoning count the generated tokens less the <think> marker; ttfo goodput judges it bad."""
    out = tmp_path / "cut"
    res = cli(
        *("simulate", "--profile", "h100-qwen3-8b", "--endpoint", "chat", "--reasoning-parser", "qwen3"),
        *("--workload", "synthetic:reasoning,output_len=100", "--num-requests", "4", "--concurrency", "2"),
        *("--goodput", "ttfo<=100s", "--output", str(out)),
    )
    assert res.returncode == 0, res.stderr
    frame = pd.read_parquet(out / "requests.parquet")
    assert (frame["finish_reason"] == "length").all() and (frame["completion_tokens"] == 100).all()
    assert (frame["reasoning_tokens"] == 99).all() and (frame["answer_tokens"] == 1).all()
    assert frame["ttfo_ms"].isna().all() and frame["ttfr_ms"].notna().all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["phases"]["answered"] == 0 and summary["goodput"]["good"] == 0


def test_no_reasoning_no_phases(tmp_path):
    """The same model without --reasoning-parser answers at once: no phases anywhere, TTFO is
    TTFT, and the summary has exactly the figures it had before phases existed."""
    s = _simulate(tmp_path, "plain", "--extra-body", BUDGET, parser=())
    assert s["phases"] is None
    frame = pd.read_parquet(tmp_path / "plain" / "requests.parquet")
    assert frame["reasoning_tokens"].isna().all()
    assert np.array_equal(frame["ttfo_ms"].to_numpy(), frame["ttft_ms"].to_numpy())


@pytest.mark.parametrize("compact", [True, False], ids=["compact", "spaced"])
def test_phases_read_from_raw_bytes_equal_the_parsed_events(compact):
    """The hot path reads a usage-counted chunk's phase from its bytes (vLLM's compact JSON by
    substrings, any other by regexes); the same events parsed as JSON (a run that keeps text)
    give the same phases and counts. Words like "reasoning" inside the text itself never count
    as a key."""
    events = [
        _chunk({"role": "assistant", "content": ""}, 0, 0, compact),
        _chunk({"reasoning": ' so "reasoning":"x", "content": "y" and content'}, 2, 1, compact),
        _chunk({"reasoning_content": " more"}, 4, 3, compact),
        _chunk({}, 5, 3, compact),  # the end marker alone: no text, the phase goes on
        _chunk({"content": ' the answer, "content":"', "reasoning": " last"}, 8, 4, compact),
        _chunk({"content": " done"}, 9, 4, compact),
    ]
    recs = []
    for keep_text, per_read in ((False, len(events)), (False, 1), (True, 2)):
        rec = RequestRecord(0, "r", False, 0, t_send_ns=1)
        rec.chunk_text = [] if keep_text else None
        for i in range(0, len(events), per_read):
            on_events(rec, events[i : i + per_read], 10 + i)
        recs.append(rec)
    fast, single, parsed = recs
    assert single.chunk_phase.tolist() == fast.chunk_phase.tolist()
    assert single.chunk_reasoning.tolist() == fast.chunk_reasoning.tolist()
    assert fast.chunk_phase.tolist() == parsed.chunk_phase.tolist() == [1, 1, 1, 0, 0]
    assert fast.chunk_reasoning.tolist() == parsed.chunk_reasoning.tolist() == [1, 3, 3, 4, 4]
    assert fast.reasoning_tokens == parsed.reasoning_tokens == 4
    row = request_frame([fast]).iloc[0]
    assert (row["reasoning_tokens"], row["answer_tokens"]) == (4, 5)
    assert (row["reasoning_decode_chunks"], row["reasoning_decode_tokens"]) == (2, 3)
    assert (row["answer_decode_chunks"], row["answer_decode_tokens"]) == (2, 4)
    assert math.isclose(row["ttfo_ms"], row["ttfr_ms"]) and parsed.answer_text == [' the answer, "content":"', " done"]


def test_tool_calls_without_a_reasoning_parser(tmp_path):
    """A model that calls tools but does not think: the calls still timed and counted, no
    reasoning anywhere (in virtual time, as the server streams them)."""
    out = tmp_path / "tools"
    res = cli(
        *("simulate", "--profile", "h100-qwen3-8b", "--tool-call-parser", "hermes", "--endpoint", "chat"),
        *("--workload", "synthetic:tool_use,turns=3,output_len=120", "--num-requests", "2", "--concurrency", "2"),
        *("--output", str(out)),
    )
    assert res.returncode == 0, res.stderr
    frame = pd.read_parquet(out / "requests.parquet").sort_values(["session", "turn"])
    calls = frame[frame["turn"] < 3]
    assert (calls["finish_reason"] == "tool_calls").all() and calls["ttftc_ms"].notna().all()
    assert (calls["tool_call_tokens"] >= 5).all() and (frame["reasoning_tokens"].fillna(0) == 0).all()
    assert frame["ttfr_ms"].isna().all()
