"""`loadgen simulate`: the engine in virtual time gives the same records and summary as a real
run, matches the real-time emulator, and is deterministic."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from servers.embedded import emulator_server
from tests.conftest import run_cli

pytestmark = pytest.mark.servers

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE = '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'
EAGLE3 = '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'


def _simulate(tmp_path, *args):
    res = run_cli("simulate", "--profile", "h100-llama-3.1-8b", "--seed", "5", "--output", str(tmp_path), *args)
    assert res.returncode == 0, res.stderr
    return json.loads((tmp_path / "summary.json").read_text()), pd.read_parquet(tmp_path / "requests.parquet")


def test_simulated_results_have_the_run_form_and_exact_acceptance(tmp_path):
    s, f = _simulate(
        tmp_path,
        "--speculative-config",
        EAGLE,
        "--concurrency",
        "64",
        "--num-requests",
        "1500",
        "--workload",
        "synthetic:chat",
    )
    assert s["completed"] == 1500 and s["config"]["simulated"] is True
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "inter_chunk_ms", "e2e_ms"):
        assert {"mean", "p50", "p90", "p99"} <= set(s[key])
    assert (f["token_count_source"] == "continuous_usage").all()
    decode = [n for t in f["chunk_tokens"] for n in list(t)[1:]]
    # the chunks are the steps (a virtual client reads every step), and the emulated model accepts
    # no draft past its own end of sequence: requests that ended by themselves accept nothing past
    # the end, so the engine's counter is the stream's own count, tokens beyond one a chunk
    assert (f["finish_reason"] == "stop").all()  # synthetic chat: every answer ends by itself
    rec = s["acceptance_client"]["reconciliation"]
    assert rec["server_counter"] == sum(n - 1 for n in decode) and rec["past_end"]["tokens"] == 0
    assert rec["coalesced"]["tokens"] == 0 and rec["stream"]["coalesced_steps"] == 0
    assert s["server"]["generation_tokens"] == f["completion_tokens"].sum()
    # client-side and server-side acceptance agree (tokens per decode chunk vs mean length)
    assert s["tokens_per_chunk_mean"] == pytest.approx(s["spec_decode"]["mean_acceptance_length"], rel=0.02)


def test_same_seed_same_simulation(tmp_path):
    a, fa = _simulate(tmp_path / "a", "--rate", "20", "--num-requests", "200", "--speculative-config", EAGLE)
    b, fb = _simulate(tmp_path / "b", "--rate", "20", "--num-requests", "200", "--speculative-config", EAGLE)
    assert a["ttft_ms"] == b["ttft_ms"] and a["tpot_ms"] == b["tpot_ms"]
    assert fa["chunk_tokens"].map(list).tolist() == fb["chunk_tokens"].map(list).tolist()


def test_speculation_pays_at_low_load_and_less_at_high_load(tmp_path):
    """The study's central phenomenon, out of the cost model: speedup falls as load rises."""

    def throughput(spec: str | None, c: int) -> float:
        out = tmp_path / f"{bool(spec)}-{c}"
        args = [
            "--concurrency",
            str(c),
            "--num-requests",
            str(4 * c),
            "--workload",
            "synthetic:chat",
            "--output-len",
            "256",
        ]
        s, _ = _simulate(out, *args, *(["--speculative-config", spec] if spec else []))
        return s["output_throughput_tok_s"]

    low = throughput(EAGLE3, 1) / throughput(None, 1)  # the study's traces' head on chat
    high = throughput(EAGLE3, 128) / throughput(None, 128)
    assert low > 1.5 and high < low - 0.2


@pytest.mark.timing
def test_virtual_time_matches_the_real_time_emulator(tmp_path):
    """One engine, two clocks: at low load the real-time emulator behind HTTP and the simulator
    give the same per-token timings."""
    args = ["--concurrency", "4", "--num-requests", "24", "--output-len", "64", "--seed", "3"]
    with emulator_server(LLAMA, "--speculative-config", EAGLE, "--seed", "3") as srv:
        res = run_cli("run", "--base-url", srv.url, *args, "--quiet", "--output", str(tmp_path / "real"))
        assert res.returncode == 0, res.stderr
    real = json.loads((tmp_path / "real" / "summary.json").read_text())
    sim, _ = _simulate(tmp_path / "sim", *args, "--speculative-config", EAGLE)  # the same seed: same requests
    assert real["tpot_ms"]["mean"] == pytest.approx(sim["tpot_ms"]["mean"], rel=0.10)
    assert real["tokens_per_chunk_mean"] == pytest.approx(sim["tokens_per_chunk_mean"], rel=0.05)


def test_refused_requests_are_recorded_and_time_moves_on(tmp_path):
    """Every request too long for the model: each is a recorded 400, and a duration-bounded
    closed loop still ends."""
    res = run_cli(
        "simulate",
        "--profile",
        "h100-llama-3-70b-tp4",
        "--concurrency",
        "2",
        "--duration",
        "0.05",
        "--output-len",
        "9000",
        "--output",
        str(tmp_path),
    )
    assert res.returncode == 1  # nothing succeeded
    f = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(f) > 10 and set(f["error_type"]) == {"http_400"}
    assert "maximum context length" in f["error_message"].iloc[0]
