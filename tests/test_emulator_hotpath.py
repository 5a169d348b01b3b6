"""The emulator's hot path is cheap and exact: its n-gram lookup decides as a brute-force scan
of the context does, and its SSE chunks from a per-request template are byte for byte the
chunks rendered from the whole object."""

from __future__ import annotations

import itertools
import random

import pytest

from servers.emulator.ngram import NgramIndex
from servers.openai_stream import StreamRenderer

pytestmark = pytest.mark.unit


def brute_force(tokens: list[int], min_n: int, max_n: int) -> int | None:
    """The longest n-gram (min_n..max_n) ending the context that occurs earlier, ending before
    its last token; the earliest among equally long ones; where its drafts would start."""
    total = len(tokens)
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        suffix = tokens[total - n :]
        for start in range(0, total - n):
            if tokens[start : start + n] == suffix:
                return start + n
    return None


@pytest.mark.parametrize("seed", range(4))
def test_the_ngram_index_decides_as_a_full_scan_does(seed):
    rng = random.Random(seed)
    for _ in range(300):
        lo = rng.randint(1, 4)
        hi = rng.randint(lo, 7)
        vocab = rng.randint(1, 5)  # few distinct tokens: many matches, many ties
        index = NgramIndex(lo, hi, [rng.randrange(vocab) for _ in range(rng.randint(0, 12))])
        for _ in range(25):
            assert index.match() == brute_force(index.tokens, lo, hi), (lo, hi, index.tokens)
            index.extend([rng.randrange(vocab) for _ in range(rng.randint(1, 3))])
    assert NgramIndex(3, 7, [1, 2, 3, 9, 1, 2, 3]).propose(2) == [9, 1]


@pytest.mark.parametrize(
    "chat,continuous,reason,text",
    list(
        itertools.product(
            [True, False],
            [True, False],
            [None, "stop", "length"],
            [" kalo mi", "", ' quote " and \\ and\nnewline', " é 世界"],
        )
    ),
)
def test_template_chunks_are_the_whole_objects_bytes(chat, continuous, reason, text):
    def renderer() -> StreamRenderer:
        return StreamRenderer(
            chat=chat,
            request_id="cmpl-0123",
            model='org/model "q"',
            created=1700000000,
            prompt_tokens=37,
            continuous_usage=continuous,
        )

    fast, whole = renderer(), renderer()
    for done in (1, 4, 128):
        assert fast.chunk(text, done, reason) == whole.chunk_object(text, done, reason)
