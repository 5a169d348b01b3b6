"""Synthetic workloads that need no data set: offline, seeded, reproducible."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from workloads.request import Request

# Short, common English words: each is one token in the Llama, Qwen and GPT tokenizers, so a
# prompt of n words is close to n prompt tokens without needing a tokenizer.
_WORDS = (
    "the of and to in is it that for on was with he as at by this had not are but from or have "
    "an they which one you were her all she there would their we him been has when who will more "
    "no if out so said what up its about into than them can only other new some could time these "
    "two may then do first any my now such like our over man me even most made after also did "
    "many before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us great old year "
    "off come since against go came right used take three"
).split()


def random_lengths(
    num: int | None,
    *,
    input_len: int = 256,
    output_len: int = 128,
    range_ratio: float = 0.25,
    seed: int = 0,
    workload: str = "synthetic",
) -> Iterator[Request]:
    """Random prompts of about `input_len` words (uniform within +-range_ratio), asking for
    exactly `output_len` tokens (`ignore_eos`), greedy. `num=None` yields without end.

    Prompts are distinct random word sequences, so a prefix cache cannot shorten them.
    """
    if input_len < 1 or output_len < 1:
        raise ValueError("input_len and output_len must be >= 1")
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError("range_ratio must be in [0, 1)")
    rng = np.random.default_rng(seed)
    lo = max(1, int(round(input_len * (1.0 - range_ratio))))
    hi = max(lo, int(round(input_len * (1.0 + range_ratio))))
    i = 0
    while num is None or i < num:
        n = int(rng.integers(lo, hi + 1))
        prompt = " ".join([_WORDS[w] for w in rng.integers(0, len(_WORDS), size=n).tolist()])
        yield Request(
            id=f"{workload}-{i}",
            prompt=prompt,
            max_tokens=output_len,
            ignore_eos=True,
            sampling={"temperature": 0.0},
            workload=workload,
        )
        i += 1
