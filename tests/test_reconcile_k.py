"""The accepted-draft rule bounded wherever k is known: a server whose counters carry no
per-position labels (tests/misreporting_server.py: decode chunks 3, 2, 4 in 3 verify steps,
reported as 12 accepted drafts where at most 6 fit at k 3) is reported once the run declares its
drafter: `loadgen run --speculative-config`, a sweep cell's variant, a variant `loadgen check
--servers FILE --variant V` starts; with nothing declared, the weak rule lets it through and says it was used."""

from __future__ import annotations

import json

import pytest

from loadgen.results import cells as stored
from loadgen.run.target import Target
from servers.embedded import server_process
from tests.conftest import run_cli

pytestmark = pytest.mark.servers

DRAFT_K3 = '{"method": "draft_model", "model": "small", "num_speculative_tokens": 3}'
LOAD = ["--concurrency", "1", "--num-requests", "2", "--warmup", "0", "--workload", "chat,output=fixed:10"]


@pytest.fixture(scope="module")
def lying():
    with server_process(["tests.misreporting_server"], host="127.0.0.1", timeout_s=30, cpu=None) as srv:
        yield srv


def _rec(directory) -> dict:
    return json.loads((directory / "summary.json").read_text())["acceptance_client"]["reconciliation"]


def test_run_with_the_declared_k_reports_what_the_weak_rule_lets_through(lying, tmp_path):
    res = run_cli(
        "run", "--base-url", lying.url, *LOAD, "--speculative-config", DRAFT_K3, "--output", str(tmp_path / "k")
    )
    assert res.returncode == 0, res.stderr
    rec = _rec(tmp_path / "k")
    assert rec["exact"] is False and rec["k"] == 3 and rec["k_source"] == "speculative_config", rec
    assert rec["unexplained"] == {"tokens": 12, "requests": 2}  # 6 off each: only 6 fits
    assert "2 of 2 requests break the rule" in res.stdout + res.stderr
    config = json.loads((tmp_path / "k" / "summary.json").read_text())["config"]
    assert json.loads(config["speculative_config"])["num_speculative_tokens"] == 3
    weak = run_cli("run", "--base-url", lying.url, *LOAD, "--output", str(tmp_path / "weak"))
    assert weak.returncode == 0, weak.stderr
    rec = _rec(tmp_path / "weak")
    assert rec["exact"] is True and rec["k_source"] is None and "the weak rule" in rec["checked"], rec


def test_a_sweep_cell_and_run_servers_take_k_from_the_variant(lying, tmp_path):
    dep = tmp_path / "dep.toml"
    dep.write_text(
        f'model = "misreporting"\nengine = "external"\nurl = "{lying.url}"\n'
        "[variants.dm]\n"
        f'speculative_config = {{ method = "draft_model", model = "small", num_speculative_tokens = {3} }}\n'
    )
    out = tmp_path / "sweep"
    res = run_cli("sweep", "--servers", str(dep), "--variants", "dm", "--workloads", "chat,output=fixed:10",
                  "--concurrency", "1", "--num-requests", "2", "--quiet", "--output", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    rec = _rec(out / stored.CELLS / "dm/chat/c1")
    assert rec["exact"] is False and rec["k_source"] == "speculative_config" and rec["unexplained"]["requests"] >= 2
    # `loadgen check --servers FILE --variant V` (a run of a variant loadgen starts) records it too
    started = Target(servers=str(dep), variant="dm").speculative_config
    assert started is not None and json.loads(started)["num_speculative_tokens"] == 3
