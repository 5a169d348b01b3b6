"""The run over time (docs/metrics.md, "Over time"): the server's /metrics sampled every second
through the window, each counter's increases per interval adding up to the window's own delta
exactly, the gauges beside the client's count in flight; a burst in a replayed trace shows as a
rise in running requests; the report draws it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import cli, run_cli

pytestmark = pytest.mark.servers


def _burst_trace(path) -> None:
    """Two requests a second for 4 s, short answers, and 32 long ones at once at 1.5 s."""
    rows = [{"t": i * 0.5, "in": 100, "out": 40} for i in range(8)]
    rows += [{"t": 1.5 + i * 0.002, "in": 100, "out": 450} for i in range(32)]
    rows.sort(key=lambda r: r["t"])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_runs_timeline_adds_up_and_shows_a_burst(tmp_path):
    trace, out = tmp_path / "burst.jsonl", tmp_path / "run"
    _burst_trace(trace)
    res = run_cli(
        *("run", "--trace", f"jsonl:{trace},time=t,input=in,output=out,unit=s", "--workload", "chat"),
        *("--metrics-interval", "0.5", "--quiet", "--output", str(out)),
    )
    assert res.returncode == 0, res.stderr
    s = json.loads((out / "summary.json").read_text())
    tl, sd, server = s["timeline"], s["spec_decode"], s["server"]
    n = len(tl["t_s"])
    assert n >= 8 and np.allclose(np.cumsum(tl["dt_s"]), tl["t_s"])
    assert np.allclose(tl["dt_s"][:-1], 0.5, atol=0.15)  # a sample each --metrics-interval (the last: to the end)
    # each interval's increases add up to the window's counter deltas, exactly
    assert sum(tl["generation_tokens"]) == server["generation_tokens"]
    assert sum(tl["prompt_tokens"]) == server["prompt_tokens"]
    assert sum(tl["drafts"]) == sd["drafts"] and sum(tl["draft_tokens"]) == sd["draft_tokens"]
    assert sum(tl["accepted_tokens"]) == sd["accepted_tokens"]
    per_pos = np.sum(tl["accepted_per_position"], axis=0)
    assert np.allclose(per_pos / sd["drafts"], sd["per_position"])
    frame = pd.read_parquet(out / "requests.parquet", columns=["ok"])
    assert sum(tl["client"]["completions"]) <= len(frame) and sum(tl["client"]["sends"]) <= len(frame)
    # the burst: running requests rise from a handful to the burst's size, and the client's own
    # count in flight rises with them
    running = np.asarray(tl["running"], float)
    peak = int(np.argmax(running))
    assert running[0] <= 3 and running[peak] >= 25, running
    in_flight = np.asarray(tl["client"]["in_flight"], float)
    rise = (int(np.argmax(running >= 25)), int(np.argmax(in_flight >= 20)))  # the first interval past each
    assert in_flight.max() >= 20 and abs(rise[0] - rise[1]) <= 1 and in_flight[0] <= 3, (running, in_flight)
    assert all(1.0 <= a <= 4.0 for a in tl["acceptance_length"] if a is not None)  # EAGLE k=3

    res = cli("report", str(out))
    assert res.returncode == 0, res.stderr
    html = (out / "report" / "report.html").read_text()
    assert 'id="timeline-chart"' in html and 'id="batch-scatter"' in html
    table = pd.read_csv(out / "report" / "timeline.csv")
    assert len(table) == n and table["running"].max() == running.max()
    for args, says in (
        (("run", "--concurrency", "1", "--metrics-url", "none", "--metrics-interval", "2"), "spaces the samples"),
        (("run", "--concurrency", "1", "--metrics-interval", "0"), "--metrics-interval"),
        (("sweep", "--virtual", "--metrics-interval", "2"), "--metrics-interval does not apply to --virtual"),
    ):
        res = cli(*args, "--output", str(tmp_path / "bad"))
        assert res.returncode == 2 and says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
