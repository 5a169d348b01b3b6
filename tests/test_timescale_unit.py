"""test_timescale.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import math
from array import array

import pytest

from loadgen.client.record import RequestRecord
from loadgen.load import timescale
from loadgen.load.execute import RunResult
from loadgen.load.scrape import Snapshot, Window
from loadgen.planning.probe import choose, describe
from servers.emulator.timeline import Timeline
from tests.conftest import cli
from tests.test_timescale import EAGLE, NGRAM, _cell, _level

pytestmark = pytest.mark.unit


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
