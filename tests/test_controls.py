"""vLLM's SD controls swept (issue 47): the catalog's EAGLE-3 at fixed k, at k by batch size and
with adaptive verification, and the report's answer per level: whether each control pays over
the best fixed k, the best of them, its share of the oracle. And the counts of steps that draft
nothing (k = 0 by batch size), over HTTP: the client's accepted drafts equal the server's."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import cli, run_cli, server_pids

pytestmark = pytest.mark.servers

VARIANTS = "baseline,eagle3,eagle3-k5,eagle3-schedule,eagle3-adaptive"
WORKLOAD = "code-edit,output=fixed:128"


def test_a_sweep_of_the_controls_ends_with_the_best_per_level_and_its_share_of_the_oracle(tmp_path):
    out = tmp_path / "sweep"
    res = run_cli(
        "sweep",
        "--servers",
        "llama-3.1-8b",
        "--engine",
        "emulator",
        "--variants",
        VARIANTS,
        "--workloads",
        WORKLOAD,
        "--concurrency",
        "1,16",
        "--virtual",
        "--quiet",
        "--output",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    res = cli("report", str(out))  # without traces: the best per level, and how to get the oracle
    assert res.returncode == 0, res.stderr
    assert "The oracle's share needs each workload's acceptance traces" in (out / "report" / "report.md").read_text()
    # the oracle: the emulator's exact traces of the same workload, where the report finds them
    res = run_cli(
        "simulate",
        "--profile",
        "h100-llama-3.1-8b",
        "--workload",
        WORKLOAD,
        "--concurrency",
        "16",
        "--num-requests",
        "120",
        "--acceptance-traces",
        str(out / "traces.jsonl"),
        "--output",
        str(tmp_path / "sim"),
    )
    assert res.returncode == 0, res.stderr
    res = cli("report", str(out))
    assert res.returncode == 0, res.stderr
    lead = (out / "report" / "report.md").read_text()
    ctl = pd.read_csv(out / "report" / "controls.csv")
    assert set(ctl["control"]) == {"fixed", "k by batch size", "adaptive verification"}
    for level, g in ctl.groupby("level"):
        best = g[g["best"]].iloc[0]
        assert best["output_throughput_tok_s"] == g["output_throughput_tok_s"].max()
        assert 0.3 < best["oracle_share"] <= 1.05  # the drafter's oracle bounds what it can do
        sentence = f"at {level} users {best['variant']} is best"
        assert sentence in lead
        assert f"{best['oracle_share']:.0%} of eagle3's oracle" in lead
    assert "adaptive verification" in lead and "k by batch size" in lead
    assert "The oracle's share needs" not in lead
    # each control's figure and verdict against the best fixed k: worked by hand in
    # test_the_controls_table_and_its_verdicts_on_a_hand_worked_sweep


def test_steps_that_draft_nothing_leave_the_client_and_the_server_agreeing(tmp_path):
    """k = 0 past two requests a step: at 4 users most steps draft nothing, and count nothing
    (as vLLM counts them; tests/test_vllm_cpu.py checks real vLLM so); the client's accepted
    drafts by the written rule still equal the server's counter, and its per-request counts sum
    to it."""
    dep = tmp_path / "k0.toml"
    dep.write_text(
        """description = "EAGLE-3 with k = 0 past two requests a step"
model = "meta-llama/Llama-3.1-8B-Instruct"
engine = "emulator"
tensor_parallel_size = 1
max_num_seqs = 256

[variants.baseline]

[variants.eagle3-k0]
args = ["--per-request-spec-decode-metrics", "summary"]

[variants.eagle3-k0.speculative_config]
method = "eagle3"
model = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
num_speculative_tokens = 3
num_speculative_tokens_per_batch_size = [[1, 2, 3], [3, 256, 0]]
"""
    )
    out = tmp_path / "sweep"
    before = server_pids()
    res = run_cli(
        "sweep",
        "--servers",
        str(dep),
        "--variants",
        "eagle3-k0",
        "--workloads",
        "chat,output=fixed:64",
        "--concurrency",
        "4",
        "--num-requests",
        "12",
        "--time-scale",
        "2",
        "--quiet",
        "--output",
        str(out),
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    assert server_pids() <= before
    s = json.loads((out / "cells" / "eagle3-k0" / "chat" / "c4" / "summary.json").read_text())
    rec = s["acceptance_client"]["reconciliation"]
    # every request's count fits its stream by the rule (checked request by request), and the
    # per-request counts sum to the counter
    assert rec["exact"] is True and rec["requests_checked"] == rec["requests"] >= 12, rec
    assert rec["server_per_request"] == rec["server_counter"] and rec["unexplained"]["requests"] == 0
    sd = s["spec_decode"]
    reported = s["acceptance_client"]["server_reported"]
    assert reported["spec_steps"] == sd["drafts"]  # verify steps: those that drafted
    # most steps had 3 or 4 requests and drafted nothing; the last ones, with 2 or 1, drafted
    assert 0 < sd["drafts"] < s["acceptance_client"]["decode_steps"] / 2


def _argv(spec: dict | None) -> dict:
    return {"argv": ["vllm", "serve", "m"] + (["--speculative-config", json.dumps(spec)] if spec else [])}
