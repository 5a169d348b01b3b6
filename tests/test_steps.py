"""Engine steps from chunk arrival times: bursts of one-token chunks are one step."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.measures.steps import request_steps

pytestmark = pytest.mark.unit

MS = 1_000_000


def stream(
    steps: list[int], *, step_ms: float = 25.0, burst_us: float = 30.0, jitter: float = 0.0, seed: int = 0
) -> tuple[list[int], list[int]]:
    """One token per chunk: the prefill token, then each step's tokens `burst_us` apart."""
    rng = np.random.default_rng(seed)
    t, now = [0], 0.0
    for k in steps:
        now += step_ms * MS * (1 + jitter * rng.uniform(-1, 1))
        t += [int(now + j * burst_us * 1e3) for j in range(k)]
    return t, [1] * len(t)


def test_bursts_become_steps():
    truth = [3, 1, 4, 2, 1, 4, 1, 1, 3]
    t, n = stream(truth, jitter=0.3)
    assert request_steps(t, n) == ([1, *truth], "bursts")


def test_no_bursts_one_step_per_chunk():
    t, n = stream([1] * 20, jitter=0.3)
    assert request_steps(t, n) == ([1] * 21, "chunks")


def test_burst_tokens_in_one_socket_read():
    truth = [4, 4, 1, 4, 2]
    t, n = stream(truth, burst_us=0.0)  # the same timestamp: read together
    assert request_steps(t, n) == ([1, *truth], "bursts")


def test_multi_token_chunks_are_steps_already():
    assert request_steps([0, 10 * MS, 20 * MS, 20 * MS + 1000], [1, 3, 2, 1]) == ([1, 3, 2, 1], "chunks")
    assert request_steps([], []) == ([], "none")


def test_too_few_gaps_to_tell():
    t, n = stream([2, 1])
    assert request_steps(t, n)[1] == "chunks"


def test_long_gaps_from_another_requests_prefill_are_not_steps():
    """Without speculative decoding, a few long gaps (another request's prefill batched in)
    must not turn every forward pass into a burst."""
    t, n = stream([1] * 40, jitter=0.2)
    t = [v + (1500 * MS if i > 10 else 0) + (900 * MS if i > 25 else 0) for i, v in enumerate(t)]
    assert request_steps(t, n) == ([1] * 41, "chunks")


def test_bursts_survive_long_prefill_gaps():
    truth = [3, 1, 1, 4, 1, 2, 1, 1, 3, 1, 1, 1]
    t, n = stream(truth, jitter=0.2)
    t = [v + (1500 * MS if i >= 10 else 0) for i, v in enumerate(t)]  # chunk 10 opens a step
    assert request_steps(t, n) == ([1, *truth], "bursts")


def test_a_burst_written_a_few_ms_late_is_still_one_step():
    """The server's writer thread preempted mid-burst (a busy CPU): a gap of a few ms, far
    shorter than a 40 ms step, stays inside the step."""
    truth = [3, 1, 2, 4, 1, 3, 1, 2]
    t, n = stream(truth, step_ms=40.0, jitter=0.2)
    t = [v + (3 * MS if i >= 2 else 0) for i, v in enumerate(t)]  # inside the first burst (chunks 1-3)
    assert request_steps(t, n) == ([1, *truth], "bursts")


def test_chunks_the_server_counted_are_steps_even_when_read_together():
    """vLLM counts each chunk's tokens (continuous usage) and sends a chunk per step: two of
    its chunks read in one go (a client behind) are two steps, not a burst."""
    truth = [1] * 12
    t, n = stream(truth, jitter=0.2)
    t[5] = t[4]  # read together
    assert request_steps(t, n)[1] == "bursts"  # without the server's counts it would look like one
    assert request_steps(t, n, counted_per_chunk=True) == ([1] * 13, "chunks")
