"""test_workloads.py's tests that start processes, apart from its tests that start none (what they test:
its docstring; tests/conftest.py, "What a test uses")."""

from __future__ import annotations

import json

import pytest

from tests.conftest import cli, run_cli
from tests.test_workloads import DATA, SECRET, _gpqa_csv
from workloads import open_workload

pytestmark = [pytest.mark.servers]


def test_gpqa_text_never_reaches_results_logs_or_screens(tmp_path):
    path = _gpqa_csv(tmp_path)
    w = open_workload(f"gpqa:{path}")
    assert w.sensitive and SECRET not in repr(w.records[0])
    out = tmp_path / "out"
    res = run_cli(
        "simulate",
        "--profile",
        "h100-llama-3.1-8b",
        "--workload",
        f"gpqa:{path}",
        "--concurrency",
        "2",
        "--num-requests",
        "6",
        "--output",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    for f in out.rglob("*"):
        assert SECRET.encode() not in f.read_bytes()
    assert SECRET not in res.stdout + res.stderr
    shown = cli("workloads", "show", f"gpqa:{path}")
    assert shown.returncode == 0 and SECRET not in shown.stdout and "withheld" in shown.stdout
    bad = tmp_path / "bad.csv"
    bad.write_text(path.read_text().replace("X-1", ""))
    err = cli("workloads", "show", f"gpqa:{bad}")
    assert err.returncode == 2 and SECRET not in err.stderr and "missing field 'Correct Answer'" in err.stderr


def test_workloads_cli(tmp_path):
    listed = cli("workloads", "list", "--data-dir", str(DATA))
    assert listed.returncode == 0
    for name in ("chat", "summarization", "code-edit", "math", "reasoning-aime", "reasoning-gpqa"):
        assert name in listed.stdout
    assert "edit_eval.jsonl" in listed.stdout and "offline stand-in" in listed.stdout
    shown = cli("workloads", "show", f"spec_bench:{DATA}/spec_bench/question.jsonl")
    assert "records    480" in shown.stdout and "translation 80" in shown.stdout
    bad = cli("workloads", "show", "poem:x.jsonl")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown workload format" in bad.stderr
    run = run_cli(
        "simulate",
        "--profile",
        "h100-llama-3.1-8b",
        "--workload",
        f"mt_bench:{DATA}/mt_bench/question.jsonl,turns=all",
        "--endpoint",
        "chat",
        "--concurrency",
        "4",
        "--num-requests",
        "20",
        "--seed",
        "2",
        "--output",
        str(tmp_path),
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["completed"] == 20 and summary["config"]["workload"]["records"] == 160
