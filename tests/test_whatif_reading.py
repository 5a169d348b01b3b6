"""Trace files as they are found (loadgen/whatif/reading.py): each quirk of the study's own
files is repaired as its simulator reads it and counted; a line that cannot be a trace is a
counted skip; a file with nothing readable is one line. Answers worked by hand."""

from __future__ import annotations

import json

import pytest

from loadgen.whatif.acceptance_traces import TraceError
from loadgen.whatif.reading import read
from tests.conftest import cli

pytestmark = pytest.mark.unit

PROFILE = "h100-llama-3.1-8b"


def _write(path, *records) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return str(path)


def _one(path, **kw):
    traces, reading = read(path, **kw)
    assert len(traces) == 1
    return traces[0], reading


def test_drafts_counted_past_the_end_are_clipped(tmp_path):
    # n = 4: a step at i can emit at most n - i = 4, 3, 2, 1 tokens; the file says 2, 4, 3, 2
    t, r = _one(
        _write(
            tmp_path / "t.jsonl",
            {
                "id": "a",
                "prompt_token_ids": [1, 2],
                "generated_token_ids": [3, 4, 5, 6],
                "acc_eagle": {"acc_len": [2, 4, 3, 2]},
            },
        )
    )
    assert t.drafters["eagle"].acc_len.tolist() == [2, 3, 2, 1]
    assert r.repairs["acc_len values clipped"] == 3
    assert r.repairs["requests with acc_len values past their end, clipped to n - i"] == 1
    assert not r.skipped


def test_the_output_length_is_the_methods_own_array_length(tmp_path):
    longer = {
        "id": "long",
        "prompt_token_ids": [1],
        "generated_token_ids": [7, 8, 9],
        "acc_eagle": {"acc_len": [1, 1, 1, 1, 1]},
    }
    shorter = {
        "id": "short",
        "prompt_token_ids": [1],
        "generated_token_ids": [7, 8, 9],
        "acc_eagle": {"acc_len": [2, 1]},
    }
    traces, r = read(_write(tmp_path / "t.jsonl", longer, shorter))
    assert traces[0].generated_token_ids == [7, 8, 9, 0, 0]  # two tokens past the known ids
    assert traces[1].generated_token_ids == [7, 8] and traces[1].drafters["eagle"].acc_len.tolist() == [2, 1]
    assert r.repairs["output length taken from acc_len (generated_token_ids of another length)"] == 2
    # drafters that disagree: cut to the shortest (3), then clipped (acc_ngram[0] = 3 <= 3 stays)
    both = {
        "id": "b",
        "prompt_token_ids": [1],
        "generated_token_ids": [7, 8, 9, 10],
        "acc_ngram": {"acc_len": [3, 1, 1, 1], "proposed": [2, 0, 0, 0]},
        "acc_eagle": {"acc_len": [1, 2, 1]},
    }
    t, r = _one(_write(tmp_path / "b.jsonl", both))
    assert len(t.generated_token_ids) == 3 and t.drafters["ngram"].acc_len.tolist() == [3, 1, 1]
    assert t.drafters["ngram"].proposed.tolist() == [2, 0, 0]
    assert r.repairs["drafters' acc_len arrays of different lengths: cut to the shortest"] == 1


def test_a_missing_ngram_proposed_is_derived_by_prompt_lookup(tmp_path):
    # prompt 5 6 7 8, output 5 6 7 9, lookup 2..3. Before output i the context is the prompt plus
    # output[:i]: i=0 ends (7, 8), i=1 (8, 5): seen nowhere before, no match; i=2 ends (5, 6),
    # seen at 0: offers what followed it, 7 8 5 6 (4 drafts); i=3 ends (6, 7), seen at 1 (and
    # 5 6 7 at 0): offers 8 5 6 7. So proposed = 0, 0, 4, 4 (a step still proposes no more than
    # the tokens left after its bonus: policies.py caps it).
    rec = {
        "id": "p",
        "prompt_token_ids": [5, 6, 7, 8],
        "generated_token_ids": [5, 6, 7, 9],
        "acc_ngram": {"acc_len": [1, 1, 2, 1]},
    }
    t, r = _one(_write(tmp_path / "t.jsonl", rec), ngram_lookup=(2, 3))
    assert t.drafters["ngram"].proposed.tolist() == [0, 0, 4, 4]
    assert r.repairs["n-gram proposed derived by prompt lookup 2..3 over the token ids"] == 1
    # the file's acceptance says a draft was accepted at 0 where the lookup offers none: raised
    rec["acc_ngram"]["acc_len"] = [2, 1, 2, 1]
    t, r = _one(_write(tmp_path / "u.jsonl", rec), ngram_lookup=(2, 3))
    assert t.drafters["ngram"].proposed.tolist() == [1, 0, 4, 4]
    assert r.repairs["acc_ngram.proposed raised to acc_len - 1 where fewer drafts were offered than accepted"] == 1


def test_bare_acc_arrays_and_no_id(tmp_path):
    t, r = _one(
        _write(tmp_path / "t.jsonl", {"prompt_token_ids": [1], "generated_token_ids": [2, 3], "acc": [2, 1]}),
        acc_as="eagle3",
    )
    assert t.id == "line-1" and t.drafters["eagle3"].acc_len.tolist() == [2, 1]
    assert r.repairs["'acc' without a method read as acc_eagle3"] == 1
    assert r.repairs["acc_<method> given as a bare array: read as its acc_len"] == 1
    assert r.repairs["no id: named by its line"] == 1


GOOD = {
    "id": "g",
    "prompt_token_ids": [1, 2, 3],
    "generated_token_ids": [4, 5, 6, 7],
    "acc_eagle": {"acc_len": [2, 2, 2, 1]},
}

# a broken line beside a good one: skipped and counted under its reason
SKIPPED = {
    "truncated": ('{"id": "t", "prompt_token_ids": [1, 2', "not valid JSON"),
    "wrong types": (
        {"id": "w", "prompt_token_ids": "1 2", "generated_token_ids": [4], "acc_eagle": {"acc_len": [1]}},
        "wrong types",
    ),
    "NaN": (
        '{"id": "n", "prompt_token_ids": [1], "generated_token_ids": [4, 5], "acc_eagle": {"acc_len": [NaN, 1]}}',
        "wrong types",
    ),
    "negative": (
        {"id": "m", "prompt_token_ids": [1], "generated_token_ids": [4, 5], "acc_eagle": {"acc_len": [-2, 1]}},
        "values out of range",
    ),
    "empty arrays": (
        {"id": "e", "prompt_token_ids": [1], "generated_token_ids": [], "acc_eagle": {"acc_len": []}},
        "no generated tokens",
    ),
    "no acceptance": ({"id": "x", "prompt_token_ids": [1], "generated_token_ids": [4]}, "no acceptance"),
    "no prompt": ({"id": "y", "generated_token_ids": [4], "acc_eagle": {"acc_len": [1]}}, "no prompt_token_ids"),
    "a list": ([1, 2, 3], "not a JSON object"),
}


@pytest.mark.parametrize("case", sorted(SKIPPED))
def test_a_broken_line_is_a_counted_skip(tmp_path, case):
    line, reason = SKIPPED[case]
    traces, r = read(_write(tmp_path / "t.jsonl", GOOD, line))
    assert [t.id for t in traces] == ["g"]
    assert r.skipped == {reason: 1} and r.first[reason].startswith("line 2: ")
    assert r.to_json()["read"] == 1 and r.to_json()["lines"] == 2


def test_huge_values_are_clipped_not_overflowed(tmp_path):
    t, r = _one(_write(tmp_path / "t.jsonl", {**GOOD, "acc_eagle": {"acc_len": [10**30, 1e300, 2, 1]}}))
    assert t.drafters["eagle"].acc_len.tolist() == [4, 3, 2, 1] and r.repairs["acc_len values clipped"] == 2


def test_a_file_with_nothing_readable_is_one_line(tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "binary.jsonl").write_bytes(b"PAR1\x80\x81\xfe\n\xff\xfe")
    with pytest.raises(TraceError, match="empty.jsonl is empty"):
        read(tmp_path / "empty.jsonl")
    with pytest.raises(TraceError, match="is not a text file of JSON lines"):
        read(tmp_path / "binary.jsonl")
    with pytest.raises(TraceError, match=r"no readable trace in 2 line\(s\); first: line 1: "):
        read(_write(tmp_path / "bad.jsonl", "{", SKIPPED["negative"][0]))
    # one line not UTF-8 among good ones is a counted skip
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n\xff\xfe{}\n")
    traces, r = read(path)
    assert len(traces) == 1 and r.skipped == {"not UTF-8 text": 1}


def test_no_broken_results_directory_makes_traces_print_a_traceback(tmp_path):
    import pandas as pd

    cases = {
        "missing": tmp_path / "none",
        "empty": tmp_path / "empty",
        "garbage": tmp_path / "garbage",
        "columns": tmp_path / "columns",
        "summary": tmp_path / "summary",
    }
    for name in ("empty", "garbage", "columns", "summary"):
        cases[name].mkdir()
    (cases["garbage"] / "requests.parquet").write_bytes(b"PAR1 not parquet")
    (cases["garbage"] / "summary.json").write_text("{}")
    pd.DataFrame({"x": [1, 2]}).to_parquet(cases["columns"] / "requests.parquet")
    (cases["columns"] / "summary.json").write_text("{}")
    pd.DataFrame({"x": [1]}).to_parquet(cases["summary"] / "requests.parquet")
    (cases["summary"] / "summary.json").write_text("[1, 2]")
    for name, path in cases.items():
        res = cli("traces", str(path))
        assert res.returncode == 2 and "Traceback" not in res.stderr, (name, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and str(path) in res.stderr, (name, res.stderr)
