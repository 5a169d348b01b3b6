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

The rule that links them is checked request by request (loadgen.measures.rule): whether an
engine that works as vLLM's can have sent this request's chunks and counted what its server
says, with its verify steps, drafts accepted past the end only in its last step (at most
k − (that step's tokens − 1), only for finish length or stop) and steps that drafted nothing
only where the drafter can skip a step. A request that fits no such history is a difference,
named; `exact` holds only when every request fits and the per-request counts sum to the
counter. A sum that agrees while its requests do not is not exact.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from loadgen.client.columnar import flat
from loadgen.measures.rule import ENDS, Verdict, explain, explain_steps
from servers.emulator.spec import SpecError, parse

RULE = (  # docs/metrics.md, "Accepted drafts: three sources and the rule"
    "per request: server's accepted = stream's decode tokens - verify steps - steps that drafted nothing + "
    "drafts accepted past the end; the stream splits chunk by chunk into verify steps of 1..k+1 tokens and "
    "one-token steps; past the end only in the last step, at most k - (its tokens - 1), only for finish "
    "length or stop (loadgen/measures/rule.py)"
)

_NAMED = 5  # requests named in the reconciliation when they break the rule
_ALWAYS_DRAFTS = ("draft_model", "eagle", "eagle3", "mtp", "medusa")


def _as_dict(speculative_config) -> dict | None:
    """A speculative config given as a dict or its JSON, as a dict (None: none, or not JSON)."""
    spec = speculative_config
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError:
            return None
    return spec if isinstance(spec, dict) else None


def declared_k(speculative_config) -> int | None:
    """k, the most drafts a step proposes, as the server's speculative config (vLLM's words, a
    dict or its JSON) declares it: num_speculative_tokens (k by batch size never exceeds it;
    suffix decoding's default is its tree depth, as vLLM reads it); None where nothing declares
    one, and the rule then has no bound."""
    spec = _as_dict(speculative_config)
    if spec is None:
        return None
    try:
        parsed = parse(json.dumps(spec))
        return parsed.k if parsed is not None else None
    except SpecError:  # a method the emulator does not model still declares its k
        n = spec.get("num_speculative_tokens")
        return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def can_skip(speculative_config) -> bool:
    """Whether a decode step may have drafted nothing, from the server's speculative config (a
    dict or its JSON): yes for a lookup drafter (n-gram, suffix: a miss proposes nothing), k by
    batch size and adaptive verification (a step may get 0 drafts); a model drafter at a fixed
    k drafts every step. Unknown: yes (the weaker rule)."""
    spec = _as_dict(speculative_config)
    if spec is None:
        return True
    varying = spec.get("num_speculative_tokens_per_batch_size") or spec.get("enable_adaptive_verification")
    return spec.get("method") not in _ALWAYS_DRAFTS or bool(varying)


def _decode_chunks(rows, picked: np.ndarray) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Each picked row's chunks as decode tokens: the first chunk's beyond the prefill's one,
    then every later chunk's (llama.cpp: its bursts); and its server's per-step record where it
    sent one (vLLM's per_step_accepted)."""
    chunks: dict[int, list[int]] = {}
    per_step: dict[int, list[int]] = {}
    names = ["step_tokens"] + (["server_step_accepted"] if "server_step_accepted" in rows else [])
    for start, batch in rows.batches(names):
        values, off = flat(batch.column("step_tokens"))
        steps_col = batch.column("server_step_accepted") if len(names) > 1 else None
        for i in np.flatnonzero(picked[start : start + batch.num_rows]).tolist():
            steps = values[off[i] : off[i + 1]].tolist()
            chunks[start + i] = [steps[0] - 1, *steps[1:]] if steps else []
            if steps_col is not None and steps_col[i].is_valid:
                per_step[start + i] = steps_col[i].as_py()
    return chunks, per_step


def _per_request(rows, reported, server, verify, finish, k, skip):
    """Every reported request judged by the rule: against the server's per-step record where it
    sent one (rule.explain_steps, whose sum must be its count), else by its counts (rule.explain)."""
    chunks, per_step = _decode_chunks(rows, reported)
    out = {}
    for i in np.flatnonzero(reported).tolist():
        if i in per_step:
            record = per_step[i]
            v = explain_steps(chunks[i], record, k, finish[i], skip)
            if v.explained and sum(record) != int(server[i]):
                v = Verdict(False, off=abs(sum(record) - int(server[i])))
            if v.explained and not np.isnan(verify[i]) and len(record) != int(verify[i]):
                v = Verdict(False, off=abs(len(record) - int(verify[i])))  # its steps against its step count
            out[i] = v
            continue
        steps = None if np.isnan(verify[i]) else int(verify[i])
        out[i] = explain(chunks[i], int(server[i]), steps, k, finish[i], skip)
    return out


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


def _bound(declared: int | None, labels: int | None) -> tuple[int | None, str | None]:
    """k for the rule and where it came from: the speculative config's (declared_k), else the
    number of the server's per-position counter labels, else none (the weak rule)."""
    if declared is not None:
        return declared, "speculative_config"
    if labels is not None:
        return labels, "per_position_counters"
    return None, None


def reconcile(
    rows,
    chunks,
    measured: np.ndarray,
    spec_decode: dict | None,
    server: dict | None,
    skip: bool = True,
    k_declared: int | None = None,
) -> dict:
    """The three counts and their reconciliation. Returns {"measured": the stream's figure over
    `measured` (with the rule's parts where the server reported per request), "reconciliation":
    the three over every request the server's window saw}. `skip`: whether a decode step may
    have drafted nothing (can_skip); `k_declared`: k from the run's speculative config
    (declared_k), the per-position counters' labels then only a check on it."""
    stream, steps_seen = chunks.row_accepted, chunks.row_steps
    server_col = rows.array("server_accepted_tokens", float)
    reported = ~np.isnan(server_col)
    server_acc = np.nan_to_num(server_col).astype(np.int64)
    finish = rows.col("finish_reason").astype(object).fillna("").to_numpy().astype(str)  # categorical, with gaps
    ok = rows.array("ok").astype(bool)
    labels = len(spec_decode["per_position"]) if spec_decode and spec_decode.get("per_position") else None
    k, k_source = _bound(k_declared, labels)
    drafts = (spec_decode or {}).get("drafts")
    engine_seen = server is not None and bool(server.get("generation_tokens"))
    nothing_drafted = reported.sum() == 0 and ((spec_decode is None and engine_seen) or drafts == 0)
    seen = ok | (rows.array("n_chunks") > 0)  # what the server served: every request with a stream

    verdicts = _per_request(rows, reported & seen, server_acc, rows.array("server_spec_steps", float), finish, k, skip)
    past, coal, off = (np.zeros(rows.n, np.int64) for _ in range(3))
    broken = np.zeros(rows.n, bool)
    for i, v in verdicts.items():
        past[i], coal[i], off[i], broken[i] = v.past_end, v.merged, v.off, not v.explained
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
        "unexplained": {"tokens": int(off[measured].sum()), "requests": int(broken[measured].sum())},
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
        "requests_checked": len(verdicts),
        "steps_that_drafted_nothing": "allowed" if skip else "not allowed (a model drafter at a fixed k)",
        "k": k,
        "k_source": k_source,
        "k_counters": labels,
        "stream": seen_fig,
        "accepted_tokens": seen_fig["accepted_tokens"],
        "stream_accepted_tokens": seen_fig["raw"],
        "server_per_request": per_request,
        "server_counter": counter,
        # False: the counter is of drafts emitted (SGLang's, from tokens generated), not accepted
        "counter_has_past_end": (spec_decode or {}).get("past_end_counted", True),
        "past_end": _part(past, seen),
        "coalesced": _part(coal, seen),
        "unexplained": {"tokens": int(off[seen].sum()), "requests": int(broken[seen].sum())},
        "unexplained_requests": _named(rows, verdicts, finish, server_acc),
        "stream_unmatched": _part(unmatched, seen),
    }
    out["exact"] = _exact(out, reported, seen, nothing_drafted)
    out["checked"] = _checked(out, nothing_drafted)
    out["differences"] = _differences(out, seen, ok, reported, stream, finish, k)
    return {"measured": figure, "reconciliation": out}


def _named(rows, verdicts: dict, finish, server) -> list[dict]:
    """The first requests that break the rule, each with what its server said and what would fit."""
    ids = rows.col("request_id").astype(object).to_numpy() if "request_id" in rows else None
    index = rows.array("index") if "index" in rows else None
    out: list[dict] = []
    for i, v in sorted(verdicts.items()):
        if v.explained:
            continue
        if len(out) == _NAMED:
            break
        out.append(
            {
                "request": None if ids is None else str(ids[i]),
                "index": None if index is None else int(index[i]),
                "finish_reason": str(finish[i]),
                "server": int(server[i]),
                "fits": None if v.low is None else [v.low, v.high],
                "off": v.off,
            }
        )
    return out


def _exact(rec: dict, reported, seen, nothing_drafted: bool) -> bool | None:
    """Every request the window saw reported its count and satisfies the rule with it, every
    stream's tokens are the server's usage, and the per-request counts sum to the counter.
    None where a source is missing, or where there is nothing to reconcile (the server drafted
    nothing: every extra token of a chunk is a merged step, by the server's own word)."""
    counter, per_request = rec["server_counter"], rec["server_per_request"]
    if counter is None or nothing_drafted:
        return None
    if per_request is None or (reported[seen] == 0).any():
        return None  # the rule is checked per request, with the server's own counts
    clean = rec["unexplained"]["requests"] == 0 and rec["stream_unmatched"]["tokens"] == 0
    return clean and per_request == counter and not _k_disagrees(rec)


def _k_disagrees(rec: dict) -> bool:
    """The speculative config's k is not the number of the server's per-position counters."""
    return rec["k_source"] == "speculative_config" and rec["k_counters"] not in (None, rec["k"])


def _bound_said(rec: dict) -> str:
    """Which rule was used, in words: bounded by k (from where), or the weak rule."""
    if rec["k_source"] == "speculative_config":
        return f"k {rec['k']} from the run's speculative config"
    if rec["k_source"] == "per_position_counters":
        return f"k {rec['k']} from the server's per-position counters (no speculative config recorded)"
    return "the weak rule: no k declared, a step's drafts unbounded (loadgen run --speculative-config declares it)"


def _checked(rec: dict, nothing_drafted: bool) -> str:
    """What `exact` checked, in one sentence (the report's)."""
    n, bad = rec["requests_checked"], rec["unexplained"]["requests"]
    if nothing_drafted:
        return "nothing to reconcile: the server drafted nothing"
    if not n:
        return "not checked per request: the server reported no per-request counts"
    if bad:
        named = ", ".join(r["request"] or str(r["index"]) for r in rec["unexplained_requests"])
        return (
            f"{bad} of {n} requests break the rule ({rec['unexplained']['tokens']} drafts off; first: {named}; "
            f"{_bound_said(rec)})"
        )
    total = (
        ""
        if rec["server_counter"] is None
        else f"; their sum against the counter: {rec['server_per_request']} vs {rec['server_counter']}"
    )
    within = f"within the rule ({n} requests; {_bound_said(rec)})"
    return f"every request's accepted drafts agree with its stream {within}{total}"


def _differences(rec: dict, seen, ok, reported, stream, finish, k) -> list[str]:
    """One line per cause of a difference between the three counts."""
    lines: list[str] = []
    counter, per_request, fig = rec["server_counter"], rec["server_per_request"], rec["stream"]
    if _k_disagrees(rec):
        lines.append(
            f"the speculative config says k {rec['k']}, the server's counters have {rec['k_counters']} positions: "
            "the server does not run what was declared (the config's k bounds the rule)"
        )
    if rec["past_end"]["tokens"]:
        lines.append(
            f"{rec['past_end']['tokens']} drafts accepted past the end of {rec['past_end']['requests']} requests "
            "(max_tokens or a stop cut their last step short): counted by the server, never streamed"
        )
    if fig["coalesced_steps"]:
        what = "merged steps" if rec["source"] == "server_drafted_nothing" else "as the step counter shows"
        lines.append(
            f"{fig['coalesced_steps']} engine steps arrived inside other chunks (coalesced), {what} "
            f"({fig['raw']} tokens beyond one a chunk, {fig['coalesced_steps']} of them merged steps' own)"
        )
    told = rec["coalesced"]["tokens"] - fig["coalesced_steps"]
    if rec["source"] == "stream_with_step_counter" and per_request is not None and told > 0:
        lines.append(
            f"{told} coalesced steps the step counter did not show (steps that drafted nothing), found by the "
            "per-request rule: the stream's count is that much high"
        )
    if rec["unexplained"]["requests"]:
        lines.append(
            f"{rec['unexplained']['requests']} requests break the rule by {rec['unexplained']['tokens']} accepted "
            "drafts (the server's per-request count against the stream's chunks, its verify steps and the room "
            "past the end): not explained"
        )
    if rec["stream_unmatched"]["tokens"]:
        lines.append(
            f"{rec['stream_unmatched']['tokens']} tokens of {rec['stream_unmatched']['requests']} requests differ "
            "between the stream's chunks and the server's usage count: not explained"
        )
    emitted_only = not rec.get("counter_has_past_end", True)
    if (
        emitted_only
        and per_request is not None
        and counter is not None
        and per_request - counter == rec["past_end"]["tokens"]
    ):
        if per_request != counter:
            lines.append(
                f"the counter says {counter}, the per-request counts less the drafts past the end: the server's "
                "counters count drafts emitted (tokens generated), not accepted"
            )
    elif per_request is not None and counter is not None and per_request != counter:
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
        ends = seen & np.isin(finish, ENDS)
        room = int(ends.sum()) * k if k is not None else None
        if 0 < gap and (room is None or gap <= room):
            lines.append(
                f"the counter says {gap} more than the stream: within what max_tokens could cut off "
                f"({'unbounded' if room is None else room} at most); no per-request counts to check it "
                "request by request (vLLM: --per-request-spec-decode-metrics summary)"
            )
        elif gap:
            lines.append(f"the counter and the stream differ by {gap}, beyond what the rule explains")
    return lines


def note_resumed(rec: dict[str, Any], before: int) -> None:
    """A cell continued after a kill: the server's window holds its last part only."""
    if rec.get("server_counter") is None:
        return
    rec["exact"] = None
    rec["checked"] = rec.get("checked", "") + "; resumed after a kill: the counter covers its last part only"
    rec["differences"].append(
        f"the cell was resumed: the server's counters cover its last part only ({before} requests before it "
        "count on the client's side alone)"
    )
