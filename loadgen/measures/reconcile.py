"""The client's accepted drafts by the written rule (docs/metrics.md, "Accepted drafts: the
client's count and the server's"), and their reconciliation with the server's counters.

Why a rule and not the stream alone: a streamed chunk is not always one engine step. vLLM
merges the outputs of several steps into one chunk when the client reads slower than the
engine writes, or on purpose (`stream_interval`), so a baseline's chunk of 2 tokens is no
accepted draft; and vLLM counts as accepted every draft its last verification step accepted,
also those max_tokens (or a stop) then cuts off, which no stream shows. The server's
per-request counts (vLLM's `metrics.speculative_decoding`, llama.cpp's `timings`) tell the two
apart request by request; without them the figure says what it could not tell.
"""

from __future__ import annotations

from typing import Any

import numpy as np

RULE = (  # docs/metrics.md, "Accepted drafts: the client's count and the server's"
    "accepted drafts = the drafts each verification step accepted, including those of a request's "
    "last step that max_tokens or a stop then cut off (vLLM counts them; no stream shows them); "
    "a chunk of several engine steps' tokens (coalesced) holds no accepted draft beyond its steps' own"
)

_ENDS = ("length", "stop")  # finish reasons that can cut a last step short


def _per_request(stream, steps, verify, server, finish, k):
    """Per request the server reported: (past_end, coalesced, unexplained) tokens.

    The tokens cut off are the engine's decode steps + the server's accepted drafts − the decode
    tokens streamed. The steps are at least the stream's decode chunks (one per step unless
    chunks merged steps) and at least the server's verify steps (each step that drafted): with
    every step drafting (a model drafter) that is exact also when chunks merged steps."""
    decode_tokens = stream + steps
    at_least = np.maximum(steps, np.nan_to_num(verify).astype(np.int64))
    room = np.iinfo(np.int64).max if k is None else k  # the last step's drafts, at most k
    cut = np.where(np.isin(finish, _ENDS), np.clip(at_least + server - decode_tokens, 0, room), 0)
    extra = stream - (server - cut)  # the stream's extra tokens beyond the delivered accepted drafts
    return cut, np.maximum(extra, 0), np.maximum(-extra, 0)


def _part(values: np.ndarray, pick: np.ndarray) -> dict:
    return {"tokens": int(values[pick].sum()), "requests": int((values[pick] > 0).sum())}


def reconcile(rows, chunks, measured: np.ndarray, spec_decode: dict | None, server: dict | None) -> dict:
    """`measured`'s accepted drafts by the rule (the figure) and, over every request the
    server's window saw, the client's count against its counters, with each difference's
    cause. Returns {"measured": {...}, "reconciliation": {...}}."""
    stream = chunks.row_accepted
    last = chunks.row_last_step
    reported = ~np.isnan(rows.array("server_accepted_tokens", float))
    server_acc = np.nan_to_num(rows.array("server_accepted_tokens", float)).astype(np.int64)
    finish = rows.col("finish_reason").astype(object).fillna("").to_numpy().astype(str)  # categorical, with gaps
    ok = rows.array("ok").astype(bool)
    k = len(spec_decode["per_position"]) if spec_decode and spec_decode.get("per_position") else None
    drafts = (spec_decode or {}).get("drafts")
    engine_seen = server is not None and bool(server.get("generation_tokens"))
    nothing_drafted = reported.sum() == 0 and ((spec_decode is None and engine_seen) or drafts == 0)

    past, coal, other = (np.zeros(rows.n, np.int64) for _ in range(3))
    if reported.any():
        verify = rows.array("server_spec_steps", float)[reported]
        p, c, o = _per_request(
            stream[reported], chunks.row_steps[reported], verify, server_acc[reported], finish[reported], k
        )
        past[reported], coal[reported], other[reported] = p, c, o
    if nothing_drafted:  # every extra token of a chunk was another step's: coalesced
        coal = stream.copy()
    by_rule = stream - coal + past  # per request; `other` is not by the rule
    if reported.any():
        source = "per_request"  # the server's per-request counts tell each request's cases apart
    elif nothing_drafted:
        source = "server_drafted_nothing"
    elif spec_decode is not None:
        source = "stream_with_counters"
    else:
        source = "stream_only"
    figure = {
        "accepted_tokens": int(by_rule[measured].sum()),
        "accepted_source": source,
        "stream_accepted_tokens": int(stream[measured].sum()),
        "past_end": _part(past, measured),
        "coalesced": _part(coal, measured),
        "unexplained": _part(other, measured),
    }
    seen = ok | (rows.array("n_chunks") > 0)  # what the server served: every request with a stream
    counter = (spec_decode or {}).get("accepted_tokens")
    counter = None if counter is None else int(counter)
    if nothing_drafted and counter is None:
        counter = 0  # no speculative config: vLLM registers no SD counter; it accepted nothing
    client = int(by_rule[seen].sum())
    out = {
        "rule": RULE,
        "source": source,
        "requests": int(seen.sum()),
        "accepted_tokens": client,
        "stream_accepted_tokens": int(stream[seen].sum()),
        "delivered_accepted_tokens": int((stream - coal)[seen].sum()),
        "past_end": _part(past, seen),
        "coalesced": _part(coal, seen),
        "unexplained": _part(other, seen),
        "server_counter": counter,
        "server_per_request": int(server_acc[reported & seen].sum()) if reported.any() else None,
        "exact": None if counter is None else client == counter,
        "differences": _differences(
            source, client, counter, past, coal, other, seen, ok, reported, last, finish, k, stream
        ),
    }
    return {"measured": figure, "reconciliation": out}


def _differences(source, client, counter, past, coal, other, seen, ok, reported, last, finish, k, stream) -> list[str]:
    """One line per cause of a difference between the stream, the rule and the counter."""
    lines: list[str] = []
    if past[seen].any():
        lines.append(
            f"{int(past[seen].sum())} drafts accepted past the end of {int((past[seen] > 0).sum())} requests "
            "(max_tokens or a stop cut their last step short): counted by the server, never streamed"
        )
    if coal[seen].any():
        lines.append(
            f"{int(coal[seen].sum())} tokens of {int((coal[seen] > 0).sum())} requests arrived in chunks that "
            "merged several engine steps (coalesced): not accepted drafts"
        )
    if other[seen].any():
        lines.append(
            f"{int(other[seen].sum())} accepted drafts of {int((other[seen] > 0).sum())} requests the server "
            "counted beyond what their streams and the max_tokens rule explain (a first chunk that merged steps?)"
        )
    if source == "stream_only":
        lines.append(
            "no server counters or per-request counts: a coalesced chunk cannot be told from accepted drafts; "
            "the count is the stream's"
        )
    if source == "stream_with_counters":
        lines.append(
            "no per-request counts (vLLM: --per-request-spec-decode-metrics summary): requests cut short "
            "and coalesced chunks cannot be told apart; the count is the stream's"
        )
        if counter is not None and counter != client:
            ends = seen & np.isin(finish, _ENDS)
            room = int(((k - (last[ends] - 1)).clip(min=0)).sum()) if k is not None else None
            gap = counter - client
            if gap > 0 and (room is None or gap <= room):
                lines.append(
                    f"the server counted {gap} more: within what max_tokens could cut off "
                    f"({'unbounded' if room is None else room} at most), as the rule allows"
                )
            elif gap < 0:
                lines.append(f"the stream shows {-gap} more than the server counted: coalesced chunks, at least")
            else:
                lines.append(f"the server counted {gap} more than the rule can explain")
    missing = seen & ~reported & (stream > 0) if source == "per_request" else np.zeros(len(seen), bool)
    if missing.any():
        lines.append(
            f"{int(missing.sum())} requests streamed multi-token chunks without a per-request count: "
            "their stream's count stands"
        )
    broken = seen & ~ok
    if broken.any() and counter is not None and counter != client:
        lines.append(
            f"{int(broken.sum())} requests failed or were cancelled: the server may count drafts they never streamed"
        )
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
