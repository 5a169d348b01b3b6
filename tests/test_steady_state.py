"""--steady-state: the ramp-up and the drain left out of the figures by one stated rule, and the
summary saying which requests count (docs/metrics.md)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.servers


def _simulate(tmp_path, *args):
    res = run_cli("simulate", "--profile", "h100-llama-3.1-8b", "--seed", "2", "--output", str(tmp_path), *args)
    assert res.returncode == 0, res.stderr
    return res, json.loads((tmp_path / "summary.json").read_text()), pd.read_parquet(tmp_path / "requests.parquet")


def test_a_ramp_and_its_drain_are_left_out(tmp_path):
    args = ["--ramp", "1:32:4", "--duration", "12", "--workload", "synthetic:random,input_len=128,output_len=128"]
    res, s, frame = _simulate(tmp_path / "steady", *args, "--steady-state")
    st = s["steady_state"]
    assert st["found"] and st["rule"].startswith("requests sent once the requests in flight")
    t0 = s["config"]["clock"]["t0_ns"]
    start, end = t0 + st["start_s"] * 1e9, t0 + st["end_s"] * 1e9
    counted = frame[frame["ok"] & (frame["t_send_ns"] >= start - 1) & (frame["t_end_ns"] <= end + 1)]
    assert st["requests"] == len(counted) == s["completed"] == s["ttft_ms"]["count"]
    assert st["left_out_ramp"] > 0 and st["left_out_drain"] > 0
    assert st["requests"] + st["left_out_ramp"] + st["left_out_drain"] == int(frame["ok"].sum())
    assert st["start_s"] > 3.0  # the ramp reaches its 32 users at 4 s, after which the level holds
    assert s["window"]["kind"] == "steady_state" and s["window"]["duration_s"] == pytest.approx(
        st["end_s"] - st["start_s"]
    )
    assert f"Steady state: {st['requests']} requests count" in res.stdout
    _, plain, _ = _simulate(tmp_path / "plain", *args)
    assert plain["steady_state"] is None and plain["completed"] == int(frame["ok"].sum())
    # the ramp's early requests ran at low load: without them TPOT is the loaded one, higher
    assert s["tpot_ms"]["p50"] > plain["tpot_ms"]["p50"]


def test_a_run_too_short_for_a_steady_state_says_so(tmp_path):
    _, s, _ = _simulate(tmp_path, "--rate", "1000", "--num-requests", "4", "--steady-state")  # all sent at once
    assert s["steady_state"]["found"] is False and "too short" in s["steady_state"]["note"]
    assert s["completed"] == 4
