"""Accepted drafts three ways, kept apart, and every difference between them explained by a
written rule and counted (docs/metrics.md, "Accepted drafts: three sources and the rule").

1. The stream's own count: each decode step's tokens beyond one, summed (the chunks, or
   llama.cpp's bursts: loadgen.measures.steps). A chunk is not always one engine step: vLLM
   merges several steps' tokens into one chunk when the client reads slower than the engine
   writes, or on purpose (`stream_interval`), and a merged step's own token then reads as an
   accepted draft. The stream tells those apart only with the server's step counter: each
   draft round (Δ`spec_decode_num_drafts`) is one decode step of one request, so at least
   (draft rounds − decode chunks) steps came inside other chunks; a server that drafted
   nothing had every extra token from merged steps. Without counters the stream cannot tell,
   and its figure says so. The server's per-request counts never enter this figure.
2. The server's per-request counts (vLLM's `metrics.speculative_decoding`, llama.cpp's
   `timings`), summed.
3. The server's counters' delta over the window.

The rule that links them, per request the server reported (steps = the engine's decode steps,
at least the stream's decode chunks and at least the server's own verify-step count):

    server's accepted = stream's decode tokens − steps + past_end
    coalesced steps   = steps − stream's decode chunks

where past_end (drafts the last step accepted that max_tokens or a stop then cut off: counted
by the server, never streamed) is 0..k and only for a request that ended by length or a stop.
A stream with more tokens than those steps and the count explain had more steps, merged into
its chunks (steps that drafted nothing, which no verify count shows); a server count beyond
what the rule's room explains, and a stream whose tokens are not the server's usage count, are
unexplained differences, named and counted: a stream off by one draft shows there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

RULE = (  # docs/metrics.md, "Accepted drafts: three sources and the rule"
    "per request: server's accepted = stream's decode tokens - engine decode steps + drafts accepted past "
    "the end (0..k, only for a request cut by max_tokens or a stop); engine decode steps = the stream's "
    "decode chunks + the steps merged into them (coalesced)"
)

_ENDS = ("length", "stop")  # finish reasons that can cut a last step short


def _per_request(decode_tokens, chunks, verify, server, finish, k):
    """Per request the server reported: (past_end, coalesced steps, unexplained tokens) by the
    rule, from its own numbers. The engine's steps are at least max(chunks, verify steps); a
    stream that shows more tokens than those steps and the server's count explain had more
    steps than that, merged into its chunks (steps that drafted nothing: n-gram misses, k 0 by
    batch size, which no verify count shows); a server count beyond what the stream's tokens,
    its steps and the room past the end explain is unexplained."""
    at_least = np.maximum(chunks, np.nan_to_num(verify).astype(np.int64))
    past = at_least + server - decode_tokens
    room = np.iinfo(np.int64).max if k is None else k
    kept = np.clip(past, 0, np.where(np.isin(finish, _ENDS), room, 0))
    steps = at_least + np.maximum(-past, 0)  # the steps the stream's tokens need
    return kept, steps - chunks, np.maximum(past - kept, 0)


def _part(values: np.ndarray, pick: np.ndarray) -> dict:
    return {"tokens": int(values[pick].sum()), "requests": int((values[pick] > 0).sum())}


def _stream_figure(stream, chunks, seen, measured, spec_decode, nothing_drafted) -> tuple[dict, dict, str]:
    """The stream's count over the window's requests and the measured ones, with the steps the
    step counter shows came coalesced (over the window; the measured requests' share of them
    by their chunks), and how the stream told them."""
    raw_seen, raw_measured = int(stream[seen].sum()), int(stream[measured].sum())
    if nothing_drafted:
        merged_seen, merged_measured, told = raw_seen, raw_measured, "server_drafted_nothing"
    elif spec_decode is not None and spec_decode.get("drafts") is not None:
        c_seen, c_measured = int(chunks[seen].sum()), int(chunks[measured].sum())
        merged_seen = max(0, int(spec_decode["drafts"]) - c_seen)
        merged_measured = round(merged_seen * c_measured / c_seen) if c_seen else 0
        told = "stream_with_step_counter"
    else:
        merged_seen = merged_measured = 0
        told = "stream_only"
    seen_fig = {"accepted_tokens": raw_seen - merged_seen, "raw": raw_seen, "coalesced_steps": merged_seen}
    measured_fig = {"accepted_tokens": raw_measured - merged_measured, "coalesced_steps": merged_measured}
    return seen_fig, measured_fig, told


def reconcile(rows, chunks, measured: np.ndarray, spec_decode: dict | None, server: dict | None) -> dict:
    """The three counts and their reconciliation. Returns {"measured": the stream's figure over
    `measured` (with the rule's parts where the server reported per request), "reconciliation":
    the three over every request the server's window saw}."""
    stream, steps_seen = chunks.row_accepted, chunks.row_steps
    decode_tokens = stream + steps_seen
    reported = ~np.isnan(rows.array("server_accepted_tokens", float))
    server_acc = np.nan_to_num(rows.array("server_accepted_tokens", float)).astype(np.int64)
    finish = rows.col("finish_reason").astype(object).fillna("").to_numpy().astype(str)  # categorical, with gaps
    ok = rows.array("ok").astype(bool)
    k = len(spec_decode["per_position"]) if spec_decode and spec_decode.get("per_position") else None
    drafts = (spec_decode or {}).get("drafts")
    engine_seen = server is not None and bool(server.get("generation_tokens"))
    nothing_drafted = reported.sum() == 0 and ((spec_decode is None and engine_seen) or drafts == 0)
    seen = ok | (rows.array("n_chunks") > 0)  # what the server served: every request with a stream

    past, coal, other = (np.zeros(rows.n, np.int64) for _ in range(3))
    if reported.any():
        verify = rows.array("server_spec_steps", float)[reported]
        past[reported], coal[reported], other[reported] = _per_request(
            decode_tokens[reported], steps_seen[reported], verify, server_acc[reported], finish[reported], k
        )
    # the stream's tokens (every chunk's, the first included) against the server's own usage count
    usage = rows.array("completion_tokens", float) if "completion_tokens" in rows else np.full(rows.n, np.nan)
    has_usage = ok & ~np.isnan(usage) & (rows.array("n_chunks") > 0)
    unmatched = np.where(has_usage, np.abs(np.nan_to_num(usage).astype(np.int64) - chunks.row_tokens), 0)

    seen_fig, measured_fig, told = _stream_figure(stream, steps_seen, seen, measured, spec_decode, nothing_drafted)
    figure = {
        **measured_fig,
        "accepted_source": told,
        "stream_accepted_tokens": int(stream[measured].sum()),
        "past_end": _part(past, measured),
        "coalesced": _part(coal, measured),
        "unexplained": _part(other, measured),
        "stream_unmatched": _part(unmatched, measured),
    }
    counter = (spec_decode or {}).get("accepted_tokens")
    counter = None if counter is None else int(counter)
    if nothing_drafted and counter is None:
        counter = 0  # no speculative config: vLLM registers no SD counter; it accepted nothing
    per_request = int(server_acc[reported & seen].sum()) if reported.any() else None
    out = {
        "rule": RULE,
        "source": told,
        "requests": int(seen.sum()),
        "stream": seen_fig,
        "accepted_tokens": seen_fig["accepted_tokens"],
        "stream_accepted_tokens": seen_fig["raw"],
        "server_per_request": per_request,
        "server_counter": counter,
        "past_end": _part(past, seen),
        "coalesced": _part(coal, seen),
        "unexplained": _part(other, seen),
        "stream_unmatched": _part(unmatched, seen),
    }
    out["exact"] = _exact(out, reported, seen, nothing_drafted)
    out["differences"] = _differences(out, seen, ok, reported, stream, finish, k, steps_seen)
    return {"measured": figure, "reconciliation": out}


def _exact(rec: dict, reported, seen, nothing_drafted: bool) -> bool | None:
    """The three agree by the rule: every request the server reported follows it (nothing
    unexplained, every stream's tokens the server's usage), the per-request counts sum to the
    counter, and the stream's count plus the drafts accepted past the end is the counter (the
    step counter told every coalesced step). None where a source is missing."""
    counter, per_request = rec["server_counter"], rec["server_per_request"]
    if counter is None:
        return None
    stream = rec["stream"]["accepted_tokens"]
    if nothing_drafted:
        return stream == counter == 0 and rec["stream_unmatched"]["tokens"] == 0
    if per_request is None or (reported[seen] == 0).any():
        return None  # past_end is known only per request, from the server's own counts
    clean = rec["unexplained"]["tokens"] == 0 and rec["stream_unmatched"]["tokens"] == 0
    return clean and per_request == counter and stream + rec["past_end"]["tokens"] == counter


def _differences(rec: dict, seen, ok, reported, stream, finish, k, chunks) -> list[str]:
    """One line per cause of a difference between the three counts."""
    lines: list[str] = []
    counter, per_request, fig = rec["server_counter"], rec["server_per_request"], rec["stream"]
    if rec["past_end"]["tokens"]:
        lines.append(
            f"{rec['past_end']['tokens']} drafts accepted past the end of {rec['past_end']['requests']} requests "
            "(max_tokens or a stop cut their last step short): counted by the server, never streamed"
        )
    if fig["coalesced_steps"]:
        lines.append(
            f"{fig['coalesced_steps']} engine steps arrived inside other chunks (coalesced), as the step counter "
            f"shows ({fig['raw']} tokens beyond one a chunk, {fig['coalesced_steps']} of them merged steps' own)"
        )
    told = rec["coalesced"]["tokens"] - fig["coalesced_steps"]
    if rec["source"] == "stream_with_step_counter" and per_request is not None and told > 0:
        lines.append(
            f"{told} coalesced steps the step counter did not show (steps that drafted nothing), found by the "
            "per-request counts: the stream's count is that much high"
        )
    if rec["unexplained"]["tokens"]:
        lines.append(
            f"{rec['unexplained']['tokens']} accepted drafts of {rec['unexplained']['requests']} requests break the "
            "rule (the server's per-request count against the stream's tokens and steps): not explained"
        )
    if rec["stream_unmatched"]["tokens"]:
        lines.append(
            f"{rec['stream_unmatched']['tokens']} tokens of {rec['stream_unmatched']['requests']} requests differ "
            "between the stream's chunks and the server's usage count: not explained"
        )
    if per_request is not None and counter is not None and per_request != counter:
        broken = int((seen & ~ok).sum())
        lines.append(
            f"the per-request counts sum to {per_request}, the counter says {counter}"
            + (f": {broken} requests failed or were cancelled" if broken else ": not explained")
        )
    if rec["source"] == "stream_only":
        lines.append(
            "no server counters: a coalesced chunk cannot be told from accepted drafts; the count is the stream's"
        )
    missing = seen & ~reported & (stream > 0) if per_request is not None else np.zeros(len(seen), bool)
    if missing.any():
        lines.append(f"{int(missing.sum())} requests streamed multi-token chunks without a per-request count")
    if per_request is None and counter is not None and rec["source"] == "stream_with_step_counter":
        gap = counter - fig["accepted_tokens"]
        ends = seen & np.isin(finish, _ENDS)
        room = int(ends.sum()) * k if k is not None else None
        if 0 < gap and (room is None or gap <= room):
            lines.append(
                f"the counter says {gap} more than the stream: within what max_tokens could cut off "
                f"({'unbounded' if room is None else room} at most), as the rule allows; no per-request "
                "counts to tell it (vLLM: --per-request-spec-decode-metrics summary)"
            )
        elif gap:
            lines.append(f"the counter and the stream differ by {gap}, beyond what the rule explains")
    return lines


def note_resumed(rec: dict[str, Any], before: int) -> None:
    """A cell continued after a kill: the server's window holds its last part only."""
    if rec.get("server_counter") is None:
        return
    rec["exact"] = None
    rec["differences"].append(
        f"the cell was resumed: the server's counters cover its last part only ({before} requests before it "
        "count on the client's side alone)"
    )
