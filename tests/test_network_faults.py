"""Faults in the network between client and server, from a TCP proxy (servers/faultproxy.py)
in front of the canned server: each is recorded per request with its type, the run completes,
nothing finished is lost; `--max-error-rate` stops a run against a server that is down, early,
with exit code 2 and its reason."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager

import pandas as pd
import pytest

from servers.embedded import canned_server, server_process
from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.servers


@contextmanager
def proxied(*fault: str):
    with (
        canned_server("--ttft-ms", "5", "--pacing-ms", "5") as srv,
        server_process(
            ["servers.faultproxy", "--upstream", srv.url, *fault], host="127.0.0.1", timeout_s=30, cpu=None
        ) as proxy,
    ):
        yield proxy.url


def _run(url: str, tmp_path, *extra: str, n: int = 12) -> tuple[pd.DataFrame, dict, object]:
    res = run_cli(
        "run",
        "--base-url",
        url,
        "--concurrency",
        "3",
        "--num-requests",
        str(n),
        "--input-len",
        "16",
        "--output-len",
        "32",
        "--no-keep-alive",
        "--metrics-url",
        "none",
        "--quiet",
        "--output",
        str(tmp_path),
        *extra,
    )
    assert "Traceback" not in res.stderr, res.stderr
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    return frame, json.loads((tmp_path / "summary.json").read_text()), res


# fault -> (proxy arguments, loadgen arguments, the error type of a faulted request or None: ok)
FAULTS = {
    "latency": (["--fault", "latency", "--ms", "60"], [], None),
    "reset": (["--fault", "reset", "--after-bytes", "700", "--every", "2"], [], "reset"),
    "stall": (["--fault", "stall", "--after-bytes", "700", "--every", "2"], ["--request-timeout", "1.5"], "timeout"),
    "drip": (["--fault", "drip", "--bytes-per-s", "3000", "--every", "2"], ["--request-timeout", "30"], None),
    "slow_drip": (["--fault", "drip", "--bytes-per-s", "300", "--every", "2"], ["--request-timeout", "1.5"], "timeout"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_network_fault_is_recorded_and_the_run_completes(fault, tmp_path):
    proxy_args, args, expected = FAULTS[fault]
    with proxied(*proxy_args) as url:
        frame, summary, res = _run(url, tmp_path, *args)
    assert res.returncode == 0, res.stderr
    assert len(frame) == 12 and frame["index"].is_unique  # every request recorded, once
    ok = frame[frame["ok"]]
    assert (ok["completion_tokens"] == 32).all()  # a finished request is whole
    if expected is None:
        assert frame["ok"].all()
    else:
        bad = frame[~frame["ok"]]
        # every 2nd new connection (the first request may reuse the model probe's connection)
        assert len(bad) in (5, 6) and set(bad["error_type"]) == {expected}, bad["error_type"].tolist()
        assert summary["errors"] == {expected: len(bad)}
    if fault == "latency":  # added latency, seen in the timings, not as an error
        assert summary["ttft_ms"]["p50"] > 60
    if fault == "drip":  # a drip slows the faulted responses down, and they complete
        slow = frame.loc[frame["e2e_ms"] > 1000]
        assert 5 <= len(slow) <= 6


def test_a_refused_connect_is_recorded_and_max_error_rate_stops_the_run(tmp_path):
    """The proxy stops listening after 8 connections (the readiness check, the model probe, then
    requests, one connection each): the later requests are refused, each recorded; with
    --max-error-rate the run stops once 20 in a row failed instead of going through 500."""
    with proxied("--fault", "refuse", "--after-connections", "8") as url:
        frame, summary, res = _run(url, tmp_path / "all", n=30)
        assert res.returncode == 0, res.stderr
        assert len(frame) == 30 and frame["index"].is_unique
        assert frame["ok"].sum() >= 5 and set(frame.loc[~frame["ok"], "error_type"]) == {"connection_refused"}
        assert summary["stopped_early"] is None
    with proxied("--fault", "refuse", "--after-connections", "4") as url:
        frame, summary, res = _run(url, tmp_path / "stopped", "--max-error-rate", "0.5", n=500)
    assert res.returncode == 2, res.stderr
    assert "over --max-error-rate 0.5" in res.stderr and "connection_refused" in res.stderr
    assert summary["stopped_early"] and not summary["interrupted"]
    assert 20 <= len(frame) < 500 and (~frame["ok"]).sum() >= 20


def test_a_bad_receive_buffer_is_one_line():
    res = subprocess.run(
        [sys.executable, "-m", "servers.faultproxy", "--upstream", "http://127.0.0.1:1", "--recv-buffer", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert res.returncode == 2 and "--recv-buffer must be at least 1 byte, got 0" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
