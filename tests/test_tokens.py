"""Tokens per chunk and their provenance."""

import pytest

from loadgen.client.record import RequestRecord
from loadgen.measures.tokens import TokenizerError, apportion, load_tokenizer, resolve

pytestmark = pytest.mark.unit


def _rec(times, usage, chars, total=None, text=None):
    r = RequestRecord(0, "r", False, 0)
    r.chunk_t_ns.extend(times)
    r.chunk_usage.extend(usage)
    r.chunk_chars.extend(chars)
    r.usage_completion_tokens = total
    r.chunk_text = text
    return r


@pytest.mark.parametrize(
    "weights,total", [([5, 1, 1, 10], 20), ([1, 1, 1], 3), ([3, 0, 9], 7), ([2, 2], 1), ([0, 0, 0], 6)]
)
def test_apportion_sums_exactly_and_gives_each_chunk_a_token_when_it_can(weights, total):
    out = apportion(weights, total)
    assert out.sum() == total
    if total >= len(weights):
        assert out.min() >= 1


def test_fewer_tokens_than_chunks_leaves_one_token_per_chunk_but_the_lightest():
    assert apportion([4, 1, 5, 2, 7], 4).tolist() == [1, 0, 1, 1, 1]
    assert apportion([3, 3], 0).tolist() == [0, 0]


def test_continuous_usage_is_exact_and_drops_zero_token_chunks():
    t, n, src = resolve(_rec([10, 20, 30, 40], [1, 4, 4, 6], [3, 9, 1, 5], total=6))
    assert src == "continuous_usage"
    assert t.tolist() == [10, 20, 40] and n.tolist() == [1, 3, 2]


def test_final_usage_splits_by_text_length():
    t, n, src = resolve(_rec([10, 20, 30], [-1, -1, -1], [2, 8, 2], total=6))
    assert src == "final_usage" and n.sum() == 6 and n.tolist() == [1, 4, 1]


def test_no_usage_counts_one_token_per_chunk():
    t, n, src = resolve(_rec([10, 20, 30], [-1, -1, -1], [2, 8, 2]))
    assert src == "chunks" and n.tolist() == [1, 1, 1]


@pytest.fixture
def word_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate("alpha be cat delta echo".split())}}
    tok = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_tokenizer_counts_tokens_by_the_chunk_they_start_in(word_tokenizer):
    tok = load_tokenizer(str(word_tokenizer.parent))  # a directory holding tokenizer.json
    text = [" alpha", " be cat delta", " echo"]
    t, n, src = resolve(_rec([1, 2, 3], [-1, -1, -1], [len(x) for x in text], text=text), tok)
    assert src == "tokenizer" and n.tolist() == [1, 3, 1]
    t, n, src = resolve(_rec([1, 2, 3], [-1, -1, -1], [len(x) for x in text], total=5, text=text), tok)
    assert src == "final_usage+tokenizer" and n.tolist() == [1, 3, 1]


def test_missing_tokenizer_file_is_a_clear_error(tmp_path):
    pytest.importorskip("tokenizers")
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        load_tokenizer(str(tmp_path))  # an empty directory
