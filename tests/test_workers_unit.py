"""test_workers.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pytest

from loadgen.client.record import RequestRecord
from loadgen.measures.frame import request_frame
from loadgen.measures.summary import summarize
from tests.test_workers import _rec

pytestmark = pytest.mark.unit


def test_each_chunk_is_judged_by_its_own_workers_loop():
    """Worker 1's loop lagged 30 ms around t=100 ms while worker 0's ran on time; worker 0's
    chunks at that moment were timed by a healthy loop and must not be charged worker 1's lag."""
    ms = 1_000_000
    times = [t * ms for t in range(90, 111)]
    frame = request_frame([_rec(0, 0, times)])
    ticks_at = [t * ms for t in range(80, 130, 10)] * 2
    ticks_lag = [0] * 5 + [0, 0, 30 * ms, 0, 0]
    who = [0] * 5 + [1] * 5

    def self_check(frame, at, lag, threshold_ms, timing_threshold_ms, lag_worker=None):
        ticks = (at, lag) if lag_worker is None else (at, lag, lag_worker)
        return summarize(
            frame,
            ticks,
            config={"clock": {"t0_ns": 0}},
            lateness_threshold_ms=threshold_ms,
            timing_threshold_ms=timing_threshold_ms,
        )["self_check"]

    ok = self_check(frame, ticks_at, ticks_lag, 5.0, 4.0, lag_worker=who)
    assert ok["chunk_lag_ms"]["max"] == 0 and not ok["workers"][0]["client_bound"]
    # matched to the other worker's loop, the same chunks would be charged 30 ms
    wrong = self_check(frame, ticks_at[5:], ticks_lag[5:], 5.0, 4.0)  # matched to worker 1's loop
    assert wrong["chunk_lag_ms"]["max"] == 30
    assert ok["client_bound"]  # worker 1's loop lag itself still flags the run (per tick)
    assert ok["workers"][1]["client_bound"] and ok["workers"][1]["chunk_lag_ms"]["count"] == 0


def test_an_actors_times_are_moved_onto_the_drivers_clock():
    """loadgen.backends.ray_workers.shift: every timestamp of a run on another host moves by the clocks'
    difference; durations (what latencies are made of) do not change."""
    from loadgen.backends.ray_workers import shift
    from loadgen.load.execute import RunResult

    rec = _rec(0, 1, [1_000, 1_500, 2_500])
    result = RunResult([rec], [900, 2_000], [0, 5], 0, 0.0, load_info={"first_sends_ns": [990, 990]})
    shift(result, 10_000)
    assert rec.t_send_ns == 10_990 and rec.t_scheduled_ns == 10_990 and rec.t_end_ns == 12_500
    assert list(rec.chunk_t_ns) == [11_000, 11_500, 12_500]
    assert list(result.loop_lag_at_ns) == [10_900, 12_000] and list(result.loop_lag_ns) == [0, 5]
    assert result.load_info["first_sends_ns"] == [10_990, 10_990]


def test_an_actors_journal_batches_are_moved_as_its_records_are():
    """What a Ray actor relays as it goes (journal batches, their chunk times delta-encoded) is
    moved onto the driver's clock to the same times its records would be (shift_batch)."""
    import copy

    from loadgen.backends.ray_workers import shift, shift_batch
    from loadgen.client.columnar import decoded, records_batch, records_of
    from loadgen.load.execute import RunResult

    recs = [_rec(i, 1 + i, [1_000 + i, 1_500 + 2 * i, 2_500 + 3 * i][: 3 - i % 2]) for i in range(5)]
    recs.append(RequestRecord(5, "r5", False, 0, error_type="cancelled"))  # never sent: its zero times stay
    batch = records_batch(copy.deepcopy(recs)).slice(1)  # a slice: offsets not from 0
    moved = records_of(decoded(shift_batch(batch, 10_000)))
    expect = shift(RunResult(copy.deepcopy(recs[1:]), [], [], 0, 0.0), 10_000).records
    assert moved == expect and moved[-1].t_send_ns == 0
