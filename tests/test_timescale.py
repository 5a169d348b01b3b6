"""Time dilation: the emulated GPU run S times slower than its model, every figure converted back
into its own time. Every ratio and every reported latency is the same at any S (pinned in
virtual time, where nothing else differs); the real-time emulator and client do it end to end;
`--time-scale auto` chooses S per load level from what this machine holds; bad input is one line."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from array import array

import pytest

from loadgen.client.record import RequestRecord
from loadgen.load import timescale
from loadgen.load.execute import LoadShape, RunResult
from loadgen.load.scrape import Snapshot, Window
from loadgen.measures.frame import request_frame
from loadgen.measures.summary import summarize
from loadgen.planning.probe import LevelCost, choose, describe
from loadgen.simulate.virtual import SimSpec, simulate
from servers.embedded import emulator_server
from servers.emulator.spec import parse
from servers.emulator.timeline import Timeline
from tests.conftest import cli, run_cli
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


@pytest.mark.parametrize("workload", ["chat,output=fixed:64", "code-edit,output=fixed:64"])
def test_a_cell_reads_the_same_at_any_time_scale(workload):
    """The acceptance line: the same cell at S = 1 and S = 4 gives the same speedup and the same
    TTFT and TPOT in emulated time; unconverted, S = 4 really ran four times slower."""
    at = {
        s: {v: _cell(spec, s, workload=workload) for v, spec in (("none", None), ("eagle", EAGLE), ("ngram", NGRAM))}
        for s in (1.0, 4.0)
    }
    for v in ("eagle", "ngram"):
        speedups = [at[s][v]["output_throughput_tok_s"] / at[s]["none"]["output_throughput_tok_s"] for s in at]
        assert speedups[0] == pytest.approx(speedups[1], rel=1e-6) and speedups[0] > 1.1
    for v in at[1.0]:
        one, four = at[1.0][v], at[4.0][v]
        assert four["time_scale"] == 4.0 and one["time_scale"] == 1.0
        for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            for q in ("mean", "p50", "p99"):
                assert four[metric][q] == pytest.approx(one[metric][q], abs=1e-4), (v, metric, q)
        assert four["sending"]["ramp_s"] == pytest.approx(one["sending"]["ramp_s"], abs=1e-9)
    raw = _cell(None, 4.0, workload=workload, convert=False)
    assert raw["tpot_ms"]["p50"] == pytest.approx(4 * at[1.0]["none"]["tpot_ms"]["p50"], rel=1e-6)
    assert raw["output_throughput_tok_s"] == pytest.approx(at[1.0]["none"]["output_throughput_tok_s"] / 4, rel=1e-6)


def test_every_timestamp_of_a_run_is_converted_once():
    t0 = 10_000_000_000
    rec = RequestRecord(
        0,
        "r",
        False,
        t_scheduled_ns=t0 + 4_000,
        queue_delay_ns=400,
        t_call_ns=t0 + 4_400,
        t_send_ns=t0 + 4_800,
        t_headers_ns=0,
        t_end_ns=t0 + 40_000,
    )
    rec.chunk_t_ns = array("q", [t0 + 8_000, t0 + 20_000])
    window = Window(Snapshot(t0 / 1e9 - 1.0, {}), Snapshot(t0 / 1e9 + 3.0, {}), [Snapshot(t0 / 1e9 + 1.0, {})])
    result = RunResult(
        [rec],
        [t0 + 10_000],
        [2_000],
        t0,
        0.0,
        load_info={"ramp_s": 0.4, "first_sends_ns": [t0, t0 + 8]},
        server_window=window,
    )
    timescale.to_emulated(result, 4.0)
    assert (rec.t_scheduled_ns, rec.t_call_ns, rec.t_send_ns, rec.t_end_ns) == (
        t0 + 1_000,
        t0 + 1_100,
        t0 + 1_200,
        t0 + 10_000,
    )
    assert rec.t_headers_ns == 0 and rec.queue_delay_ns == 100  # never happened stays never
    assert list(rec.chunk_t_ns) == [t0 + 2_000, t0 + 5_000]
    assert result.loop_lag_at_ns == [t0 + 2_500] and result.loop_lag_ns == [500]
    assert result.load_info == {"ramp_s": 0.1, "first_sends_ns": [t0, t0 + 2]}
    w = result.server_window
    assert (w.before.t, w.during[0].t, w.after.t) == pytest.approx((t0 / 1e9 - 0.25, t0 / 1e9 + 0.25, t0 / 1e9 + 0.75))
    assert result.time_scale == 4.0
    timescale.to_emulated(result, 4.0)  # a second conversion changes nothing
    assert list(rec.chunk_t_ns) == [t0 + 2_000, t0 + 5_000]


def test_the_timeline_rescales_without_a_jump():
    line = Timeline(2.0, at=100.0)
    assert line.modeled(104.0) == 102.0 and line.real(102.0) == 104.0
    line.rescale(4.0, at_real=104.0)
    assert line.modeled(104.0) == 102.0 and line.modeled(108.0) == 103.0 and line.real(103.0) == 108.0
    with pytest.raises(ValueError):
        Timeline(0.0)


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


def test_auto_chooses_the_smallest_scale_each_level_needs_and_never_less_than_below():
    costs = [
        _level(64, 0.9, 1.6, steps=400),  # the client busy 1.6 CPU s per emulated s: 3.2x at 50%
        _level(64, 1.9, 0.5, steps=400, variant="ngram"),  # the emulator busy: 3.8x
        _level(32, 0.1, 0.1, late=0.0105),  # the client's send lateness p99 10.5 ms (real): 2.1x
        _level(16, 0.3, 0.1),  # 3 ms of emulator work per step: 1.5x
        _level(8, 0.05, 0.05, lag=0.0045),  # the client's loop lag p99 4.5 ms (real): 1.8x
        _level(4, 0.05, 0.05),
    ]  # nothing: needs 0.25x, the levels below it are not probed
    chosen = choose(costs, levels=[1, 2, 4, 8, 16, 32, 64])
    assert chosen == {"c1": 1.0, "c2": 1.0, "c4": 1.0, "c8": 2.0, "c16": 2.0, "c32": 2.5, "c64": 4.0}
    assert costs[1].why.startswith("emulator busy: ngram") and costs[0].why == ""  # ngram decided c64
    assert costs[2].why.startswith("client send lateness") and costs[3].why.startswith("emulator work per step")
    assert costs[4].why.startswith("client loop lag")
    costs[4].needed = 3.0  # measured again at a larger scale: it needed that much
    assert choose(costs, levels=[8, 16, 32, 64])["c8"] == 3.0
    assert describe(chosen) == "c1-c4 1x, c8-c16 2x, c32 2.5x, c64 4x"
    assert choose(costs, busy=0.25)["c64"] == 8.0  # two servers side by side: each gets half as much


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


@pytest.mark.parametrize(
    "args,expect",
    [
        (
            ["run", "--base-url", "http://127.0.0.1:9", "--concurrency", "1", "--time-scale", "2"],
            "a server at --base-url keeps its own time",
        ),
        (["run", "--concurrency", "1", "--time-scale", "0"], "--time-scale '0': give a number > 0"),
        (["run", "--concurrency", "1", "--time-scale", "fast"], "--time-scale 'fast': give a number > 0"),
        (
            ["sweep", "--servers", "llama-3.1-8b", "--engine", "vllm", "--time-scale", "2", "--dry-run"],
            "runs on vllm, whose hardware keeps its own time",
        ),
        (["sweep", "--time-scale", "-1", "--dry-run"], "give a number > 0 or auto"),
        (
            [
                "check",
                "--servers",
                "llama-3.1-8b",
                "--variant",
                "baseline",
                "--engine",
                "vllm",
                "--concurrency",
                "1",
                "--time-scale",
                "2",
                "--slo",
                "ttft_p99<=1s",
            ],
            "runs on vllm, whose hardware keeps its own time",
        ),
        (
            ["capacity", "--servers", "llama-3.1-8b", "--engine", "vllm", "--time-scale", "2", "--slo", "ttft_p99<=1s"],
            "runs on vllm, whose hardware keeps its own time",
        ),
    ],
)
def test_bad_time_scales_are_one_line(tmp_path, args, expect):
    res = cli(*args, "--output", str(tmp_path / "out"))
    assert res.returncode == 2, res.stderr
    err = [line for line in res.stderr.strip().splitlines() if line.strip()]
    assert any(expect in line for line in err), res.stderr
    assert "Traceback" not in res.stderr


def test_the_sweep_plan_says_its_time_scale(tmp_path):
    res = cli("sweep", "--dry-run")
    assert res.returncode == 0 and "time scale: auto" in res.stdout
    res = cli("sweep", "--time-scale", "2.5", "--dry-run")
    assert res.returncode == 0 and "time scale: 2.5x" in res.stdout
    assert math.isclose(2.5, float(res.stdout.split("time scale: ")[1].split("x")[0]))


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
