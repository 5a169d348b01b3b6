"""The self-check judges each delay against the figures it can move (loadgen/measures/selfcheck.py,
MOVES; docs/metrics.md): the same client delay is no cause to flag a run against a slow engine and
flags one against a fast engine. Not a timing test: 1% of a 2-second gap is 20 ms, more than a
busy machine adds to the 10 ms the test itself blocks its loop for, and a 20 ms gap is flagged
by any delay at all (tests/test_selfcheck.py judges the client's own delays alone)."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.measures.frame import request_frame
from servers.scripted.script import prompt_key
from tests.conftest import synthetic_prompts
from tests.test_selfcheck import _run, _summary

pytestmark = pytest.mark.servers


def test_lag_is_judged_against_the_gaps_it_can_move(server, tmp_path):
    """The same client delay (a loop blocked 10 ms out of every 20, as a busy 2-core machine
    with an engine beside the client makes it) against two servers whose true gaps are known:
    one writing every 2 s, as a slow engine does, where 10 ms could move no figure by 1%: not
    flagged, the lag listed as below the precision, and every TTFT and gap right within 1% of
    the server's own record of its writes; and one writing every 20 ms, where it is half a gap:
    flagged, as before."""
    import json

    import numpy as np

    trace = tmp_path / "slow.jsonl"
    slow = server("--ttft-ms", "2000", "--step-ms", "2000", "--trace", str(trace))
    result = asyncio.run(_run(slow, starve=True, num=3, output_len=2, block_s=0.01))
    summary = _summary(result)
    check = summary["self_check"]
    assert check["loop_lag_ms"]["p99"] > 5 and check["below_precision"], check  # over the 5 ms bound...
    assert summary["client_bound"] is False, check["reasons"]  # ... and under 1% of every figure it moves
    by_key = {rec["key"]: rec for rec in map(json.loads, trace.read_text().splitlines())}
    prompts = synthetic_prompts(3, input_len=16, output_len=2, seed=0)
    frame = request_frame(result.records)
    assert len(frame) == 3 and frame["ok"].all()
    for row in frame.itertuples():
        writes = np.array(by_key[prompt_key(prompts[row.index])]["write_ns"])
        got = np.diff([row.t_send_ns, *row.chunk_t_ns])
        want = np.diff([row.t_send_ns, *writes])
        assert len(got) == len(want) == 2
        assert np.all(np.abs(got - want) < 0.01 * want), (got, want)  # TTFT, then the gap
    fast = server("--ttft-ms", "20", "--step-ms", "20")
    flagged = _summary(asyncio.run(_run(fast, starve=True, num=20, output_len=8, block_s=0.01)))
    assert flagged["client_bound"] is True, flagged["self_check"]
    assert any("of the median" in r for r in flagged["self_check"]["reasons"])
