"""Workloads: every data set in ../shared/datasets read in place, deterministic samples,
synthetic generators, the catalog, bad data, and sensitive text that never reaches results."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from servers.emulator.content import tokenize
from servers.emulator.ngram import acceptance_lengths
from tests.conftest import REPO
from workloads import WorkloadError, open_workload

pytestmark = pytest.mark.unit

DATA = REPO.parent / "shared" / "datasets"


@pytest.fixture(scope="module", autouse=True)
def shared_data():
    assert DATA.is_dir(), f"the test data sets are expected at {DATA} (../shared/datasets beside the checkout)"


def load(spec: str, **kw):
    return open_workload(spec.format(d=DATA), **kw)


@pytest.mark.parametrize(
    "spec,count,categories",
    [
        ("spec_bench:{d}/spec_bench/question.jsonl", 480, 13),
        ("mt_bench:{d}/mt_bench/question.jsonl", 80, 8),
        ("gsm8k:{d}/gsm8k/test.jsonl", 1319, 1),
        ("humaneval:{d}/humaneval/HumanEval.jsonl.gz", 164, 1),
        ("instructcoder:{d}/instructcoder/edit_eval.jsonl", 194, 1),
        ("sharegpt:{d}/sharegpt/ShareGPT_V3_filtered_500.json", 500, 1),
    ],
)
def test_every_shared_data_set_loads_completely(spec, count, categories):
    w = load(spec)
    assert len(w.records) == count and w.skipped == 0
    assert len(w.categories()) == categories
    ids = [r.id for r in w.records]
    assert len(set(ids)) == count
    for r in w.records:
        assert r.text().strip() and r.max_tokens >= 1 and r.workload and r.category


def test_fields_and_references():
    ic = load("instructcoder:{d}/instructcoder/edit_eval.jsonl").records[0]
    assert "```python" in ic.prompt and ic.reference and ic.category == "code_edit"
    gsm = load("gsm8k:{d}/gsm8k/test.jsonl").records[0]
    assert "Janet" in gsm.prompt and gsm.reference.strip().endswith("18")
    he = load("humaneval:{d}/humaneval/HumanEval.jsonl.gz").records[0]
    assert he.prompt.startswith("from typing import List") and "Complete" in he.messages[0]["content"]


def test_turn_handling():
    first = load("mt_bench:{d}/mt_bench/question.jsonl")
    assert all(len(r.messages) == 1 and r.turn == 1 for r in first.records)
    both = load("mt_bench:{d}/mt_bench/question.jsonl,turns=all")
    assert len(both.records) == 160
    second = [r for r in both.records if r.turn == 2]
    assert len(second) == 80
    roles = [m["role"] for m in second[0].messages]
    assert roles == ["user", "assistant", "user"]
    assert second[0].prompt is None  # a multi-turn request has chat messages only
    sb = load("spec_bench:{d}/spec_bench/question.jsonl,turns=all")
    assert len(sb.records) == 480 + 80  # 80 of its questions have a second turn


def test_deterministic_sampling():
    w = load("gsm8k:{d}/gsm8k/test.jsonl")
    a = [r.id for r in w.requests(50, seed=3)]
    assert a == [r.id for r in w.requests(50, seed=3)]
    assert a != [r.id for r in w.requests(50, seed=4)]
    assert len(set(a)) == 50
    small = load("spec_bench:{d}/spec_bench/question.jsonl,category=coding")
    many = [r.id for r in small.requests(25, seed=1)]
    assert len(many) == 25 and sum("#2" in i for i in many) == 10 and sum("#3" in i for i in many) == 5


def test_category_filter_and_its_errors():
    w = load("spec_bench:{d}/spec_bench/question.jsonl", category="translation")
    assert len(w.records) == 80 and set(w.categories()) == {"translation"}
    with pytest.raises(WorkloadError, match="no records in category 'poetry'; categories: coding"):
        load("spec_bench:{d}/spec_bench/question.jsonl,category=poetry")
    with pytest.raises(WorkloadError, match="no categories"):
        load("gsm8k:{d}/gsm8k/test.jsonl", category="math")


def test_output_policies():
    w = load("instructcoder:{d}/instructcoder/edit_eval.jsonl,output=reference")
    r = w.records[0]
    got = next(x for x in w.requests(194, 0) if x.id == r.id)
    assert got.max_tokens == len(r.reference.split()) and got.ignore_eos
    fixed = next(load("gsm8k:{d}/gsm8k/test.jsonl,output=fixed:64").requests(1, 0))
    assert fixed.max_tokens == 64 and fixed.ignore_eos
    cap = next(load("gsm8k:{d}/gsm8k/test.jsonl,output=cap:512").requests(1, 0))
    assert cap.max_tokens == 512 and not cap.ignore_eos
    with pytest.raises(WorkloadError, match="output='lots'"):
        load("gsm8k:{d}/gsm8k/test.jsonl,output=lots")


def _lookup_share(requests) -> float:
    """Share of expected-output positions where one prompt-lookup step (min 3, max 7, the
    emulator's drafter) accepts at least one draft."""
    hits = total = 0
    for r in requests:
        _, prompt = tokenize(r.text())
        _, expected = tokenize(r.reference)
        acc = acceptance_lengths(prompt, expected, min_n=3, max_n=7, k=3)
        hits += sum(a > 1 for a in acc)
        total += len(acc)
    return hits / total


def test_ngram_finds_far_more_of_the_answer_in_code_edit_prompts_than_in_chat():
    code = load("instructcoder:{d}/instructcoder/edit_eval.jsonl").records
    chat = [
        r
        for r in load("spec_bench:{d}/spec_bench/question.jsonl").records
        if r.category in ("writing", "roleplay", "reasoning", "stem", "humanities", "extraction") and r.reference
    ]
    assert len(code) == 194 and len(chat) >= 15
    code_share, chat_share = _lookup_share(code), _lookup_share(chat)
    assert code_share > 0.3 and chat_share < 0.1, (code_share, chat_share)


@pytest.mark.parametrize(
    "content,spec,expect",
    [
        ('{"question": "a", "answer": "b"}\n{"question": "c",\n', "gsm8k", ":2: not valid JSON"),
        ('{"question": "a", "answer": "b"}\n{"answer": "b"}\n', "gsm8k", ":2: missing field 'question'"),
        ("", "gsm8k", "is empty"),
        ('{"category": "writing", "question_id": 1}\n', "spec_bench", ":1: field 'turns' must be a non-empty list"),
    ],
)
def test_bad_data_names_the_file_and_line(tmp_path, content, spec, expect):
    path = tmp_path / "data.jsonl"
    path.write_text(content)
    with pytest.raises(WorkloadError) as e:
        open_workload(f"{spec}:{path}")
    assert expect in str(e.value) and str(path) in str(e.value)


def test_skip_bad_counts_and_skips(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"question": "a", "answer": "1"}\nnot json\n{"answer": "x"}\n{"question": "b"}\n')
    w = open_workload(f"gsm8k:{path}", skip_bad=True)
    assert len(w.records) == 2 and w.skipped == 2
    assert ":2: not valid JSON" in w.bad[0] and ":3: missing field" in w.bad[1]


@pytest.mark.parametrize(
    "spec,expect",
    [
        ("poem:x.jsonl", "unknown workload format 'poem'"),
        ("nonesuch", "unknown workload 'nonesuch'; the catalog has agentic, chat"),
        ("synthetic:dance", "unknown synthetic kind 'dance'"),
        ("synthetic:random,input_len=many", "input_len='many' is not a valid value"),
        ("gsm8k:{d}/gsm8k/test.jsonl,turns=all", "unknown option 'turns'"),
        ("gsm8k:/no/such/file.jsonl", "no such file"),
    ],
)
def test_bad_specs_are_clear(spec, expect):
    with pytest.raises(WorkloadError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        load(spec)


@pytest.mark.skipif(importlib.util.find_spec("datasets") is not None, reason="datasets is installed")
def test_the_hub_without_datasets_says_what_to_install():
    with pytest.raises(WorkloadError, match=r"pip install 'loadgen\[hf\]'.*FORMAT:PATH"):
        open_workload("hf:openai/gsm8k")


def test_catalog_uses_local_data_or_says_it_uses_the_stand_in(monkeypatch):
    monkeypatch.delenv("LOADGEN_DATA_DIR", raising=False)
    offline = open_workload("code-edit")
    assert offline.records is None and "offline stand-in synthetic:code_edit" in offline.notice
    local = open_workload("code-edit", data_dir=str(DATA))
    assert local.notice is None and len(local.records) == 194 and local.name == "code-edit"
    chat = open_workload("chat", data_dir=str(DATA))
    assert len(chat.records) == 500 and chat.source.startswith("sharegpt:")
    summ = open_workload("summarization", data_dir=str(DATA))
    assert len(summ.records) == 80 and set(summ.categories()) == {"summarization"}
    fixed = open_workload("code-edit,output=fixed:128", data_dir=str(DATA))
    assert fixed.name == "code-edit" and {r.max_tokens for r in fixed.requests(20, 0)} == {128}
    assert all(r.ignore_eos for r in fixed.requests(20, 0))
    with pytest.raises(WorkloadError, match="option"):
        open_workload("chat,bogus", data_dir=str(DATA))


def test_synthetic_generators():
    w = open_workload("synthetic:random,input_len=100,output_len=200,output_dist=lognormal,sigma=0.5")
    rs = list(w.requests(400, 1))
    outs = np.array([r.max_tokens for r in rs])
    assert abs(outs.mean() - 200) < 20 and outs.std() > 50 and all(r.ignore_eos for r in rs)
    ins = np.array([len(r.prompt.split()) for r in rs])
    assert 75 <= ins.min() and ins.max() <= 125
    sp = list(open_workload("synthetic:shared_prefix,prefix_len=50,suffix_len=5,prefixes=2").requests(20, 0))
    heads = {r.prompt.split("\n")[0] for r in sp}
    assert len(heads) == 2 and all(len(r.prompt.split("\n")[0].split()) == 50 for r in sp)
    reasoning = next(open_workload("synthetic:reasoning").requests(1, 0))
    assert reasoning.max_tokens == 32768 and len(reasoning.prompt.split()) < 200
    edit = next(open_workload("synthetic:code_edit").requests(1, 0))
    assert "```python" in edit.prompt


def test_exact_token_lengths_with_a_tokenizer(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import BPE
    from tokenizers.pre_tokenizers import Whitespace
    from tokenizers.trainers import BpeTrainer

    tok = tokenizers.Tokenizer(BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.train_from_iterator(
        ["the of and to in is it that for on was with he as at by this"] * 3,
        BpeTrainer(vocab_size=60, special_tokens=["[UNK]"]),
    )
    w = open_workload("synthetic:random,input_len=80,input_dist=fixed", tokenizer=tok)
    rs = list(w.requests(30, 0))
    assert [len(tok.encode(r.prompt).ids) for r in rs] == [80] * 30  # exact, in tokens
    assert {len(r.prompt.split()) for r in rs} != {80}  # counting words would have been wrong
    assert w.token_lengths == "exact (tokenizer)"
    assert open_workload("synthetic:random").token_lengths.startswith("approximate")


SECRET = "Which isotope of xenorium decays by quadruple beta emission"


def _gpqa_csv(tmp_path):
    path = tmp_path / "gpqa_main.csv"
    rows = [
        {
            "Record ID": f"rec{i}",
            "Question": f"{SECRET} number {i}?",
            "Correct Answer": "X-1",
            "Incorrect Answer 1": "X-2",
            "Incorrect Answer 2": "X-3",
            "Incorrect Answer 3": "X-4",
        }
        for i in range(6)
    ]
    import csv

    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    return path


def test_formats_without_shared_samples_read_their_layouts(tmp_path):
    """CNN/DailyMail, AIME and the generic formats, on small files in their layouts."""
    import pandas as pd

    cnn = tmp_path / "cnn.jsonl"
    cnn.write_text(
        "\n".join(
            json.dumps({"id": f"c{i}", "article": f"Article {i} text " * 20, "highlights": "A short summary."})
            for i in range(5)
        )
    )
    w = open_workload(f"cnn_dailymail:{cnn},output=reference")
    r = next(w.requests(1, 0))
    assert len(w.records) == 5 and r.prompt.startswith("Summarize") and r.max_tokens == 3
    aime = tmp_path / "aime.parquet"
    pd.DataFrame(
        {"id": [1, 2], "problem": ["Find x if 2x = 4.", "Count the primes below 20."], "answer": ["2", "8"]}
    ).to_parquet(aime)
    a = open_workload(f"aime:{aime}")
    assert len(a.records) == 2 and a.records[0].max_tokens == 32768 and "\\boxed" in a.records[0].prompt
    csv_path = tmp_path / "mine.csv"
    pd.DataFrame({"q": ["hello", "bye"], "kind": ["greet", "farewell"], "ans": ["hi", "ciao"]}).to_csv(
        csv_path, index=False
    )
    g = open_workload(f"csv:{csv_path},prompt=q,reference=ans,category_field=kind", category="greet")
    assert [r.prompt for r in g.records] == ["hello"] and g.records[0].reference == "hi"
    chat = tmp_path / "chat.jsonl"
    chat.write_text(
        json.dumps({"id": "x", "conv": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]})
        + "\n"
    )
    m = open_workload(f"jsonl:{chat},messages=conv")
    assert m.records[0].prompt is None and len(m.records[0].messages) == 2
    with pytest.raises(WorkloadError, match="missing field 'text'"):
        open_workload(f"jsonl:{chat},prompt=text")


def test_optional_metadata_empty_or_absent_is_read_and_counted(tmp_path, capsys):
    """Spec-Bench-style files as others publish them: `"category": ""` or no category at all is
    not an error (the request has no category); what a request needs (turns) still is."""
    path = tmp_path / "question.jsonl"
    path.write_text(
        '{"question_id": 1, "category": "", "turns": ["a b"]}\n'
        '{"question_id": 2, "turns": ["c d"]}\n'
        '{"question_id": 3, "category": "math", "turns": ["e f"]}\n'
    )
    w = open_workload(f"spec_bench:{path}")
    assert [r.category for r in w.records] == ["", "", "math"] and w.repairs == {"no category": 2}
    assert w.skipped == 0
    assert len(open_workload(f"spec_bench:{path},category=math").records) == 1
    from workloads.describe import workload_lines

    lines = "\n".join(workload_lines(w, 3))
    assert "repaired   2 records read with no category (optional)" in lines and "(none) 2" in lines
