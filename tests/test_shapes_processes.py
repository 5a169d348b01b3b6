"""test_shapes.py's tests that start processes, apart from its tests that start none (what they test:
its docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from loadgen.shapes import Ramp
from servers.embedded import emulator_server
from tests.conftest import run_cli
from tests.test_shapes import LLAMA, _tokens_per_window

pytestmark = [pytest.mark.servers]


@pytest.mark.timing
def test_a_ramp_runs_on_the_emulator_as_the_simulator_says(tmp_path):
    """`loadgen run --ramp` against the emulator and `loadgen simulate` with the same ramp,
    requests and seed: the same throughput in every window of the ramp (within 10%), and users
    joining on the ramp's schedule. The emulator runs twice slower than its model (time
    dilation: every figure in its emulated time), so that neither it nor the client, sharing
    two cores, falls behind on a slow machine (a real-time run there would rightly be flagged
    client_bound, and prove nothing)."""
    args = ["--ramp", "1:12:6", "--duration", "7", "--workload", "chat,output=fixed:64", "--seed", "3"]
    sim = tmp_path / "sim"
    res = run_cli("simulate", "--profile", "h100-llama-3.1-8b", *args, "--output", str(sim))
    assert res.returncode == 0, res.stderr
    with emulator_server(LLAMA, "--seed", "3", "--time-scale", "2") as srv:
        real = tmp_path / "real"
        res = run_cli("run", "--base-url", srv.url, *args, "--quiet", "--output", str(real), timeout=120)
        assert res.returncode == 0, res.stderr
    window = 3.0
    got, summary = _tokens_per_window(real, window)
    want, sim_summary = _tokens_per_window(sim, window)
    assert summary["config"]["load"] == sim_summary["config"]["load"] == Ramp("users", 1, 12, 6.0).describe()
    assert summary["time_scale"] == 2.0 and not summary["client_bound"], summary["self_check"]["reasons"]
    full = int(6 // window)  # whole windows inside the ramp
    assert len(got) >= full and len(want) >= full
    assert got[:full] == pytest.approx(want[:full], rel=0.10), (got[:full], want[:full])
    assert want[full - 1] > 2 * want[0]  # it did ramp (1 to 6 users in the first window, 7 to 12 in the last)
    # users joined on the ramp's schedule: never more in flight than have joined, and each
    # joined user busy (a closed-loop user always has a request out, but for its round trip)
    frame = pd.read_parquet(real / "requests.parquet")
    t0 = summary["config"]["clock"]["t0_ns"]
    sends = (frame["t_send_ns"].to_numpy() - t0) / 1e9
    ends = (frame["t_end_ns"].to_numpy() - t0) / 1e9
    joins = np.array(Ramp("users", 1, 12, 6.0).join_s(0.001))

    def in_flight(at: float) -> int:
        return int(((sends <= at) & (ends > at)).sum())

    for at in sends:
        assert in_flight(at) <= int((joins <= at + 0.05).sum()), at
    for k, at in enumerate(joins + 0.2):
        assert in_flight(at) >= k, (at, in_flight(at), k + 1)
