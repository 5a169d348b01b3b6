"""The closed loop loads every user: each is dealt its first request before any takes a second
(loadgen.executors.closed_loop.Users, which the simulator follows too), and the summary says how
many requests were ever in flight at once (`sending.in_flight_max`, docs/metrics.md), flagging a
closed loop that never had all its users in flight (`sending.short`)."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.executors.closed_loop import Users
from loadgen.measures.frame import request_frame
from loadgen.measures.summary import in_flight_at_most, summarize
from loadgen.shapes import LoadShape
from loadgen.simulate.virtual import SimSpec, simulate
from workloads import open_workload

pytestmark = pytest.mark.unit


def test_every_user_is_dealt_its_first_before_any_user_takes_a_second():
    items = iter(range(12))
    users = Users(lambda: next(items, None), range(8))
    assert [users.next(k) for k in (7, 0, 3)] == [7, 0, 3]  # by number, whoever starts first
    users.sent(3)  # user 3 sent its first: it takes the next, prepared while that one is in flight
    users.sent(0)
    assert users.next(3) == 8 and users.next(0) == 9
    assert [users.next(k) for k in (1, 2, 4, 5, 6)] == [1, 2, 4, 5, 6]


def test_fewer_requests_than_users_leave_the_last_users_none():
    items = iter(range(3))
    users = Users(lambda: next(items, None), range(5))
    assert [users.next(k) for k in range(5)] == [0, 1, 2, None, None]


@pytest.mark.parametrize(
    "sends,ends,most",
    [
        ([1, 2, 3], [10, 10, 10], 3),
        ([1, 5, 9], [5, 9, 12], 1),  # each sent as the one before ended: never two at once
        ([1, 2, 6], [4, 7, 8], 2),
        ([1, 2, 0], [3, 4, 0], 2),  # one never sent
        ([1, 2], [3, 0], 2),  # one never ended: in flight to the end
    ],
)
def test_the_most_in_flight_worked_by_hand(sends, ends, most):
    assert in_flight_at_most(np.array(sends, np.int64), np.array(ends, np.int64)) == most


def _simulated(users: int, requests: int) -> dict:
    sim = SimSpec("h100-llama-3.1-8b", None, LoadShape(concurrency=users), num_requests=requests, seed=3)
    result = simulate(sim, open_workload("chat").requests(None, 3))
    config = {"clock": {"t0_ns": result.run.t0_ns}, "load": sim.load.describe()}
    return summarize(request_frame(result.run.records), ([], []), config=config)["sending"]


def test_a_simulated_closed_loop_of_8_users_and_8_requests_has_8_in_flight():
    sending = _simulated(8, 8)
    assert sending["in_flight_max"] == 8 and sending["in_flight_bound"] == 8 and not sending["short"]


def test_a_closed_loop_with_fewer_requests_than_users_is_flagged_short():
    sending = _simulated(8, 5)
    assert sending["in_flight_max"] == 5 and sending["short"]
