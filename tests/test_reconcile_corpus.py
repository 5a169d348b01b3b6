"""Mutations that keep every sum consistent, on stored real streams (tests/data/reconcile_streams.json,
recorded by `python3 -m bench.reconcile_corpus`: the emulator's engine and real vLLM with the Qwen
pair, draft model and n-gram, k 3, stream_interval 2 so that merged chunks are among them, with
vLLM's per-step record). Each original must reconcile; each mutation must be reported as a
difference of the request it touched. A mutation keeps the stream's usage (its chunks' sum), the
per-request counts' sum and the counter consistent with each other, so no total gives it away.

The cases and their expected verdicts are written by hand below, each with why the rule must
see it (loadgen/measures/rule.py; docs/metrics.md, "Accepted drafts: three sources and the rule"),
from the stored numbers: they are not computed by the code under test."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from loadgen.client.record import RequestRecord
from loadgen.measures.frame import request_frame
from loadgen.measures.summary import summarize

pytestmark = pytest.mark.unit

STREAMS = json.loads((Path(__file__).parent / "data" / "reconcile_streams.json").read_text())
MS = 1_000_000
BASE = 10_000


def _records(stream: dict) -> list[RequestRecord]:
    out = []
    for r in stream["requests"]:
        rec = RequestRecord(r["index"], f"r{r['index']}", False, BASE * MS)
        rec.t_send_ns = BASE * MS
        cum = 0
        for j, n in enumerate(r["chunks"]):
            cum += n
            rec.chunk_t_ns.append((BASE + 50 + 20 * j) * MS)
            rec.chunk_usage.append(cum)
            rec.chunk_chars.append(4 * n)
        rec.usage_completion_tokens, rec.prompt_tokens, rec.done = cum, 32, True
        rec.t_end_ns = rec.chunk_t_ns[-1] + MS
        rec.finish_reason = r["finish"]
        rec.server_accepted_tokens, rec.server_spec_steps = r["accepted"], r["verify"]
        rec.server_draft_tokens = None if r["verify"] is None else r["verify"] * stream["k"]
        rec.server_step_accepted = r["per_step"]
        out.append(rec)
    return out


def reconcile(stream: dict) -> dict:
    drafts = stream["counter"]["drafts"]
    figures = {
        "spec_decode": {
            "drafts": drafts,
            "accepted_tokens": stream["counter"]["accepted"],
            "draft_tokens": drafts * stream["k"],
            "per_position": [0.5] * stream["k"],
        },
        "server": {"generation_tokens": sum(sum(r["chunks"]) for r in stream["requests"])},
    }
    config = {
        "clock": {"t0_ns": BASE * MS},
        "load": {"concurrency": 2},
        "speculative_config": json.dumps(stream["speculative_config"]),
    }
    s = summarize(request_frame(_records(stream)), ([], []), config=config, server_figures=figures)
    return s["acceptance_client"]["reconciliation"]


# -- the mutations: each keeps usage, the per-request counts' sum and the counter consistent ------


def _request(stream: dict, index: int) -> dict:
    return next(r for r in stream["requests"] if r["index"] == index)


def lose_draft(stream: dict, index: int, chunk: int) -> None:
    """A draft lost from a chunk; the request's usage follows its chunks (its count does not)."""
    _request(stream, index)["chunks"][chunk] -= 1


def move_draft(stream: dict, source: int, to: int, step_from: int, step_to: int) -> None:
    """One accepted draft counted for another request: the source's verify step `step_from`
    loses it and the other's step `step_to` gains it, in their counts and per-step records."""
    a, b = _request(stream, source), _request(stream, to)
    a["accepted"] -= 1
    b["accepted"] += 1
    if a["per_step"] is not None:
        a["per_step"][step_from] -= 1
        b["per_step"][step_to] += 1


def extra_on_stop(stream: dict, index: int) -> None:
    """The request ended by a stop (its answer hit one in its last step), and the server counted
    one more accepted draft there: in its count, its last step and the counter."""
    r = _request(stream, index)
    r["finish"] = "stop"
    r["accepted"] += 1
    if r["per_step"] is not None:
        r["per_step"][-1] += 1
    stream["counter"]["accepted"] += 1


def split_chunk(stream: dict, index: int, chunk: int) -> None:
    """A chunk of c tokens read as two, of 1 and c - 1."""
    chunks = _request(stream, index)["chunks"]
    c = chunks[chunk]
    chunks[chunk : chunk + 1] = [1, c - 1]


def shift_token(stream: dict, index: int, chunk: int) -> None:
    """A token of the next chunk read in this one."""
    chunks = _request(stream, index)["chunks"]
    chunks[chunk] += 1
    chunks[chunk + 1] -= 1


def summary_only(stream: dict) -> None:
    """The server's per-step record gone (vLLM with `summary`): counts and verify steps only."""
    for r in stream["requests"]:
        r["per_step"] = None


MUTATIONS = {
    "lose_draft": lose_draft,
    "move_draft": move_draft,
    "extra_on_stop": extra_on_stop,
    "split_chunk": split_chunk,
    "shift_token": shift_token,
    "summary_only": summary_only,
}

# The cases: (stream, mutations with their arguments, the requests that must be reported, why).
# k = 3 everywhere, so a verify step emits 1..4 tokens; every request ended by max_tokens (24).
# A request's chunks are written as stored (the prefill's 1 first); e = a step's tokens (its
# accepted + 1). Worked by hand from the stored numbers (tests/data/reconcile_streams.json).
CASES: list[tuple[str, list[tuple[str, tuple]], set[int], str]] = [
    # real vLLM, the 0.5B drafting the 1.5B (every step drafts); request 2: chunks 1,4,4,4,4,4,3,
    # per-step 3,3,3,3,3,3 (e = 4 each: five chunks of one step, the last cut from 4 to 3)
    ("vllm-cpu/draft-model", [("lose_draft", (2, 2))], {2},
     "its second decode chunk 3: the second step's 4 fits in no chunk (only the last step is cut)"),
    ("vllm-cpu/draft-model", [("move_draft", (2, 3, 0, 0))], {2, 3},
     "request 2's first step e 3 is no chunk's 4 (nor with the next: 7); request 3's first step "
     "accepts 4 > k"),
    ("vllm-cpu/draft-model", [("extra_on_stop", (2,))], {2},
     "its last step would accept 4 > k"),
    ("vllm-cpu/draft-model", [("split_chunk", (2, 1))], {2},
     "a chunk of 1 token where the first step emitted 4"),
    ("vllm-cpu/draft-model", [("shift_token", (2, 1))], {2},
     "chunks 5, 3: the first step's 4 is neither, nor 4 + 4"),
    # the same without the per-step record: counts S = 18, V = 6 verify steps, 6 decode chunks
    ("vllm-cpu/draft-model", [("summary_only", ()), ("lose_draft", (2, 2))], {2},
     "22 decode tokens in 6 verify steps make 16 streamed, so 2 past the end; 6 steps in 6 "
     "chunks are one a chunk, the last of 3 tokens leaves room for 1 only"),
    ("vllm-cpu/draft-model", [("summary_only", ()), ("move_draft", (3, 2, 0, 0))], {2},
     "request 2's 19 needs 2 past the end, its last step of 3 tokens leaves room for 1 (request "
     "3's 17 fits: 1 fewer past the end; a loss from the uncut part is not visible in its counts)"),
    # real vLLM n-gram (a step may draft nothing: one-token steps anywhere); request 2: chunks
    # 1,2,4,4,4,4,4,1, per-step 3,3,3,3,3,3 (e = 4 each: 2 is two one-token steps, five chunks
    # of one verify step, the last 1 its sixth step cut from 4); request 3 the same
    ("vllm-cpu/ngram", [("lose_draft", (2, 2))], {2},
     "a decode chunk of 3 can only be three one-token steps; then six steps of 4 tokens are left "
     "for chunks 4, 4, 4, 4, 1: the fifth fits nowhere (only the last step is cut)"),
    ("vllm-cpu/ngram", [("move_draft", (2, 3, 0, 0))], {3},
     "request 3's first step accepts 4 > k; request 2's first step (e 3) and a one-token step that "
     "drafted nothing make the chunk of 4: it fits, a loss a lookup drafter's steps can hide"),
    ("vllm-cpu/ngram", [("extra_on_stop", (2,))], {2},
     "its last step would accept 4 > k"),
    ("vllm-cpu/ngram", [("split_chunk", (2, 2))], {2},
     "chunks 2, 1, 3, 4, 4, 4, 4, 1: no chunk before the four 4s holds a step of 4, so six steps "
     "of 4 meet five chunks, the last of 1"),
    ("vllm-cpu/ngram", [("shift_token", (2, 2))], {2},
     "chunks 2, 5, 3, 4, 4, 4, 1: the 5 is a step of 4 and a one-token step, the 3 holds no step of "
     "4, and five steps of 4 are left for 4, 4, 4, 1"),
    # the emulator, draft model; request 0: chunks 1,3,4,4,4,4,4, per-step 2,3,3,3,3,3 (e 3,4,4,4,4,4:
    # one chunk each, nothing cut); request 3: chunks 1,3,3,5,4,4,4, per-step 2,2,0,3,3,3,3
    # (e 3,3,1,4,4,4,4: the 5 is the steps of 1 and 4 merged)
    ("emulator/draft-model", [("lose_draft", (0, 2))], {0},
     "a chunk of 3 where the second step emitted 4"),
    ("emulator/draft-model", [("move_draft", (0, 3, 1, 2))], {0, 3},
     "request 0's second step e 3 is no chunk's 4 (nor 3 + 4); request 3's third step e 2 "
     "makes the merged 5 a 6"),
    ("emulator/draft-model", [("extra_on_stop", (0,))], {0},
     "its last step would accept 4 > k"),
    ("emulator/draft-model", [("split_chunk", (0, 2))], {0},
     "a chunk of 1 where the second step emitted 4"),
    ("emulator/draft-model", [("shift_token", (0, 1))], {0},
     "chunks 4, 3: the first step's 3 is neither, nor 3 + 4"),
    ("emulator/draft-model", [("summary_only", ()), ("lose_draft", (0, 2))], {0},
     "22 decode tokens, S 17, 6 verify steps: 1 past the end, but 6 steps in 6 chunks are one a "
     "chunk and the last emitted 4 (full): no room"),
    # the emulator, n-gram; request 0: chunks 1,2,4,4,4,4,4,1, per-step 3,3,3,3,3,3 (as vLLM's
    # request 2 above); request 2: chunks 1,2,2,4,4,4,4,3, per-step 3,3,3,3,3
    ("emulator/ngram", [("lose_draft", (0, 2))], {0},
     "as vLLM's n-gram request 2: a chunk of 3 is three one-token steps, then six steps of 4 meet "
     "chunks 4, 4, 4, 4, 1"),
    ("emulator/ngram", [("move_draft", (0, 2, 0, 0))], {2},
     "request 2's first step accepts 4 > k (request 0's loss hides behind a one-token step)"),
    ("emulator/ngram", [("extra_on_stop", (0,))], {0},
     "its last step would accept 4 > k"),
    ("emulator/ngram", [("split_chunk", (0, 2))], {0},
     "as vLLM's n-gram request 2: six steps of 4 meet chunks 4, 4, 4, 4, 1 after"),
    ("emulator/ngram", [("shift_token", (0, 2))], {0},
     "as vLLM's n-gram request 2: chunks 2, 5, 3, then five steps of 4 for 4, 4, 4, 1"),
]  # fmt: skip


@pytest.mark.parametrize("per_step", [True, False], ids=["per-step record", "counts only"])
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_every_stored_stream_reconciles(name, per_step):
    stream = copy.deepcopy(STREAMS[name])
    if not per_step:
        summary_only(stream)
    rec = reconcile(stream)
    assert rec["exact"] is True and rec["requests_checked"] == len(stream["requests"]), rec


def test_the_corpus_has_merged_chunks_and_every_source():
    """Real vLLM and the emulator, a model drafter and n-gram, and chunks that merged steps."""
    kinds = {(n.split("/")[0], s["speculative_config"]["method"]) for n, s in STREAMS.items()}
    assert kinds == {(src, m) for src in ("emulator", "vllm-cpu") for m in ("draft_model", "ngram")}, kinds
    for name, s in STREAMS.items():
        steps = sum(len(r["per_step"] or []) for r in s["requests"])
        chunks = sum(sum(1 for n in r["chunks"][1:] if n > 0) for r in s["requests"])
        assert s["counter"]["drafts"] == steps and any(r["per_step"] for r in s["requests"]), name
        if s["speculative_config"]["method"] == "draft_model":
            assert steps > chunks, f"{name}: no chunk merged steps"


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}:{'+'.join(m for m, _ in c[1])}" for c in CASES])
def test_a_consistent_mutation_is_reported(case):
    name, mutations, broken, _why = case
    stream = copy.deepcopy(STREAMS[name])
    for mutation, args in mutations:
        MUTATIONS[mutation](stream, *args)
    assert sum(r["accepted"] for r in stream["requests"]) == stream["counter"]["accepted"]  # sums consistent
    rec = reconcile(stream)
    assert rec["exact"] is False, rec
    assert {r["index"] for r in rec["unexplained_requests"]} == broken, rec["unexplained_requests"]


HAND = json.loads((Path(__file__).parent / "data" / "reconcile_hand.json").read_text())["cases"]


def _hand(case: dict) -> dict:
    """A hand case (tests/data/reconcile_hand.json) through the summary: its config's k (or
    none), per-position counters only where the case has them (true: k of them; a number: that many)."""
    stream = {
        "k": 3,
        "requests": case["requests"],
        "counter": {
            "drafts": sum(r["verify"] for r in case["requests"]),
            "accepted": sum(r["accepted"] for r in case["requests"]),
        },
    }
    labels = case["per_position"]
    positions = [] if labels is False else [0.5] * (3 if labels is True else labels)
    figures = {
        "spec_decode": {
            "drafts": stream["counter"]["drafts"],
            "accepted_tokens": stream["counter"]["accepted"],
            "draft_tokens": stream["counter"]["drafts"] * 3,
            "per_position": positions,
        },
        "server": {"generation_tokens": sum(sum(r["chunks"]) for r in case["requests"])},
    }
    spec = case["speculative_config"]
    config: dict = {"clock": {"t0_ns": BASE * MS}, "load": {"concurrency": 1}}
    if spec is not None:
        config["speculative_config"] = json.dumps(spec)
    s = summarize(request_frame(_records(stream)), ([], []), config=config, server_figures=figures)
    return s["acceptance_client"]["reconciliation"]


@pytest.mark.parametrize("case", HAND, ids=[c["name"] for c in HAND])
def test_a_hand_case_gets_its_verdict(case):
    rec, want = _hand(case), case["expect"]
    assert rec["exact"] is want["exact"], (rec["checked"], rec["differences"])
    assert [r["index"] for r in rec["unexplained_requests"]] == want["broken"], rec["unexplained_requests"]
    if "off" in want:
        assert rec["unexplained"]["tokens"] == want["off"], rec["unexplained"]
    if "k_source" in want:
        assert rec["k_source"] == want["k_source"]
    if rec["k_source"] is None:  # the output says which rule was used
        assert "the weak rule" in rec["checked"], rec["checked"]
    else:
        assert f"k {rec['k']} from" in rec["checked"], rec["checked"]
