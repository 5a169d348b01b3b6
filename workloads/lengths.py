"""Prompts of an exact token length, given a tokenizer (`tokenizers.Tokenizer`, e.g. a model's
tokenizer.json). Without one, lengths are counted in words: an approximation (1 word ~ 1 token
for common English words), and results say so."""

from __future__ import annotations

from functools import lru_cache

import numpy as np


class ExactLengths:
    """Builds prompts of exactly n tokens from a word list, one word at a time; checks the whole
    prompt afterwards (a tokenizer that merges across spaces makes the count approximate, and
    `exact` turns False)."""

    def __init__(self, tokenizer, words: tuple[str, ...]) -> None:
        self.tokenizer = tokenizer
        self.words = words
        self.exact = True
        counts = [len(e.ids) for e in tokenizer.encode_batch([" " + w for w in words], add_special_tokens=False)]
        self.cost = dict(zip(words, counts))
        self.single = [w for w, c in self.cost.items() if c == 1] or list(words)

    def prompt(self, rng: np.random.Generator, n: int) -> str:
        out, total = [], 0
        while total < n:
            w = self.words[int(rng.integers(0, len(self.words)))]
            if total + self.cost[w] > n:
                w = self.single[int(rng.integers(0, len(self.single)))]
            out.append(w)
            total += self.cost[w]
        text = " ".join(out)
        if len(self.tokenizer.encode(text, add_special_tokens=False).ids) != n:
            self.exact = False
        return text


@lru_cache(maxsize=8)
def for_tokenizer(tokenizer, words: tuple[str, ...]) -> ExactLengths:
    return ExactLengths(tokenizer, words)
