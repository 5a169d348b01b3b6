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


def test_a_long_runs_timeline_is_coarsened_in_the_summary_and_kept_whole_beside_it(tmp_path):
    """Over an hour of samples, summary.json keeps at most 3600 intervals, consecutive ones merged
    with every sum unchanged and gauges as time-weighted means; timeline.parquet has them all."""

    from bench.timeline_size import day
    from loadgen.measures import timeline
    from loadgen.results import store

    n = 3 * timeline.MOST + 5  # 4 intervals merged a bin; the last bin is short
    tl = day(n)
    store.write_summary(tmp_path, {"timeline": tl})
    kept = json.loads((tmp_path / "summary.json").read_text())["timeline"]
    assert len(kept["t_s"]) == -(-n // 4) and kept["coarsened"] == {
        "intervals": n,
        "merged": 4,
        "full": "timeline.parquet",
    }
    assert kept["t_s"][-1] == tl["t_s"][-1] and kept["t_s"][0] == tl["t_s"][3]
    for key in ("dt_s", "generation_tokens", "prompt_tokens", "drafts", "draft_tokens", "accepted_tokens"):
        assert np.isclose(sum(kept[key]), sum(tl[key]), rtol=1e-12), key
    assert (np.sum(kept["accepted_per_position"], axis=0) == np.sum(tl["accepted_per_position"], axis=0)).all()
    assert sum(kept["client"]["sends"]) == sum(tl["client"]["sends"])
    dt, run = np.asarray(tl["dt_s"][:4]), np.asarray(tl["running"][:4])
    assert np.isclose(kept["running"][0], (dt * run).sum() / dt.sum())
    assert np.isclose(kept["acceptance_length"][0], 1 + sum(tl["accepted_tokens"][:4]) / sum(tl["drafts"][:4]))
    whole = pd.read_parquet(tmp_path / "timeline.parquet")
    assert len(whole) == n and whole["generation_tokens"].tolist() == tl["generation_tokens"]
    assert whole["client_in_flight"].tolist() == tl["client"]["in_flight"]
    # an hour or less is written as it is
    (tmp_path / "short").mkdir()
    store.write_summary(tmp_path / "short", {"timeline": day(60)})
    assert "coarsened" not in json.loads((tmp_path / "short" / "summary.json").read_text())["timeline"]
    assert not (tmp_path / "short" / "timeline.parquet").exists()
