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


def _words(rng: np.random.Generator, n: int) -> str:
    return " ".join([_WORDS[w] for w in rng.integers(0, len(_WORDS), size=n).tolist()])


def _code(rng: np.random.Generator, n_words: int) -> str:
    """Python-looking code of about n_words whitespace-separated tokens."""
    lines, count, f = [], 0, 0
    while count < n_words:
        args = ", ".join(f"a{j}" for j in range(int(rng.integers(1, 4))))
        body = [f"def func_{f}({args}):"]
        for _ in range(int(rng.integers(2, 6))):
            v, c = int(rng.integers(0, 9)), int(rng.integers(1, 99))
            body.append(f"    v{v} = a0 * {c} + len(items_{v})")
        body.append(f"    return v{int(rng.integers(0, 9))}")
        lines.extend(body)
        count += sum(len(line.split()) for line in body)
        f += 1
    return "\n".join(lines)


# kind -> (make a prompt of about n words, mean prompt length, mean output length): the mean
# lengths of the data sets the study used for each kind (paper.md).
KINDS = {
    "chat": (lambda rng, n: "Please help me with this: " + _words(rng, n - 5) + "?", 355, 728),
    "summarization": (lambda rng, n: "Summarize the following article.\n" + _words(rng, n - 4), 838, 323),
    "math": (lambda rng, n: ("Solve the following math problem step by step. "
                             + " ".join(f"{_words(rng, 6)} {int(rng.integers(2, 500))}"
                                        for _ in range(max(2, (n - 15) // 7)))
                             + " How many are left in total?"), 94, 166),
    "code_edit": (lambda rng, n: ("Edit the following code as instructed.\n```python\n"
                                  + _code(rng, n - 26) + "\n```\nInstruction: add type hints "
                                  "and a docstring to every function."), 171, 262),
}


def kind_like(kind: str, num: int | None, *, input_len: int | None = None,
              output_len: int | None = None, ignore_eos: bool = False,
              seed: int = 0) -> Iterator[Request]:
    """Prompts of one kind (chat, summarization, math, code_edit) whose length and markers
    resemble the data sets of that kind; `max_tokens` = `output_len` (default: 8192 with the
    model stopping on its own, as in the study's offline runs)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    make, mean_in, _ = KINDS[kind]
    rng = np.random.default_rng(seed)
    n_in = input_len or mean_in
    i = 0
    while num is None or i < num:
        prompt = make(rng, max(20, int(rng.integers(int(n_in * 0.8), int(n_in * 1.2) + 1))))
        yield Request(id=f"{kind}-{i}", prompt=prompt, max_tokens=output_len or 8192,
                      ignore_eos=ignore_eos, sampling={"temperature": 0.0}, workload=kind,
                      category=kind)
        i += 1
