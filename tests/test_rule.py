"""The accepted-draft rule per request (loadgen/measures/rule.py), and reconcile() over hand-made
requests: every expected verdict below is worked out by hand in its docstring, not computed by
the code under test. k 3 throughout; a request's chunks are written as the decode tokens of each
(the first chunk's beyond the prefill's one first)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from loadgen.measures.frame import request_frame
from loadgen.measures.rule import ENDS, Verdict, explain, explain_steps
from loadgen.measures.summary import summarize
from tests.conftest import cli
from tests.test_measure import _config, _rec

pytestmark = pytest.mark.unit

MODEL_DRAFTER = False  # can_skip: a model drafter at a fixed k drafts every step
LOOKUP = True  # an n-gram drafter may propose nothing in a step


def test_an_honest_stream_fits_one_step_a_chunk():
    """Chunks 3, 2, 4 after the prefill: 2 + 1 + 3 = 6 accepted in 3 verify steps, the last
    step full (4 = k + 1), nothing past the end."""
    v = explain([0, 3, 2, 4], 6, 3, 3, "length", MODEL_DRAFTER)
    assert (v.explained, v.past_end, v.merged, v.undrafted) == (True, 0, 0, 0)


def test_a_lost_draft_with_its_usage_kept_consistent_is_a_difference():
    """The same request with one draft lost from its first decode chunk (3 -> 2; usage 9, as
    the chunks now sum): the server still says 6 in 3 verify steps. 8 decode tokens in 3 verify
    steps make 8 - 3 = 5 accepted, and the last step is a full 4 tokens: no room past the end
    (k - (4 - 1) = 0), and merging the last chunk into two steps would need a 4th verify step.
    So only 5 fits: off by 1."""
    v = explain([0, 2, 2, 4], 6, 3, 3, "length", MODEL_DRAFTER)
    assert (v.explained, v.off, v.low, v.high) == (False, 1, 5, 5)


def test_misattributed_drafts_are_a_difference_though_their_sum_agrees():
    """Two requests, each truly chunks 4, 4, 2 (3 + 3 + 1 = 7 in 3 verify steps), reported as 8
    and 6. The 8 fits by the rule (the last step of 2 tokens leaves k - 1 = 2 past the end: 1
    of them); the 6 cannot: 10 tokens in 3 verify steps accept at least 7 unless a step drafted
    nothing, which a model drafter's never does."""
    assert explain([0, 4, 4, 2], 8, 3, 3, "length", MODEL_DRAFTER).explained
    v = explain([0, 4, 4, 2], 6, 3, 3, "length", MODEL_DRAFTER)
    assert (v.explained, v.off) == (False, 1)
    # with full last steps (4, 4, 4: 9 accepted) the 10 is off too: no room past a full step
    assert explain([0, 4, 4, 4], 10, 3, 3, "length", MODEL_DRAFTER).off == 1
    assert explain([0, 4, 4, 4], 8, 3, 3, "length", MODEL_DRAFTER).off == 1


def test_a_stop_request_with_two_more_accepted_than_its_stream_is_a_difference():
    """Chunks 2, 3, 4 ended by a stop: 1 + 2 + 3 = 6 in 3 verify steps, the last step full. The
    server says 8: 2 past the end would need a last step of at most k + 1 - 2 = 2 tokens, and
    splitting the last chunk needs a 4th verify step (a model drafter) or, for a lookup drafter,
    one-token steps whose tokens the count then loses: at most 7 fits there."""
    v = explain([0, 2, 3, 4], 8, 3, 3, "stop", MODEL_DRAFTER)
    assert (v.explained, v.off, v.high) == (False, 2, 6)
    v = explain([0, 2, 3, 4], 8, 3, 3, "stop", LOOKUP)
    assert (v.explained, v.off, v.high) == (False, 1, 7)
    # the same count on a request that ended otherwise (abort): no room past the end at all
    assert explain([0, 2, 3, 1], 4, 3, 3, "abort", LOOKUP).explained is False


def test_drafts_past_the_end_are_bounded_by_the_last_steps_tokens():
    """Chunks 4, 4, 2 cut by max_tokens: 7 streamed in 3 verify steps; the last step emitted 2,
    so it accepted at most 3 drafts, 1 of them streamed: 0..2 past the end. 9 fits (2 past the
    end), 10 does not."""
    v = explain([0, 4, 4, 2], 9, 3, 3, "length", MODEL_DRAFTER)
    assert (v.explained, v.past_end) == (True, 2)
    assert explain([0, 4, 4, 2], 10, 3, 3, "length", MODEL_DRAFTER).off == 1


def test_merged_steps_are_explained_by_the_verify_count():
    """Chunks of 2 tokens or more from merged steps, as stream_interval 2 makes them: chunks 2,
    4, 2 from 5 verify steps emitting 1, 1, 3, 1, 2 (0 + 0 + 2 + 0 + 1 = 3 accepted). 8 tokens
    in 5 verify steps: 3 accepted, 2 steps merged into the chunks."""
    v = explain([0, 2, 4, 2], 3, 5, 3, "length", MODEL_DRAFTER)
    assert (v.explained, v.past_end, v.steps, v.merged) == (True, 0, 5, 2)
    # one more accepted would need a step fewer than the server's own 5 verify steps, or a
    # draft past the end: the last step's 2 tokens leave room for 2, so 4 fits that way
    v = explain([0, 2, 4, 2], 4, 5, 3, "length", MODEL_DRAFTER)
    assert (v.explained, v.past_end, v.steps) == (True, 1, 5)


def test_a_first_chunk_that_carries_decode_steps():
    """The first chunk of 5 tokens: the prefill's and a verify step's 4; then 2, 3, 1: 3 + 1 +
    2 + 0 = 6 in 4 verify steps."""
    v = explain([4, 2, 3, 1], 6, 4, 3, "length", MODEL_DRAFTER)
    assert (v.explained, v.past_end, v.merged) == (True, 0, 0)


def _recs(cases):
    """Records of requests with the given decode chunks, server counts and verify steps."""
    out = []
    for i, (decode, server, verify, finish) in enumerate(cases):
        chunks = [(50, 1)] + [(80 + 30 * j, n) for j, n in enumerate(decode)]
        r = _rec(i, 0, 0, chunks)
        r.finish_reason, r.server_accepted_tokens, r.server_spec_steps = finish, server, verify
        r.server_draft_tokens = 3 * verify
        out.append(r)
    return out


def _reconciled(cases, counter: int, spec: str | None) -> dict:
    recs = _recs(cases)
    drafts = sum(c[2] for c in cases)
    figures = {
        "spec_decode": {
            "drafts": drafts,
            "accepted_tokens": counter,
            "draft_tokens": 3 * drafts,
            "per_position": [0.9, 0.8, 0.7],
        },
        "server": {"generation_tokens": sum(1 + sum(c[0]) for c in cases)},
    }
    config = {**_config(), "speculative_config": spec}
    return summarize(request_frame(recs), ([], []), config=config, server_figures=figures)["acceptance_client"][
        "reconciliation"
    ]


DRAFT_MODEL = '{"method":"draft_model","model":"m","num_speculative_tokens":3}'


def test_reconcile_names_the_requests_whose_sum_agrees_while_they_do_not():
    """The misattributed pair above through reconcile(): per-request counts 8 + 6 = 14 = the
    counter, and still not exact: request 1 breaks the rule by 1 draft, and is named."""
    rec = _reconciled([([4, 4, 2], 8, 3, "length"), ([4, 4, 2], 6, 3, "length")], 14, DRAFT_MODEL)
    assert rec["server_per_request"] == rec["server_counter"] == 14
    assert rec["exact"] is False and rec["unexplained"] == {"tokens": 1, "requests": 1}, rec
    assert [r["index"] for r in rec["unexplained_requests"]] == [1] and rec["unexplained_requests"][0]["off"] == 1
    assert rec["checked"].startswith("1 of 2 requests break the rule"), rec["checked"]
    assert any("break the rule" in d for d in rec["differences"])
    # the same pair as truly served (7 and 7) is exact, and says what it checked
    rec = _reconciled([([4, 4, 2], 7, 3, "length"), ([4, 4, 2], 7, 3, "length")], 14, DRAFT_MODEL)
    assert rec["exact"] is True and rec["checked"].startswith("every request's accepted drafts agree"), rec
    assert "(2 requests; k 3 from the run's speculative config)" in rec["checked"]


def test_reconcile_takes_the_drafters_kind_from_the_runs_speculative_config():
    """A count one below its stream (6 for chunks 4, 4, 2 in 3 verify steps) is a difference for
    a draft model and fits an n-gram drafter (one of its chunks held a step that found no match)."""
    case = [([4, 4, 2], 6, 3, "length")]
    assert _reconciled(case, 6, DRAFT_MODEL)["exact"] is False
    ngram = _reconciled(case, 6, '{"method":"ngram","num_speculative_tokens":3}')
    assert ngram["exact"] is True and ngram["steps_that_drafted_nothing"] == "allowed"


def test_a_baseline_is_not_called_exact():
    """No drafter: the stream's extra tokens are merged steps by the server's word, nothing is
    checked, and the reconciliation says so instead of comparing a 0 it set with a 0."""
    r = _rec(0, 0, 0, [(50, 1), (80, 2), (110, 1)])
    r.finish_reason = "length"
    s = summarize(request_frame([r]), ([], []), config=_config(), server_figures={"server": {"generation_tokens": 4}})
    rec = s["acceptance_client"]["reconciliation"]
    assert rec["exact"] is None and rec["checked"] == "nothing to reconcile: the server drafted nothing", rec
    assert rec["stream"]["raw"] == 1 and np.isclose(rec["stream"]["accepted_tokens"], 0)


def test_reconcile_reports_the_lost_draft_and_the_stop_request():
    """The two other hand-made cases above through reconcile(), beside an honest request: the
    lost draft (chunks 2, 2, 4, the server's 6 in 3 verify steps: only 5 fits) and the stop
    request (chunks 2, 3, 4, the server's 8: only 6 fits), each named with what would fit; the
    honest one (chunks 3, 2, 4, 6) is not. The counter agrees with the counts' sum: 6 + 6 + 8."""
    cases = [([3, 2, 4], 6, 3, "length"), ([2, 2, 4], 6, 3, "length"), ([2, 3, 4], 8, 3, "stop")]
    rec = _reconciled(cases, 20, DRAFT_MODEL)
    assert rec["server_per_request"] == rec["server_counter"] == 20 and rec["exact"] is False
    named = {r["index"]: (r["fits"], r["off"], r["finish_reason"]) for r in rec["unexplained_requests"]}
    assert named == {1: ([5, 5], 1, "length"), 2: ([6, 6], 2, "stop")}, named
    assert rec["unexplained"] == {"tokens": 3, "requests": 2}


DRAFT_K3 = '{"method": "draft_model", "model": "small", "num_speculative_tokens": 3}'


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--speculative-config", DRAFT_K3], "--speculative-config declares what a server at --base-url runs"),
        (["--base-url", "http://127.0.0.1:9", "--speculative-config", "{x"], "--speculative-config is not valid JSON"),
        (["--base-url", "http://127.0.0.1:9", "--speculative-config", '{"method": "ngram"}'], "names no k"),
    ],
)
def test_a_declaration_that_cannot_apply_is_one_line(args, expect):
    res = cli("run", *args, "--concurrency", "1", "--num-requests", "1")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and expect in res.stderr, res.stderr


def _searched(chunks: list[int], accepted: list[int], k: int | None, finish: str, can_skip: bool = True) -> Verdict:
    """rule.explain_steps as it was first written: a search over every split of every chunk into
    whole verify steps and one-token steps (it allowed one-token steps in the last chunk only
    after its verify steps, so a cut last step came right after them). Slow, and written another
    way: the reference the placement in rule.explain_steps is held to."""
    T, V = sum(chunks), len(accepted)
    if any(a < 0 for a in accepted):  # a malformed record: no step accepts fewer than none
        return Verdict(False, off=sum(-a for a in accepted if a < 0))
    if k is not None and any(a > k for a in accepted):  # a step accepts at most the k it drafted
        return Verdict(False, off=sum(max(0, a - k) for a in accepted))
    cut = finish in ENDS
    # states after each chunk: (verify steps consumed, one-token steps used); a chunk takes the
    # next verify steps whole and one-token steps, or ends the stream inside the last verify step
    states = {(0, 0)}
    emit = [a + 1 for a in accepted]
    for n, c in enumerate(chunks):
        last_chunk = n == len(chunks) - 1
        nxt: set[tuple[int, int]] = set()
        for j, u in states:
            if c == 0:
                nxt.add((j, u))
                continue
            total, i = 0, j
            while True:  # verify steps j..i-1 whole, the rest one-token steps
                rest = c - total
                if rest >= 0 and (rest == 0 or can_skip) and (i > j or rest > 0):
                    nxt.add((i, u + rest))
                if last_chunk and cut and i == V - 1 and total < c <= total + emit[i]:
                    nxt.add((V, u))  # the final step cut short inside this chunk
                if i == V or total + emit[i] > c:
                    break
                total += emit[i]
                i += 1
        states = nxt
        if not states:
            break
    fits = [(j, u) for j, u in states if j == V]
    if not fits:
        return Verdict(False, off=max(1, abs(T - sum(emit))))
    u = min(u for _, u in fits)
    emitted = T - u - sum(emit[:-1]) if V else 0
    past = (emit[-1] - emitted) if V and cut else 0
    return Verdict(True, max(past, 0), u, V + u, V + u - sum(1 for c in chunks if c > 0), 0)


def _random_case(rng: random.Random) -> tuple[list[int], list[int], str, bool]:
    """A request as an engine at k 3 streams it (verify steps, one-token steps where it can skip,
    chunks merging steps, a last step maybe cut), then maybe broken by one change."""
    skip = rng.random() < 0.5
    steps, record = [], []
    for _ in range(rng.randint(0, 12)):
        if skip and rng.random() < 0.3:
            steps.append(1)
        else:
            record.append(rng.randint(0, 3))
            steps.append(record[-1] + 1)
    finish = rng.choice(["length", "stop", "abort"])
    if (
        steps
        and finish in ENDS
        and steps[-1] > 1
        and rng.random() < 0.4
        and len(record)
        and steps[-1] == record[-1] + 1
    ):
        steps[-1] = rng.randint(1, steps[-1] - 1)  # max_tokens cut the last step
    chunks, j = [], 0
    while j < len(steps):
        take = rng.choice([1, 1, 1, 2, 3])
        chunks.append(sum(steps[j : j + take]))
        j += take
    chunks = [rng.randint(0, 1), *chunks] if rng.random() < 0.3 else [0, *chunks]
    change = rng.random()
    if change < 0.2 and len(chunks) > 1:
        n = rng.randrange(len(chunks))
        chunks[n] = max(0, chunks[n] + rng.choice([-1, 1]))
    elif change < 0.4 and record:
        n = rng.randrange(len(record))
        record[n] = max(0, record[n] + rng.choice([-1, 1]))
    return chunks, record, finish, skip


def test_the_placement_gives_the_searchs_verdict_on_random_streams():
    """explain_steps (each verify step at its earliest start) against the exhaustive search it
    replaced, on 4,000 seeded streams, honest and broken: the same verdict and explanation,
    but where the search could not put a one-token step before a cut last step in one chunk
    (an n-gram miss, then the last step cut by max_tokens, merged): the placement explains
    those, by a draft past the end."""
    rng = random.Random(7)
    widened = 0
    for _ in range(4000):
        chunks, record, finish, skip = _random_case(rng)
        got, want = explain_steps(chunks, record, 3, finish, skip), _searched(chunks, record, 3, finish, skip)
        if got.explained and not want.explained:
            assert skip and got.past_end > 0 and got.undrafted > 0, (chunks, record, finish, got, want)
            widened += 1
            continue
        assert got == want, (chunks, record, finish, skip, got, want)
    assert widened < 200
