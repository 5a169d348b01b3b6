"""Engine steps from the chunks of one request: the client's trace of speculative decoding.

Under speculative decoding each verification step emits 1 + (accepted draft tokens) tokens.
vLLM sends one chunk per step, so its chunks are the steps (`chunks`). llama.cpp's server
sends one token per chunk, but writes the tokens of one step together: they arrive as a burst,
microseconds apart (now and then a few ms, when the server's writer thread is preempted), while
steps are a forward pass apart. For a request whose every chunk has one token, and whose
server did not count tokens per chunk (vLLM's continuous usage, which comes with a chunk per
step), a decode gap shorter than 1/RATIO of the request's step time (the median of its gaps
of at least STEP_FLOOR_NS) joins two chunks into one step (`bursts`); without such gaps each
chunk is a step (`chunks`: as without speculative decoding). The first chunk is always its
own step (prefill).

Limits, in docs/metrics.md: a client that falls behind merges steps, which reads as more
acceptance; a server that spaces a step's tokens out by more than 1/RATIO of a step splits it,
which reads as less; and a request with too few decode chunks (< MIN_GAPS gaps) is taken
chunk by chunk.
"""

from __future__ import annotations

import numpy as np

RATIO = 8.0  # a gap this many times shorter than the request's typical step is in a step
STEP_FLOOR_NS = 1_000_000  # gaps from 1 ms up may be steps (a forward pass); shorter ones never are
MIN_GAPS = 4


def _split(gaps_ns: np.ndarray) -> float | None:
    """The gap below which two chunks belong to one step, or None when nothing is that short.
    The request's step time is the median of its gaps of STEP_FLOOR_NS or more (the forward
    passes, and the odd long gap where another request's prefill was batched in: too few to
    move the median); a gap under 1/RATIO of it is inside a step."""
    if len(gaps_ns) < MIN_GAPS:
        return None
    steps = gaps_ns[gaps_ns >= STEP_FLOOR_NS]
    if len(steps) == 0:
        return None
    cut = float(np.median(steps)) / RATIO
    return cut if (gaps_ns < cut).any() else None


def request_steps(t_ns, tokens, counted_per_chunk: bool = False) -> tuple[list[int], str]:
    """Tokens per step of one request, and how the steps were found: `chunks` or `bursts`
    (`none` without chunks). `counted_per_chunk`: the server counted each chunk's tokens
    (vLLM's continuous usage), as a server does that sends a chunk per step; its chunks are
    its steps, and chunks read together (a client behind) must not be taken for a burst."""
    t = np.asarray(t_ns, dtype=np.int64)
    n = np.asarray(tokens, dtype=np.int64)
    if len(n) == 0:
        return [], "none"
    if counted_per_chunk or len(n) < 3 or (n > 1).any():
        return n.tolist(), "chunks"
    gaps = np.diff(t[1:])
    cut = _split(gaps)
    if cut is None:
        return n.tolist(), "chunks"
    starts = np.concatenate([[True], gaps > cut])  # a decode chunk after a long gap opens a step
    groups = np.add.reduceat(n[1:], np.flatnonzero(starts))
    return [int(n[0]), *groups.tolist()], "bursts"
