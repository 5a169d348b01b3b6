"""Load shapes as a family (loadgen.shapes): each shape's schedule against its definition, the
family's interface for every member, the ramp from the command line, and the ramp in real time
against the emulator beside the same ramp in virtual time."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from loadgen.shapes import REGISTRY, ClosedLoop, LoadShape, OpenLoop, Ramp, TraceReplay, label_of, parse_ramp
from tests.conftest import cli

pytestmark = pytest.mark.unit

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def test_every_registered_shape_speaks_the_interface():
    members = [
        ClosedLoop(4),
        OpenLoop(2.5, "gamma", 0.5, 8),
        Ramp("users", 1, 8, 10.0),
        Ramp("rate", 1.0, 5.0, 10.0, "constant"),
        TraceReplay(tuple(3.0 + 0.5 * i for i in range(60)), 2.0, "azure:trace.csv", 3.0),
    ]
    assert {type(m).mode for m in members} == set(REGISTRY)
    for shape in members:
        described = shape.describe()
        assert described["mode"] == shape.mode and REGISTRY[described["mode"]] is type(shape)
        assert json.loads(json.dumps(described)) == described  # plain data
        assert label_of(described) and "\n" not in label_of(described)
        assert shape.level()
        if shape.closed:
            joins = shape.join_s(0.001)
            assert len(joins) == shape.concurrency == shape.max_in_flight and joins == sorted(joins)
        else:
            offsets = shape.arrivals_s(num=50, duration_s=None, seed=1)
            assert len(offsets) == 50 and offsets[0] == 0 and np.all(np.diff(offsets) >= 0)
            assert np.array_equal(offsets, shape.arrivals_s(num=50, duration_s=None, seed=1))


def test_the_steady_shapes_keep_their_records():
    assert LoadShape(concurrency=3).describe() == {
        "mode": "closed",
        "concurrency": 3,
        "rate": None,
        "arrival": None,
        "burstiness": None,
        "max_concurrency": None,
    }
    assert LoadShape(rate=2.0, arrival="gamma", burstiness=0.5, max_concurrency=4).describe() == {
        "mode": "open",
        "concurrency": None,
        "rate": 2.0,
        "arrival": "gamma",
        "burstiness": 0.5,
        "max_concurrency": 4,
    }
    assert label_of(LoadShape(rate=2.0).describe()) == "open loop, poisson 2 req/s"
    for bad, message in (
        ({}, "exactly one"),
        ({"concurrency": 0}, "concurrency must be >= 1"),
        ({"rate": -1.0}, "rate must be > 0"),
        ({"rate": 1.0, "burstiness": 0.0}, "burstiness"),
        ({"rate": 1.0, "arrival": "uniform"}, "unknown arrival process"),
    ):
        with pytest.raises(ValueError, match=message):
            LoadShape(**bad)


def test_a_users_ramp_joins_each_user_when_the_line_reaches_it():
    """c(t) = A + (B - A) t / S: user k (k >= A) joins when c reaches k + 1; the first A at
    once, a join gap apart."""
    ramp = Ramp("users", 2, 10, 16.0)
    joins = ramp.join_s(0.001)
    assert joins[:2] == [0.0, 0.001]
    for k in range(2, 10):
        assert joins[k] == pytest.approx(16.0 * (k + 1 - 2) / 8)
    assert joins[-1] == pytest.approx(16.0)  # the last user joins as the ramp ends
    assert Ramp("users", 0, 4, 8.0).join_s(0.0) == [2.0, 4.0, 6.0, 8.0]


@pytest.mark.parametrize("start,end", [(0.0, 20.0), (2.0, 10.0), (10.0, 2.0), (5.0, 5.0)])
def test_a_constant_rate_ramp_sends_each_time_the_expected_count_passes_a_whole_number(start, end):
    ramp = Ramp("rate", start, end, 10.0, "constant")
    t = ramp.arrivals_s(num=None, duration_s=15.0, seed=0)
    expected = ramp.expected(t)
    assert expected == pytest.approx(np.arange(len(t)), abs=1e-9)
    # the whole count to 15 s: the area under the line to 10 s, then `end` per second
    assert len(t) == int(np.ceil(10.0 * (start + end) / 2 + 5 * end - 1e-9))
    rate_then = 1 / np.diff(t)  # the instantaneous rate follows the line
    mid = (t[1:] + t[:-1]) / 2
    line = np.where(mid < 10, start + (end - start) * mid / 10, end)
    assert rate_then == pytest.approx(line, rel=0.05, abs=0.3)


def test_a_poisson_rate_ramp_has_the_expected_count_in_every_window():
    ramp = Ramp("rate", 0.0, 200.0, 20.0)  # 2,000 requests over the ramp, then 200/s
    t = ramp.arrivals_s(num=None, duration_s=30.0, seed=4)
    edges = np.arange(0.0, 30.0 + 1e-9, 2.5)
    counts, _ = np.histogram(t, edges)
    want = np.diff(ramp.expected(edges))
    assert np.all(np.abs(counts - want) <= 4 * np.sqrt(want) + 1), list(zip(counts, want.round(1)))
    assert t[0] == 0 and np.all(t < 30.0)
    first_50 = ramp.arrivals_s(num=50, duration_s=None, seed=4)
    assert np.array_equal(first_50, t[:50])  # a count bound takes the same schedule's start


@pytest.mark.parametrize(
    "text,fields",
    [
        ("1:32:60", {"of": "users", "start": 1, "end": 32, "over_s": 60.0}),
        ("users:4:8:2.5", {"of": "users", "start": 4, "end": 8, "over_s": 2.5}),
        ("rate:0.5:20:60", {"of": "rate", "start": 0.5, "end": 20.0, "over_s": 60.0}),
    ],
)
def test_ramp_text(text, fields):
    assert parse_ramp(text) == fields


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--ramp", "1:32"], "--ramp '1:32': give [users:|rate:]START:END:SECONDS"),
        (["--ramp", "1:x:60"], "not numbers"),
        (["--ramp", "1.5:4:10"], "users are whole numbers"),
        (["--ramp", "8:2:10"], "users never leave"),
        (["--ramp", "1:8:0"], "ramp seconds must be > 0"),
        (["--ramp", "1:8:10", "--concurrency", "4"], "--ramp is a load of its own"),
        (["--ramp", "1:8:10", "--arrival", "constant"], "apply to a rate ramp"),
        (["--ramp", "rate:1:-2:10"], "ramp end rate must be > 0"),
    ],
)
def test_bad_ramps_are_one_line(tmp_path, args, expect):
    res = cli("simulate", "--profile", "h100-llama-3.1-8b", *args, "--output", str(tmp_path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert expect in res.stderr.strip().splitlines()[-1], res.stderr


def _tokens_per_window(out, window_s: float) -> tuple[np.ndarray, dict]:
    """Output tokens per window from the first send, and the summary."""
    summary = json.loads((out / "summary.json").read_text())
    frame = pd.read_parquet(out / "requests.parquet")
    t0 = frame["t_send_ns"].min()
    t = np.concatenate([np.asarray(x, dtype=np.int64) for x in frame["chunk_t_ns"]])
    n = np.concatenate([np.asarray(x) for x in frame["chunk_tokens"]])
    bins = ((t - t0) / 1e9 // window_s).astype(int)
    return np.bincount(bins, weights=n), summary
