"""Time dilation: the emulated GPU run S times slower than its model, every figure converted back
into its own time. Every ratio and every reported latency is the same at any S (pinned in
virtual time, where nothing else differs); the real-time emulator and client do it end to end;
`--time-scale auto` chooses S per load level from what this machine holds; bad input is one line."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from loadgen.load import timescale
from loadgen.load.execute import LoadShape
from loadgen.measures.frame import request_frame
from loadgen.measures.summary import summarize
from loadgen.planning.probe import LevelCost
from loadgen.simulate.virtual import SimSpec, simulate
from servers.embedded import emulator_server
from servers.emulator.spec import parse
from tests.conftest import run_cli
from workloads import open_workload

pytestmark = [
    pytest.mark.servers,
    pytest.mark.timing,
]  # the probe measures this machine: runs alone (tests/conftest.py)

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE = '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'
NGRAM = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 3, "prompt_lookup_max": 7}'


def _cell(
    spec: str | None,
    scale: float,
    *,
    level: int = 8,
    n: int = 32,
    workload: str = "chat,output=fixed:64",
    convert: bool = True,
) -> dict:
    """One sweep-like cell in virtual time on the records' clock at `scale`, summarised as a run is."""
    sim = SimSpec(
        "h100-llama-3.1-8b", parse(spec), LoadShape(concurrency=level), num_requests=n, seed=2, time_scale=scale
    )
    result = simulate(sim, open_workload(workload).requests(None, 2)).run
    if convert:
        timescale.to_emulated(result, scale)
    return summarize(
        request_frame(result.records),
        result.loop_lag(),
        config={"clock": {"t0_ns": result.t0_ns}, "time_scale": result.time_scale},
        load_info=result.load_info,
    )


def _level(
    level: float,
    emulator_cpu: float,
    client_cpu: float,
    steps: float = 100,
    modeled: float = 1.0,
    lag: float = 0.0,
    late: float = 0.0,
    variant: str = "baseline",
) -> LevelCost:
    return LevelCost(level, 2.0, steps, modeled, emulator_cpu, client_cpu, lag, late, variant)


def test_the_real_time_emulator_reports_in_its_own_time(tmp_path):
    """End to end through HTTP: the embedded emulator run 3x slower, the figures converted back,
    agree with the same requests in virtual time, and the scale is recorded."""
    args = ["--concurrency", "2", "--num-requests", "6", "--output-len", "32", "--seed", "0"]  # the emulator's seed
    res = run_cli("run", "--time-scale", "3", *args, "--quiet", "--output", str(tmp_path / "real"))
    assert res.returncode == 0, res.stderr
    assert "3x slower than real time" in res.stderr
    real = json.loads((tmp_path / "real" / "summary.json").read_text())
    res = run_cli(
        "simulate",
        "--profile",
        "h100-llama-3.1-8b",
        "--speculative-config",
        EAGLE,
        *args,
        "--output",
        str(tmp_path / "sim"),
    )
    assert res.returncode == 0, res.stderr
    sim = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert real["time_scale"] == 3.0 and real["config"]["time_scale"] == 3.0
    assert real["tpot_ms"]["mean"] == pytest.approx(sim["tpot_ms"]["mean"], rel=0.05)
    assert real["output_throughput_tok_s"] == pytest.approx(sim["output_throughput_tok_s"], rel=0.05)
    srv = real["server"]
    assert srv["emulator"]["time_scales"] == [3.0] and not srv["emulator"]["behind"]
    assert srv["generation_tok_s"] == pytest.approx(real["output_throughput_tok_s"], rel=0.25)  # windows differ
    tpot = srv["histograms"]["tpot"]  # the emulator's own histogram: emulated seconds too
    assert tpot["sum"] / tpot["count"] * 1e3 == pytest.approx(real["tpot_ms"]["mean"], rel=0.05)


def test_an_emulator_started_slower_is_read_from_its_metrics(tmp_path):
    with emulator_server(LLAMA, "--time-scale", "2") as srv:
        status, body = _http(srv.url + "/emulator/clock")
        assert status == 200 and body["time_scale"] == 2.0 and body["steps"] == 0 and body["cpu_seconds"] > 0
        res = run_cli(
            "run",
            "--base-url",
            srv.url,
            "--concurrency",
            "2",
            "--num-requests",
            "4",
            "--output-len",
            "16",
            "--quiet",
            "--output",
            str(tmp_path),
        )
        assert res.returncode == 0, res.stderr
        assert "running 2x slower than its model" in res.stderr
        s = json.loads((tmp_path / "summary.json").read_text())
        assert s["time_scale"] == 2.0 and s["config"]["time_scale_requested"] is None
        assert _http(srv.url + "/emulator/clock", {"time_scale": 0.5}) == (200, {"time_scale": 0.5})
        status, body = _http(srv.url + "/emulator/clock")
        assert body["time_scale"] == 0.5 and body["steps"] > 0 and body["modeled_seconds"] > 0
        status, body = _http(srv.url + "/emulator/clock", {"time_scale": -1})
        assert status == 400 and "number > 0" in body["error"]["message"]
        status, _ = _http(srv.url + "/emulator/clock", b"{nope")
        assert status == 400


def _http(url: str, body=None) -> tuple[int, dict]:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data)) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_check_and_capacity_run_a_started_emulator_slower(tmp_path):
    res = run_cli(
        "check",
        "--servers",
        "llama-3.1-8b",
        "--variant",
        "eagle",
        "--engine",
        "emulator",
        "--concurrency",
        "2",
        "--num-requests",
        "4",
        "--output-len",
        "16",
        "--time-scale",
        "2",
        "--slo",
        "tpot_p50<=50ms",
        "--quiet",
        "--output",
        str(tmp_path / "check"),
    )
    assert res.returncode == 0, res.stderr
    s = json.loads((tmp_path / "check" / "summary.json").read_text())
    assert s["time_scale"] == 2.0 and s["server"]["emulator"]["time_scales"] == [2.0]
    assert 2 < s["tpot_ms"]["p50"] < 10  # the emulated H100's TPOT, not twice it
    res = run_cli(
        "capacity",
        "--servers",
        "llama-3.1-8b",
        "--engine",
        "emulator",
        "--variants",
        "baseline",
        "--workload",
        "chat,output=fixed:16",
        "--slo",
        "tpot_p50<=50ms",
        "--limit",
        "2",
        "--repeats",
        "1",
        "--num-requests",
        "4",
        "--warmup",
        "0",
        "--time-scale",
        "2",
        "--output",
        str(tmp_path / "cap"),
    )
    assert res.returncode == 0, res.stderr
    probes = sorted((tmp_path / "cap" / "baseline").glob("*/summary.json"))
    assert probes and all(json.loads(p.read_text())["time_scale"] == 2.0 for p in probes)
