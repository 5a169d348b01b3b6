"""Sampling as part of a workload (docs/workloads.md, "Sampling"): every request says its
temperature (a data set that sets none is sent greedy, never left to the server's default), the
workload syntax and the command line set it, bad values and disagreements are one line (exit 2),
and the summary and report say what was asked. What a request asked is read from the server's
own record of each body (the scripted server's --trace), not from loadgen's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.config import sampling_label
from tests.conftest import REPO, cli
from workloads import WorkloadError, open_workload

pytestmark = pytest.mark.unit

DATA_DIR = REPO.parent / "shared" / "datasets"


def test_a_data_set_that_sets_no_temperature_is_sent_greedy_and_options_win():
    plain = open_workload("code-edit", data_dir=str(DATA_DIR))
    assert all(r.sampling == {"temperature": 0.0} for r in plain.requests(20, 0))
    said = plain.describe()["sampling"]
    assert said["temperature"] == 0.0 and said["temperature_from"].startswith("loadgen's default")
    asked = open_workload("code-edit,temperature=0.7,top_p=0.8,top_k=20,seed=3", data_dir=str(DATA_DIR))
    assert all(r.sampling == {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "seed": 3} for r in asked.requests(5, 0))
    assert asked.describe()["sampling"]["temperature_from"] == "the workload (temperature= or --temperature)"
    # a generator's own temperature (the synthetic kinds: 0) is the request's; the option wins over it
    assert next(open_workload("synthetic:chat").requests(1, 0)).sampling == {"temperature": 0.0}
    assert next(open_workload("synthetic:chat,temperature=1").requests(1, 0)).sampling == {"temperature": 1.0}
    # sampled without top_p / top_k / seed: the summary names them as the server's to decide
    t1 = open_workload("synthetic:random,temperature=1").describe()["sampling"]
    assert t1["server_decides"] == ["top_p", "top_k", "seed"]
    assert sampling_label(t1) == (
        "temperature 1; the server's default top_p, top_k, seed (from the workload (temperature= or --temperature))"
    )


@pytest.mark.parametrize(
    "spec, says",
    [
        ("synthetic:random,temperature=-0.5", "temperature=-0.5: give a number >= 0"),
        ("synthetic:random,temperature=hot", "temperature=hot: give a number >= 0"),
        ("synthetic:random,temperature=nan", "temperature=nan: give a number >= 0"),
        ("synthetic:random,top_p=0", "top_p=0: give a number in (0, 1]"),
        ("synthetic:random,top_p=1.5", "top_p=1.5: give a number in (0, 1]"),
        ("synthetic:random,top_k=-2", "top_k=-2: give an integer"),
        ("synthetic:random,seed=1.5", "seed=1.5: give an integer"),
    ],
)
def test_bad_sampling_in_the_workload_syntax_is_refused(spec, says):
    with pytest.raises(WorkloadError, match=r"workload .*" + says.replace("(", r"\(").replace(")", r"\)")):
        open_workload(spec)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--temperature", "-1"], "--temperature -1.0: give a number >= 0"),
        (["--top-p", "2"], "--top-p 2.0: give a number in (0, 1]"),
        (["--workload", "synthetic:random,temperature=0", "--temperature", "0.7"], "--temperature 0.7 and workload"),
    ],
)
def test_bad_sampling_on_the_command_line_is_one_line(args, says):
    r = cli("run", "--base-url", "http://127.0.0.1:9", "--concurrency", "1", "--num-requests", "1", *args)
    assert r.returncode == 2 and says in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr


def test_sweep_and_capacity_refuse_the_same_in_one_line():
    r = cli("sweep", "--workloads", "chat,temperature=0", "--temperature", "1", "--dry-run")
    assert r.returncode == 2 and "--temperature 1.0 and workload 'chat,temperature=0'" in r.stderr, r.stderr
    r = cli("capacity", "--servers", "llama-3.1-8b", "--engine", "emulator", "--slo", "ttft_p99<=2s", "--top-k", "-3")
    assert r.returncode == 2 and "--top-k -3: give an integer" in r.stderr, r.stderr


def bodies(trace: Path, after: int = 0) -> list[dict]:
    """What each request asked, as the server recorded it (its --trace: a line a response)."""
    return [json.loads(line)["sampling"] for line in trace.read_text().splitlines()[after:]]
