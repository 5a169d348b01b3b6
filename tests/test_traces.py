"""Production traces (workloads/traces.py, workloads/fitting.py, loadgen/shapes/trace.py): read as
their own tools write them, bad lines named with file, line and fix, text fitted to their
lengths, and replayed at their own times, in real time and in virtual time."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import assert_light_load_unflagged, judged_late, run_cli
from workloads.traces import read_trace

pytestmark = pytest.mark.servers

DATA = Path(__file__).resolve().parents[2] / "shared" / "datasets"
AZURE = DATA / "azure-llm-2023"
CONV, CODE = AZURE / "AzureLLMInferenceTrace_conv.csv", AZURE / "AzureLLMInferenceTrace_code.csv"


def test_simulate_replays_the_trace_window(tmp_path):
    """With the text from a content workload (chat), as bench/trace_replay.py runs it."""
    out = tmp_path / "sim"
    res = run_cli(
        "simulate",
        "--profile",
        "h100-llama-3.1-8b",
        "--trace",
        f"azure:{CONV}",
        "--trace-start",
        "60",
        "--trace-window",
        "60",
        "--trace-speed",
        "4",
        "--workload",
        "chat",
        "--data-dir",
        str(DATA),
        "--output",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    frame = pd.read_parquet(out / "requests.parquet")
    trace = read_trace(f"azure:{CONV}").window(60, 60)
    assert len(frame) == len(trace) and frame["ok"].all()
    sent = (frame["t_send_ns"] - frame["t_send_ns"].iloc[0]).to_numpy() / 1e9
    assert sent == pytest.approx((trace.t_s - trace.t_s[0]) / 4, abs=1e-6)
    assert frame["prompt_tokens"].tolist() == trace.input_len.tolist()
    assert frame["completion_tokens"].tolist() == trace.output_len.tolist()
    cfg = json.loads((out / "summary.json").read_text())["config"]
    assert cfg["load"]["mode"] == "trace" and cfg["load"]["speed"] == 4


@pytest.mark.timing
def test_real_time_replay_against_the_emulator_matches_the_trace_and_the_simulator(tmp_path):
    """20 seconds of the conversation trace at twice its speed: every request sent once, scheduled
    at the trace's gaps halved (its send lateness measured: under 5 ms at p99 here, and flagged
    client_bound on a machine that cannot keep it), with the trace's lengths exactly; the
    simulator on the same settings agrees on throughput."""
    from servers.embedded import emulator_server

    args = ["--trace", f"azure:{CONV}", "--trace-window", "20", "--trace-speed", "2"]
    with emulator_server("meta-llama/Llama-3.1-8B-Instruct") as srv:
        res = run_cli("run", "--base-url", srv.url, *args, "--quiet", "--output", str(tmp_path / "real"), timeout=300)
    assert res.returncode == 0, res.stderr
    sim = run_cli("simulate", "--profile", "h100-llama-3.1-8b", *args, "--output", str(tmp_path / "sim"))
    assert sim.returncode == 0, sim.stderr
    trace = read_trace(f"azure:{CONV}").window(0, 20)
    frame = pd.read_parquet(tmp_path / "real" / "requests.parquet")
    assert len(frame) == len(trace) and frame["ok"].all() and frame["request_id"].is_unique
    frame = frame.sort_values("index")
    sched = (frame["t_scheduled_ns"] - frame["t_scheduled_ns"].iloc[0]).to_numpy() / 1e9
    assert sched == pytest.approx(trace.t_s / 2, abs=1e-6)  # the schedule is the trace's, halved
    summary = json.loads((tmp_path / "real" / "summary.json").read_text())
    late = summary["self_check"]["lateness_ms"]
    assert late["count"] == len(trace)  # every send's lateness measured and reported...
    if judged_late(summary):  # ...and a machine too slow to keep the schedule says so, honestly
        assert_light_load_unflagged(tmp_path)  # (a client that flags every run does not pass)
    assert frame["prompt_tokens"].tolist() == trace.input_len.tolist()
    assert frame["completion_tokens"].tolist() == trace.output_len.tolist()
    simulated = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert summary["output_throughput_tok_s"] == pytest.approx(simulated["output_throughput_tok_s"], rel=0.05)


@pytest.mark.timing
def test_a_replay_under_time_dilation_keeps_the_trace_in_emulated_time(tmp_path):
    """The embedded emulator run 2x slower than its model (--time-scale, for machines that
    cannot keep its pace): the replay is stretched with it, so in the results' (emulated) time
    the schedule is still the trace's gaps divided by --trace-speed, the lengths the trace's, and
    the throughput the simulator's."""
    args = ["--trace", f"azure:{CONV}", "--trace-window", "20", "--trace-speed", "4"]
    res = run_cli("run", *args, "--time-scale", "2", "--quiet", "--output", str(tmp_path / "real"), timeout=300)
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "real" / "summary.json").read_text())
    assert summary["time_scale"] == 2.0
    sim = run_cli(
        "simulate",
        "--profile",
        "h100-llama-3.1-8b",
        "--speculative-config",
        summary["config"]["speculative_config"],
        *args,
        "--output",
        str(tmp_path / "sim"),
    )
    assert sim.returncode == 0, sim.stderr
    trace = read_trace(f"azure:{CONV}").window(0, 20)
    frame = pd.read_parquet(tmp_path / "real" / "requests.parquet").sort_values("index")
    assert len(frame) == len(trace) and frame["ok"].all()
    sched = (frame["t_scheduled_ns"] - frame["t_scheduled_ns"].iloc[0]).to_numpy() / 1e9
    assert sched == pytest.approx(trace.t_s / 4, abs=1e-6)
    assert frame["prompt_tokens"].tolist() == trace.input_len.tolist()
    assert frame["completion_tokens"].tolist() == trace.output_len.tolist()
    simulated = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert summary["output_throughput_tok_s"] == pytest.approx(simulated["output_throughput_tok_s"], rel=0.05)
