"""Open-loop runs: the rate is delivered, client-side queueing is visible, schedules repeat."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import assert_light_load_unflagged, judged_late, run_cli

pytestmark = [
    pytest.mark.servers,
    pytest.mark.timing,
]  # send lateness and rates in real time: runs alone (tests/conftest.py)


def _load(out) -> tuple[dict, pd.DataFrame]:
    return json.loads((out / "summary.json").read_text()), pd.read_parquet(out / "requests.parquet")


def test_constant_rate_is_delivered_on_time(server, tmp_path):
    url = server("--ttft-ms", "5", "--step-ms", "5")
    res = run_cli(
        "run",
        "--base-url",
        url,
        "--rate",
        "40",
        "--arrival",
        "constant",
        "--num-requests",
        "80",
        "--output-len",
        "8",
        "--quiet",
        "--output",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    s, f = _load(tmp_path)
    assert s["sending"]["send_rate_req_s"] == pytest.approx(40, rel=0.05)
    # on time: half of them well inside the self-check's bound, the slowest inside it too, or
    # the run says otherwise (a machine too slow to send on time must not pass for one that is)
    late = s["self_check"]["lateness_ms"]
    assert late["p50"] < 2.5, late
    if judged_late(s):
        assert_light_load_unflagged(tmp_path)  # a client that flags every run does not pass
    assert (f["queue_delay_ms"] == 0).all()


def test_concurrency_cap_queueing_is_measured_not_hidden(server, tmp_path):
    # each request takes ~100 ms; 2 slots carry ~20 req/s; 50 req/s are offered
    url = server("--ttft-ms", "10", "--step-ms", "10", "--chunk-tokens", "1")
    res = run_cli(
        "run",
        "--base-url",
        url,
        "--rate",
        "50",
        "--arrival",
        "constant",
        "--max-concurrency",
        "2",
        "--num-requests",
        "40",
        "--output-len",
        "10",
        "--quiet",
        "--output",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    s, f = _load(tmp_path)
    assert s["completed"] == 40
    assert f["queue_delay_ms"].iloc[-10:].min() > 100  # late requests waited for a slot
    assert s["self_check"]["lateness_ms"]["p99"] < 5  # waiting for a slot is not lateness
    # the wait is part of what a user sees (from the scheduled time), not of the server's TTFT
    assert s["ttft_from_scheduled_ms"]["p50"] > s["ttft_ms"]["p50"] + 100
    assert s["ttft_ms"]["p99"] < 30


def test_same_seed_same_schedule(server, tmp_path):
    url = server("--ttft-ms", "2", "--step-ms", "2")
    offsets = []
    for i in range(2):
        out = tmp_path / str(i)
        res = run_cli(
            "run",
            "--base-url",
            url,
            "--rate",
            "100",
            "--burstiness",
            "0.5",
            "--num-requests",
            "40",
            "--output-len",
            "4",
            "--seed",
            "11",
            "--quiet",
            "--output",
            str(out),
        )
        assert res.returncode == 0, res.stderr
        s, f = _load(out)
        offsets.append((f["t_scheduled_ns"] - s["config"]["clock"]["t0_ns"]).to_numpy())
    assert np.array_equal(offsets[0], offsets[1])


def test_duration_bounds_the_sending(server, tmp_path):
    url = server("--ttft-ms", "2", "--step-ms", "2")
    res = run_cli(
        "run",
        "--base-url",
        url,
        "--rate",
        "30",
        "--duration",
        "2",
        "--output-len",
        "4",
        "--quiet",
        "--output",
        str(tmp_path),
    )
    assert res.returncode == 0, res.stderr
    s, f = _load(tmp_path)
    sent_at = (f["t_scheduled_ns"] - s["config"]["clock"]["t0_ns"]) / 1e9
    assert sent_at.max() < 2.0
    assert 30 <= len(f) <= 90  # Poisson count for 60 expected
