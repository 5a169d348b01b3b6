"""test_stepfit.py's tests that start no process, apart from its tests that do (what they test: its
docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import pytest

from loadgen import api
from loadgen.measures import enginesteps
from loadgen.shapes import ClosedLoop
from loadgen.simulate.virtual import SimSpec
from servers.emulator import costfit
from servers.emulator.engine import EngineConfig
from tests.test_stepfit import PROFILE, ROOT, _fit
from workloads import open_workload

pytestmark = pytest.mark.unit


def test_the_fit_recovers_the_emulators_profile_from_simulated_steps():
    cells = []
    for workload in ("chat,output=fixed:128", "synthetic:random,input_len=2048,output_len=128"):
        for users in (1, 8, 32):  # `loadgen simulate`'s library call
            sim = SimSpec(PROFILE.name, None, ClosedLoop(users), num_requests=4 * users)
            done = api.simulate(api.SimJob(sim, open_workload(workload)))
            cells.append(("baseline", enginesteps.samples(done.frame)))
    got = costfit.linear_fit(cells)["forward"]
    assert got["constant"] == pytest.approx(PROFILE.forward.constant + PROFILE.step_overhead, rel=0.01)
    assert got["per_kv_token"] == pytest.approx(PROFILE.forward.per_kv_token, rel=0.02)
    assert got["per_batched_token"] == pytest.approx(PROFILE.forward.per_batched_token, rel=0.02)


def test_the_engine_timeline_is_every_step_the_emulator_took_prefills_included(tmp_path):
    """engine_steps rebuilds the engine's steps from every request's chunk times: in virtual
    time on the emulator, all of the run's time is in them (prefills the gaps miss among it),
    and the forward fitted on them is the profile's; with n-gram drafts priced per step and
    per draft token (a fitted profile's terms), those two come back too, from the SD cells'
    residuals (within 5%; the engine prices a lookup drafter in the step that verifies its drafts,
    a miss costs nothing, and the per-request counts say which requests drafted: a request whose
    chunk carried one token drafted with the chance they leave). (No client round trip: a
    request reaches the engine when it is sent, so a closed loop keeps the engine busy.)"""
    import numpy as np

    from servers.emulator.spec import parse

    NGRAM = parse('{"method": "ngram", "num_speculative_tokens": 3}')
    drafted = tmp_path / "drafted.toml"
    text = (ROOT / "servers" / "emulator" / "profiles" / "h100-llama-3.1-8b.toml").read_text()
    head, _, _ = text.partition("[drafters.")
    drafted.write_text(head + '[drafters.ngram]\nper_step = 2.0e-3\nper_draft_token = 5.0e-4\nacceptance = "eagle"\n')
    base, spec = [], []
    for users in (1, 4, 16):
        sim = SimSpec(str(drafted), None, ClosedLoop(users), num_requests=3 * users, client_rtt_s=0.0)
        done = api.simulate(api.SimJob(sim, open_workload("chat,output=fixed:64")))
        steps = enginesteps.engine_steps(done.frame)
        times = np.concatenate([np.asarray(t, np.int64) for t in done.frame["chunk_t_ns"]])
        span = (times.max() - done.frame["t_send_ns"].min()) / 1e9
        assert steps[:, 0].sum() == pytest.approx(span, rel=1e-6)
        assert (steps[:, 4] > 0).sum() >= 1 and steps[:, 0].min() > 0
        base.append(steps)
        per_request = EngineConfig(per_request_spec_decode_metrics="summary")  # which requests drafted
        sim = SimSpec(str(drafted), NGRAM, ClosedLoop(users), per_request, num_requests=3 * users, client_rtt_s=0.0)
        done = api.simulate(api.SimJob(sim, open_workload("chat,output=fixed:64")))
        spec.append(enginesteps.engine_steps(done.frame, k=3))
    coef = _fit(np.concatenate(base))
    assert coef[0] == pytest.approx(PROFILE.forward.constant + PROFILE.step_overhead, rel=0.01)
    assert coef[1] == pytest.approx(PROFILE.forward.per_kv_token, rel=0.02)
    assert coef[2] == pytest.approx(PROFILE.forward.per_batched_token, rel=0.02)
    s = np.concatenate(spec)
    resid = s[:, 0] - np.column_stack([np.ones(len(s)), s[:, 1], s[:, 2]]) @ coef
    per_step, per_draft = np.linalg.lstsq(s[:, 5:7], resid, rcond=None)[0]
    assert per_step == pytest.approx(2.0e-3, rel=0.05) and per_draft == pytest.approx(5.0e-4, rel=0.05)
