"""Acceptance traces from a measured run (`loadgen run --token-ids`): per successful request
past warm-up, its prompt and output token ids, the n-gram drafter's acceptance replayed exactly
over them, and, when the server speculated with a model drafter at fixed k, that drafter's
acceptance estimated from the tokens each engine step emitted (traces.estimate: censored at k).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from loadgen.whatif.acceptance_traces import Trace, TraceError, estimate, ngram

MODEL_DRAFTERS = ("eagle", "eagle3", "draft_model", "mtp")


def configured(config: dict) -> tuple[str | None, int]:
    """(method, k) of the speculative config a run's config records (a sweep's cell, the embedded
    emulator, a simulation); (None, 0) without one."""
    text = config.get("speculative_config")
    if not text:
        return None, 0
    try:
        d = json.loads(text)
    except (TypeError, ValueError):
        return None, 0
    if not isinstance(d, dict):
        return None, 0
    from servers.emulator.spec import ALIASES

    method = ALIASES.get(d.get("method") or "", d.get("method"))
    if method is None and "eagle" in str(d.get("model", "")).lower():
        method = "eagle3" if "eagle3" in str(d.get("model")).lower() else "eagle"
    k = d.get("num_speculative_tokens")
    return method, k if isinstance(k, int) else 0


def served_drafter(config: dict) -> tuple[str, int] | None:
    """(method, k) of the run's server, when its config says and it is a model drafter."""
    method, k = configured(config)
    return (method, k) if method in MODEL_DRAFTERS and k else None


def from_results(
    directory: Path, *, drafter: tuple[str, int] | None = None, ngram_lookup: tuple[int, int] = (5, 5)
) -> tuple[list[Trace], list[str]]:
    """The run's traces and notes (what was estimated, what was skipped). TraceError (one
    line) when the directory holds no run or the run kept no token ids."""
    try:
        frame = pd.read_parquet(directory / "requests.parquet")
        summary = json.loads((directory / "summary.json").read_text())
    except (OSError, ValueError) as e:
        raise TraceError(
            f"{directory} holds no run results (requests.parquet, summary.json): {getattr(e, 'strerror', None) or e}"
        ) from None
    config = summary.get("config") if isinstance(summary, dict) else None
    config = config if isinstance(config, dict) else {}
    missing = [
        c
        for c in ("request_id", "ok", "warmup", "step_tokens", "steps_source", "token_count_source")
        if c not in frame.columns
    ]
    if missing:
        raise TraceError(
            f"{directory / 'requests.parquet'} is not a loadgen run's request table (no column "
            f"{missing[0]!r}); give the directory of a `loadgen run --token-ids`"
        )
    if "output_token_ids" not in frame.columns:
        frame["output_token_ids"] = frame["prompt_token_ids"] = None
    measured = frame[frame["ok"].fillna(False).astype(bool) & ~frame["warmup"].fillna(False).astype(bool)]
    has_ids = measured["output_token_ids"].notna() & measured["prompt_token_ids"].notna()
    if not has_ids.any():
        raise TraceError(
            f"{directory}: the run kept no token ids; run it again with --token-ids "
            "(vLLM returns them from 0.10.2 on; with --tokenizer, loadgen tokenizes the text itself)"
        )
    drafter = drafter or served_drafter(config)
    notes = []
    if drafter is None:
        notes.append(
            "n-gram only: no model drafter to estimate (if the server ran one at fixed k, give --drafter METHOD:K)"
        )
    lo, hi = ngram_lookup
    traces, mismatched, unreadable = [], 0, 0
    inexact = set()
    for row in measured[has_ids].itertuples():
        try:
            prompt = [int(x) for x in row.prompt_token_ids]
            output = [int(x) for x in row.output_token_ids]
        except (TypeError, ValueError, OverflowError):
            unreadable += 1
            continue
        if not output:
            continue
        acc = {"ngram": ngram(prompt, output, min_n=lo, max_n=hi)}
        if drafter is not None:
            try:
                acc[drafter[0]] = estimate(row.step_tokens, len(output), drafter[1])
            except (TypeError, ValueError):
                mismatched += 1
                continue
            if row.steps_source != "chunks" or row.token_count_source != "continuous_usage":
                inexact.add(f"{row.steps_source}/{row.token_count_source}")
        traces.append(Trace(str(row.request_id), prompt, output, acc))
    if drafter is not None:
        notes.append(
            f"acc_{drafter[0]}: estimated from this run at k={drafter[1]} (tokens per engine step); "
            f"censored at {drafter[1]} drafts: figures for more drafts are extrapolated (docs/whatif.md)"
        )
    if inexact:
        notes.append(
            f"tokens per step were not counted per chunk by the server ({', '.join(sorted(inexact))}): "
            "the estimate inherits their error (docs/metrics.md)"
        )
    if mismatched:
        notes.append(f"{mismatched} requests skipped: their steps' tokens do not add up to their token ids")
    if unreadable:
        notes.append(f"{unreadable} requests skipped: their token ids are not lists of whole numbers")
    skipped = int((~has_ids).sum())
    if skipped:
        notes.append(f"{skipped} requests without token ids skipped")
    return traces, notes
