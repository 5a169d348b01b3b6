"""test_sampling.py's tests that start processes, apart from its tests that start none (what they test:
its docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
from tests.test_sampling import DATA_DIR, bodies

pytestmark = [pytest.mark.servers]


def test_every_request_says_its_sampling_over_http(server, tmp_path):
    trace = tmp_path / "trace.jsonl"
    url = server("--step-ms", "1", "--ttft-ms", "1", "--trace", str(trace))
    base = ["run", "--base-url", url, "--num-requests", "4", "--concurrency", "2", "--quiet"]
    greedy = run_cli(
        *base,
        "--workload",
        f"instructcoder:{DATA_DIR}/instructcoder/edit_eval.jsonl,output=cap:8",
        "--output",
        str(tmp_path / "greedy"),
    )
    assert greedy.returncode == 0, greedy.stderr
    assert bodies(trace) == [{"temperature": 0.0}] * 4  # the data sets none: greedy, said
    summary = json.loads((tmp_path / "greedy" / "summary.json").read_text())
    assert summary["config"]["sampling"]["temperature_from"].startswith("loadgen's default")
    assert "Sampling: greedy (temperature 0)" in greedy.stdout
    sampled = run_cli(
        *base, "--temperature", "0.6", "--top-p", "0.9", "--sampling-seed", "7", "--output", str(tmp_path / "sampled")
    )
    assert sampled.returncode == 0, sampled.stderr
    assert bodies(trace, 4) == [{"temperature": 0.6, "top_p": 0.9, "seed": 7}] * 4
    said = json.loads((tmp_path / "sampled" / "summary.json").read_text())["config"]["sampling"]
    assert (said["temperature"], said["top_p"], said["seed"], said["server_decides"]) == (0.6, 0.9, 7, ["top_k"])
    extra = run_cli(*base, "--extra-body", '{"temperature": 0.3}', "--output", str(tmp_path / "extra"))
    assert extra.returncode == 0, extra.stderr
    assert bodies(trace, 8) == [{"temperature": 0.3}] * 4  # --extra-body is merged last, and says so
    said = json.loads((tmp_path / "extra" / "summary.json").read_text())["config"]["sampling"]
    assert said["temperature"] == 0.3 and said["temperature_from"] == "--extra-body"


def test_a_trace_replay_sends_the_command_lines_sampling(server, tmp_path):
    """--trace with no --workload: random words, the trace's lengths, and --temperature all the same."""
    trace = tmp_path / "trace.jsonl"
    url = server("--step-ms", "1", "--ttft-ms", "1", "--trace", str(trace))
    conv = DATA_DIR / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
    args = ["--trace", f"azure:{conv}", "--trace-window", "60", "--trace-speed", "20", "--num-requests", "3"]
    res = run_cli("run", "--base-url", url, *args, "--temperature", "0.9", "--quiet", "--output", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    assert bodies(trace) == [{"temperature": 0.9}] * 3
    said = json.loads((tmp_path / "o" / "summary.json").read_text())["config"]["sampling"]
    assert said["temperature"] == 0.9 and said["temperature_from"] == "the workload (temperature= or --temperature)"
