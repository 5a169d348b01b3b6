"""The accepted-draft rule for one request: can an engine that works as vLLM's does have sent
this stream and counted what the server says? (docs/metrics.md, "Accepted drafts: three
sources and the rule".)

What the engine does, per request. The prefill step emits one token. Each later step emits
1 + a tokens, a the drafts it accepted (0..k), except the last, which max_tokens or a stop may
cut short: it emits e tokens and its a drafts are counted whole, so a − (e − 1) drafts are
accepted past the end: at most k − (e − 1), never for any other finish. A step with drafts is a
verify step (vLLM's `num_spec_steps`, V); a step without (an n-gram miss, k 0 by batch size, a
re-prefill after preemption) emits exactly one token and accepts none. A stream chunk is one or
more consecutive steps (vLLM merges the outputs of steps the client has not read yet, and on
purpose with stream_interval): the first chunk holds the prefill's token and maybe decode steps.

So with u steps that drafted nothing and p drafts past the end, the server's count is
S = T − V − u + p (T the decode tokens), and the stream must split into V verify steps of 1..k+1
tokens and u one-token steps, chunk by chunk, with a last verify step of at most k + 1 − p
tokens. Whether that split exists needs only the chunks' sizes: a chunk of c tokens needs at
least ⌈c / (k+1)⌉ verify steps, one fewer for each one-token step put inside it, cheapest first
(loadgen.measures.rule._Needs). Nothing here reads a figure the server derived from the stream,
or the stream's from the server: each count is checked against the other's constraints.

A request whose count fits no split is a difference, by how far its count is from the nearest
one that fits (`off`). One that fits is explained by the fewest drafts past the end (then the
fewest steps): its verdict names them, and the steps merged into its chunks."""

from __future__ import annotations

from bisect import bisect_right, insort
from dataclasses import dataclass
from itertools import accumulate

ENDS = ("length", "stop")  # finish reasons that can cut a last step short


@dataclass(frozen=True)
class Verdict:
    explained: bool
    past_end: int = 0  # drafts the last step accepted past the end (explained requests)
    undrafted: int = 0  # steps that drafted nothing (known only with the server's verify steps)
    steps: int = 0  # the engine's decode steps in the explanation
    merged: int = 0  # of them, steps that came inside another step's chunk
    off: int = 0  # not explained: how far the server's count is from the nearest that fits
    low: int | None = None  # the counts that fit, nearest first: the range they span
    high: int | None = None


class _Needs:
    """The least verify steps a stream needs when u of its tokens are one-token steps that
    drafted nothing, for each p (drafts past the end). A chunk of c tokens needs ⌈c/K⌉ verify
    steps (K = k + 1); taking r = c − (⌈c/K⌉ − 1)·K tokens out as one-token steps saves one, and
    then every K more save one each; the cheapest savings first is optimal (each chunk's costs
    rise: r ≤ K). With p > 0 the last chunk's last step is a verify step of at most K − p
    tokens: it counts as c + p tokens and keeps one verify step."""

    def __init__(self, chunks: list[int], K: int) -> None:
        self.K = K
        decode = [c for c in chunks if c > 0]
        self.last = decode[-1] if decode else 0
        self.others = decode[:-1]
        self.base = sum(-(-c // K) for c in self.others)
        self.costs = sorted(c - (-(-c // K) - 1) * K for c in self.others)
        self.blocks = sum(-(-c // K) - 1 for c in self.others)

    def least_u(self, p: int, verify: int) -> int | None:
        """The fewest one-token steps with which `verify` verify steps can carry the stream
        (None: none can)."""
        K, c = self.K, self.last
        if c == 0:
            return 0 if verify == 0 and p == 0 else None
        q = -(-(c + p) // K)
        costs = list(self.costs)
        blocks = self.blocks
        keep = 1 if p > 0 else 0  # a verify step stays in the last chunk
        if q - keep >= 1:
            insort(costs, c + p - (q - 1) * K)
            blocks += q - 1 - keep
        need = self.base + q - verify  # savings needed
        if need <= 0:
            return 0
        prefix = list(accumulate(costs))
        if need <= len(prefix):
            return prefix[need - 1]
        more = need - len(prefix)
        return None if more > blocks else (prefix[-1] if prefix else 0) + more * K

    def least_steps(self, p: int) -> int:
        """The fewest steps that carry the stream (each of at most K tokens)."""
        c = self.last
        return self.base + (-(-(c + p) // self.K) if c else 0)


def explain(
    chunks: list[int], server: int, verify: int | None, k: int | None, finish: str, can_skip: bool = True
) -> Verdict:
    """One request: `chunks` its chunks' decode tokens in order (the first chunk's tokens beyond
    the prefill's one first, 0 when it has none), `server` the accepted drafts the server counted,
    `verify` its verify steps (None: not reported), `k` the drafts a step proposes at most (None:
    unknown, no bound), `finish` its finish reason, `can_skip` whether a decode step may have
    drafted nothing (n-gram, suffix, k by batch size; not for a model drafter at a fixed k)."""
    T = sum(chunks)
    K = (k + 1) if k is not None else T + 1
    top = (k if k is not None else T) if finish in ENDS and T > 0 else 0
    need = _Needs(chunks, max(K, 1))
    ranges: list[tuple[int, int, int, int]] = []  # (lowest S, highest S, p, u at the highest)
    for p in range(top + 1):
        if verify is None:
            ranges.append((p, T - need.least_steps(p) + p, p, 0))
            continue
        u_hi = T - verify if can_skip else 0
        u_lo = need.least_u(p, verify)
        if u_lo is None or u_lo > u_hi or verify > T:
            continue
        ranges.append((T - verify - u_hi + p, T - verify - u_lo + p, p, u_lo))
    decode_chunks = sum(1 for c in chunks if c > 0)
    for low, high, p, _ in ranges:
        if low <= server <= high:
            steps = T - server + p
            undrafted = 0 if verify is None else steps - verify
            return Verdict(True, p, undrafted, steps, steps - decode_chunks, 0, low, high)
    if not ranges:
        return Verdict(False, off=max(server, 1))
    nearest = min(ranges, key=lambda r: min(abs(server - r[0]), abs(server - r[1])))
    off = min(abs(server - nearest[0]), abs(server - nearest[1]))
    return Verdict(False, off=off, low=min(r[0] for r in ranges), high=max(r[1] for r in ranges))


def explain_steps(chunks: list[int], accepted: list[int], k: int | None, finish: str, can_skip: bool = True) -> Verdict:
    """One request against the server's own per-step record (vLLM's `per_step_accepted`, with
    --per-request-spec-decode-metrics detailed): the verify steps in order, step j emitting
    accepted[j] + 1 tokens (the last step fewer, when max_tokens or a stop cut it), with
    one-token steps that drafted nothing between them where the drafter can skip a step. The
    stream's chunks must be those steps grouped in order: a chunk that is no run of consecutive
    steps, or a count the steps do not add up to, is a difference (off: the tokens by which the
    steps and the stream differ, at least 1). A step that accepted more than k, or fewer than
    none (a malformed record), is a difference too.

    Each verify step is placed at the earliest token it can start at: after the step before it,
    and (with one-token steps to fill the gap, where the drafter can skip) past any chunk
    boundary it would straddle. Placing a step earlier never hurts the steps after it, so the
    steps fit the chunks if and only if this placement does: O(steps + chunks), where a search
    over every split of every chunk grew with the steps a lookup drafter can skip."""
    T, V = sum(chunks), len(accepted)
    if any(a < 0 for a in accepted):  # a malformed record: no step accepts fewer than none
        return Verdict(False, off=sum(-a for a in accepted if a < 0))
    if k is not None and any(a > k for a in accepted):  # a step accepts at most the k it drafted
        return Verdict(False, off=sum(max(0, a - k) for a in accepted))
    emit = [a + 1 for a in accepted]
    decode = sum(1 for c in chunks if c > 0)
    bounds = list(accumulate(c for c in chunks if c > 0))[:-1]  # where a chunk ends inside the stream
    start = _placed(emit[:-1], bounds, can_skip) if V else 0  # where the last step may start, at the earliest
    if start is not None and V:
        last = _after(start, emit[-1], bounds, can_skip)
        if last is not None and last + emit[-1] <= T and (can_skip or last + emit[-1] == T):
            u = T - sum(emit)
            return Verdict(True, 0, u, V + u, V + u - decode, 0)
        s = max(start, _last_chunk_start(bounds), T - emit[-1])  # the last step cut by the end, inside the last chunk
        if finish in ENDS and s < T and (can_skip or s == start):
            u = s - sum(emit[:-1])
            return Verdict(True, emit[-1] - (T - s), u, V + u, V + u - decode, 0)
    elif V == 0 and (can_skip or T == 0):
        return Verdict(True, 0, T, T, T - decode, 0)
    return Verdict(False, off=max(1, abs(T - sum(emit))))


def _last_chunk_start(bounds: list[int]) -> int:
    """Where the last chunk starts (0: a stream of one chunk)."""
    return bounds[-1] if bounds else 0


def _after(s: int, e: int, bounds: list[int], can_skip: bool) -> int | None:
    """The earliest start at or after `s` of a step of `e` tokens that straddles no chunk
    boundary (None: it would have to skip, and cannot)."""
    i = bisect_right(bounds, s)
    while i < len(bounds) and bounds[i] < s + e:
        if not can_skip:
            return None
        s = bounds[i]
        i += 1
    return s


def _placed(emit: list[int], bounds: list[int], can_skip: bool) -> int | None:
    """Where the steps of `emit` end when each is placed at its earliest start (None: they
    cannot be placed)."""
    s = 0
    for e in emit:
        at = _after(s, e, bounds, can_skip)
        if at is None:
            return None
        s = at + e
    return s
