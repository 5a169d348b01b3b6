"""Length statistics of a workload, in tokens with a tokenizer, else in words (~tokens)."""

from __future__ import annotations

import numpy as np

from workloads.request import Request


def lengths(texts: list[str], tokenizer=None) -> np.ndarray:
    if tokenizer is not None:
        return np.array([len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)])
    return np.array([len(t.split()) for t in texts])


def summary(requests: list[Request], tokenizer=None) -> dict:
    """Counts and length statistics (prompt; reference answer where the data has one)."""

    def describe(a: np.ndarray) -> dict | None:
        if a.size == 0:
            return None
        return {
            "mean": float(a.mean()),
            "p50": float(np.percentile(a, 50)),
            "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99)),
            "max": int(a.max()),
        }

    refs = [r.reference for r in requests if r.reference]
    return {
        "requests": len(requests),
        "unit": "tokens" if tokenizer is not None else "words (approximate tokens)",
        "prompt": describe(lengths([r.text() for r in requests], tokenizer)),
        "reference": describe(lengths(refs, tokenizer)) if refs else None,
        "max_tokens": describe(np.array([r.max_tokens for r in requests])),
    }
