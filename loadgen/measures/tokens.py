"""Tokens per chunk, and where the count came from (provenance).

In order of preference:
- `continuous_usage`: the server put cumulative `usage.completion_tokens` on every chunk
  (vLLM's `continuous_usage_stats`): exact per chunk;
- `final_usage+tokenizer`: exact total from the final usage chunk, split over chunks by a
  user-given tokenizer;
- `final_usage`: exact total, split over chunks in proportion to their text length;
- `tokenizer`: total and split both from the user's tokenizer;
- `chunks`: no usage and no tokenizer: one token per chunk (a lower bound under SD).
Only `continuous_usage` makes per-chunk counts exact; the others are estimates and the
results say so.
"""

from __future__ import annotations

import bisect
from pathlib import Path

import numpy as np

from loadgen.client.record import RequestRecord


class TokenizerError(ValueError):
    pass


def load_tokenizer(spec: str):
    """A `tokenizers.Tokenizer` from a tokenizer.json file, a directory holding one, or a
    Hugging Face hub name (needs network)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TokenizerError("--tokenizer needs the 'tokenizers' package: pip install 'loadgen[tokenizer]'") from None
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    looks_local = spec.startswith(("/", ".", "~")) or spec.endswith(".json")
    if path.exists() or looks_local:
        if not path.is_file():
            raise TokenizerError(
                f"no tokenizer.json at {spec!r}; pass a tokenizer.json file or a directory holding one"
            )
        loader = lambda: Tokenizer.from_file(str(path))  # noqa: E731
    else:
        loader = lambda: Tokenizer.from_pretrained(spec)  # a hub name; needs network  # noqa: E731
    try:
        return loader()
    except Exception as e:  # tokenizers raises plain Exception subclasses
        raise TokenizerError(f"cannot load tokenizer {spec!r}: {e}") from None


def apportion(weights, total: int) -> np.ndarray:
    """Split `total` tokens over chunks in proportion to `weights`; every chunk gets at least
    one token when there are enough; integer counts that sum to `total` exactly. With fewer
    tokens than chunks (a server sending one token per chunk, a token's text split over two)
    each chunk but the lightest carries one: spreading by weight would invent multi-token
    chunks, and with them steps and acceptance that never happened."""
    w = np.asarray(weights, dtype=float)
    n = len(w)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    counts: np.ndarray
    if total < n:
        counts = np.zeros(n, dtype=np.int64)
        counts[np.sort(np.argsort(-w, kind="stable")[: max(total, 0)])] = 1
        return counts
    base = np.ones(n) if total >= n else np.zeros(n)
    rest = total - int(base.sum())
    share = np.maximum(w * total / w.sum() - base, 0.0) if w.sum() > 0 else np.ones(n)
    share = share * rest / share.sum() if share.sum() > 0 else np.full(n, rest / n)
    counts = base + np.floor(share)
    short = total - int(counts.sum())
    if short > 0:
        counts[np.argsort(-(share - np.floor(share)), kind="stable")[:short]] += 1
    return counts.astype(np.int64)


def _tokenizer_counts(tokenizer, texts: list[str]) -> np.ndarray:
    """Tokens of each chunk: the whole text is tokenized once, each token assigned to the
    chunk where it starts (so tokens are never split across chunk boundaries)."""
    ends = np.cumsum([len(t) for t in texts]).tolist()
    enc = tokenizer.encode("".join(texts), add_special_tokens=False)
    counts = np.zeros(len(texts), dtype=np.int64)
    for start, _ in enc.offsets:
        counts[min(bisect.bisect_right(ends, start), len(texts) - 1)] += 1
    return counts


def resolve(rec: RequestRecord, tokenizer=None) -> tuple[np.ndarray, np.ndarray, str]:
    """(chunk arrival times ns, tokens per chunk, source) for the chunks that carried tokens."""
    t, tokens, source = resolve_all(rec, tokenizer)
    keep = tokens > 0
    return t[keep], tokens[keep], source


def resolve_all(rec: RequestRecord, tokenizer=None) -> tuple[np.ndarray, np.ndarray, str]:
    """`resolve` for every recorded chunk, those counted as carrying 0 tokens too (aligned with
    the record's per-chunk arrays)."""
    t = np.frombuffer(rec.chunk_t_ns, dtype=np.int64) if rec.chunk_t_ns else np.zeros(0, np.int64)
    cum = np.frombuffer(rec.chunk_usage, dtype=np.int64) if rec.chunk_usage else np.zeros(0, np.int64)
    if len(t) and (cum >= 0).all():
        return t, np.diff(cum, prepend=0), "continuous_usage"
    total = rec.usage_completion_tokens
    if tokenizer is not None and rec.chunk_text is not None and len(t):
        counts = _tokenizer_counts(tokenizer, rec.chunk_text)
        if total is None:
            tokens, source = counts, "tokenizer"
        else:
            tokens, source = apportion(counts, total), "final_usage+tokenizer"
    elif total is not None:
        chars = np.frombuffer(rec.chunk_chars, dtype=np.int64).astype(float)
        chars[chars < 0] = np.nan  # chunks read by usage only: their length is unknown
        chars[np.isnan(chars)] = np.nanmean(chars) if (~np.isnan(chars)).any() else 1.0
        tokens, source = apportion(chars, total), "final_usage"
    else:
        tokens, source = np.ones(len(t), dtype=np.int64), "chunks"
    return t, tokens, source


def fill_token_ids(records: list[RequestRecord], prompts: dict[int, str], tokenizer) -> int:
    """For `run --token-ids --tokenizer` against a server that returned no token ids: each
        successful request's output ids from its streamed text, and its prompt ids from its prompt
        text (`prompts` by request index; chat turns joined, without the model's chat template,
        so n-gram matches against template tokens are missed; a conversation's later turns, whose
    prompts were built during the run, are left). Returns how many were filled."""
    filled = 0
    for rec in records:
        if (
            rec.token_ids is None
            or rec.token_ids
            or not rec.ok
            or rec.chunk_text is None
            or rec.index not in prompts
            or rec.turn > 1
            and rec.session
        ):
            continue
        rec.token_ids = tokenizer.encode("".join(rec.chunk_text), add_special_tokens=False).ids
        rec.prompt_token_ids = tokenizer.encode(prompts[rec.index], add_special_tokens=False).ids
        filled += 1
    return filled
