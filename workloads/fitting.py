"""Text for a trace's lengths: production's timing and lengths, with content whose acceptance is
realistic (random tokens understate speculative decoding, repeated filler inflates it).

Each trace request takes the text of the next request of a content workload (`--workload`), or,
without one, random common English words (the stated synthetic default); its prompt is that
text fitted to the trace's input length (cut, or continued with the content's next requests),
and it asks for exactly the trace's output length (`max_tokens` = it, `ignore_eos`). Lengths are
the engine's word rule (one whitespace-separated word is one token: exact for the emulator), or
exact tokens with a tokenizer (the content is encoded, cut at n tokens and decoded; where the
decoded text does not re-encode to n tokens, random words of exact length replace it, counted).

Trace lines with `hash_ids` (Mooncake): the prompt is one block of `block` tokens per hash id
(the last one shorter), each block's text decided by its id alone and starting with a token
naming it, so requests sharing a prefix of hash ids share exactly that many blocks of prompt
and no more (prefix caching sees what production saw).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from workloads.request import Request
from workloads.synthetic import _WORDS_TUPLE, _words
from workloads.traces import Trace

BLOCK = 512  # tokens per hash block in Mooncake's traces


def _texts(content, seed: int) -> Iterator[list[str]]:
    """Word lists of the content workload's requests, without end (random words without one)."""
    if content is None:
        rng = np.random.default_rng(seed)
        while True:
            yield _words(rng, 256).split()
    while True:
        got = False
        for req in content.requests(None if content.make is not None else len(content.records), seed):
            words = req.text().split()
            if words:
                got = True
                yield words
        if not got:
            raise ValueError(f"workload {content.spec!r} has no text to fit to a trace")


def _take(stream: Iterator[list[str]], n: int) -> list[str]:
    """n words: a fresh content request's, continued with the next ones when it is shorter."""
    out: list[str] = []
    while len(out) < n:
        out.extend(next(stream))
    return out[:n]


def _block(hash_id: int, n: int, seed: int) -> list[str]:
    rng = np.random.default_rng([seed, hash_id & 0x7FFFFFFFFFFFFFFF])
    return [f"blk{hash_id}"] + _words(rng, n - 1).split()


def trace_requests(
    trace: Trace, content=None, *, seed: int = 0, block: int = BLOCK, tokenizer=None, stats: dict | None = None
) -> Iterator[Request]:
    """One request per trace line, in the trace's order (see the module docstring). `stats`
    collects counts (`inexact_token_fits`)."""
    stream = _texts(content, seed)
    exact = None
    name = content.name if content is not None else "synthetic"
    for i in range(len(trace)):
        n, out = int(trace.input_len[i]), int(trace.output_len[i])
        ids = trace.hash_ids[i] if trace.hash_ids is not None else None
        prompt: str | None
        if ids:
            words: list[str] = []
            for h in ids:
                size = min(block, n - len(words))
                if size <= 0:
                    break
                words.extend(_block(h, size, seed))
            if len(words) < n:  # more prompt than its blocks: the rest from the content
                words.extend(_take(stream, n - len(words)))
            prompt = " ".join(words)
        elif tokenizer is None:
            prompt = " ".join(_take(stream, n))
        else:
            prompt = _fit_tokens(tokenizer, " ".join(_take(stream, n * 2)), n)
            if prompt is None:
                if exact is None:
                    from workloads.lengths import for_tokenizer

                    exact = for_tokenizer(tokenizer, _WORDS_TUPLE)
                prompt = exact.prompt(np.random.default_rng([seed, i]), n)
                if stats is not None:
                    stats["inexact_token_fits"] = stats.get("inexact_token_fits", 0) + 1
        yield Request(
            id=f"trace-{i}",
            prompt=prompt,
            max_tokens=out,
            ignore_eos=True,
            sampling={"temperature": 0.0},
            workload=f"trace+{name}",
            category="",
        )


def _fit_tokens(tokenizer, text: str, n: int) -> str | None:
    ids = tokenizer.encode(text, add_special_tokens=False).ids[:n]
    if len(ids) < n:
        return None
    cut = tokenizer.decode(ids)
    return cut if len(tokenizer.encode(cut, add_special_tokens=False).ids) == n else None
