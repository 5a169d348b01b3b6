"""A load shape is one file (docs/architecture.md, "The two families"): a step shape, N users
for T seconds then M, written into a copy of the source tree as `loadgen/shapes/step.py` and
nothing else, runs under `loadgen run` (with --workers 2), `loadgen simulate` and a sweep, and
the simulator agrees with the real run. The copy keeps the repository untouched while other
tests run beside this one."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servers.embedded import emulator_server
from tests.conftest import REPO

pytestmark = pytest.mark.servers

STEP = '''"""A step: N users for T seconds, then M (users never leave: N <= M)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.shapes.base import Flag, Shape, register


@register
@dataclass(frozen=True)
class Step(Shape):
    first: int
    after_s: float
    then: int
    mode = "step"
    closed = True
    OPTIONS = (Flag("step", str, "N users for T seconds, then M users.", metavar="N:T:M", what="a step"),)

    @classmethod
    def from_options(cls, given: Any, context: Any = None) -> Step:
        try:
            n, t, m = given.step.split(":")
            return cls(int(n), float(t), int(m))
        except ValueError as e:
            if "users" in str(e):
                raise
            raise ValueError(f"step {given.step!r}: give N:T:M, e.g. 2:3:6") from None

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.then or not self.after_s > 0:
            raise ValueError(f"step users: give 1 <= N <= M and T > 0 (users never leave), got "
                             f"{self.first}:{self.after_s:g}:{self.then}")

    @property
    def concurrency(self) -> int:  # type: ignore[override]
        return self.then

    def describe(self) -> dict:
        return {"mode": "step", "first": self.first, "after_s": self.after_s, "then": self.then,
                "concurrency": self.then, "rate": None, "arrival": None, "burstiness": None,
                "max_concurrency": None}

    @staticmethod
    def label(described: dict) -> str:
        return f"closed loop, {described['first']} users for {described['after_s']:g} s, then {described['then']}"

    def level(self) -> str:
        return f"step{self.first}-{self.then}"

    def join_s(self, gap_s: float) -> list[float]:
        return [k * gap_s for k in range(self.first)] + [
            max(self.after_s, k * gap_s) for k in range(self.first, self.then)]
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The source tree copied, with the step shape's file added to loadgen/shapes/ and nothing
    else changed (checked file by file)."""
    root = tmp_path_factory.mktemp("tree")
    for part in ("loadgen", "servers", "workloads"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "loadgen" / "shapes" / "step.py").write_text(STEP)
    for part in ("loadgen", "servers", "workloads"):
        for path in (root / part).rglob("*.py"):
            rel = path.relative_to(root)
            if rel != Path("loadgen/shapes/step.py"):
                assert filecmp.cmp(path, REPO / rel, shallow=False), rel
    return root


def loadgen(tree: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args], capture_output=True, text=True, env=env, cwd=tree, timeout=timeout
    )


STEP_ARGS = ["--step", "2:3:6", "--duration", "7", "--workload", "chat,output=fixed:64", "--seed", "5"]


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_the_new_shape_is_refused_as_its_family_refuses(tree):
    res = loadgen(tree, "simulate", "--profile", "h100-llama-3.1-8b", "--step", "6:4:2", "--output", str(tree / "x"))
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1].endswith(
        "--step users: give 1 <= N <= M and T > 0 (users never leave), got 6:4:2"
    ), res.stderr
    res = loadgen(tree, "simulate", "--profile", "h100-llama-3.1-8b", "--step", "2:4:6", "--concurrency", "3")
    assert res.returncode == 2 and "--step is a load of its own: drop --concurrency" in res.stderr, res.stderr
    res = loadgen(tree, "run", "--help")
    assert "--step N:T:M" in res.stdout


@pytest.mark.timing
def test_a_new_shape_runs_under_run_workers_and_simulate_alike(tree, tmp_path):
    """`loadgen run --step 2:3:6 --workers 2` on the emulator (no SD, as the simulation's
    default; at time scale 2, so that neither
    it nor the client falls behind on a slow machine) and `loadgen simulate` with the same
    shape, requests and seed: output throughput within 5%, and the users joining on the step."""
    sim = tmp_path / "sim"
    res = loadgen(tree, "simulate", "--profile", "h100-llama-3.1-8b", *STEP_ARGS, "--output", str(sim))
    assert res.returncode == 0, res.stderr
    real = tmp_path / "real"
    with emulator_server("meta-llama/Llama-3.1-8B-Instruct", "--seed", "5", "--time-scale", "2") as srv:
        res = loadgen(
            tree, "run", "--base-url", srv.url, *STEP_ARGS, "--workers", "2", "--quiet", "--output", str(real)
        )
    assert res.returncode == 0, res.stderr
    got, want = _summary(real), _summary(sim)
    step = {
        "mode": "step",
        "first": 2,
        "after_s": 3.0,
        "then": 6,
        "concurrency": 6,
        "rate": None,
        "arrival": None,
        "burstiness": None,
        "max_concurrency": None,
    }
    assert got["config"]["load"] == want["config"]["load"] == step
    assert got["config"]["workers"] == 2 and got["time_scale"] == 2.0
    assert not got["client_bound"], got["self_check"]["reasons"]
    assert got["output_throughput_tok_s"] == pytest.approx(want["output_throughput_tok_s"], rel=0.05)
    # the step itself: two users before 3 s, six after (each user keeps one request out)
    import pandas as pd

    frame = pd.read_parquet(real / "requests.parquet")
    t0 = got["config"]["clock"]["t0_ns"]
    sends = (frame["t_send_ns"] - t0) / 1e9
    ends = (frame["t_end_ns"] - t0) / 1e9
    assert max(int(((sends <= t) & (ends > t)).sum()) for t in sends[sends < 2.9]) <= 2
    assert max(int(((sends <= t) & (ends > t)).sum()) for t in sends[sends > 3.5]) > 2


def test_a_new_shape_runs_as_a_sweeps_load(tree, tmp_path):
    """A sweep takes the new shape's option as its load (one level: its peak users), in virtual
    time and on real servers alike, each cell recording the step."""
    for extra in (["--virtual"], ["--time-scale", "2"]):
        out = tmp_path / extra[0].strip("-")
        res = loadgen(
            tree,
            "sweep",
            "--step",
            "1:2:3",
            "--duration",
            "4",
            "--variants",
            "baseline,ngram",
            "--workloads",
            "chat,output=fixed:32",
            "--warmup",
            "0",
            "--quiet",
            *extra,
            "--output",
            str(out),
            timeout=240,
        )
        assert res.returncode == 0, res.stderr
        summaries = sorted(out.glob("cells/*/*/c3/summary.json"))
        assert len(summaries) == 2, sorted(p.relative_to(out) for p in out.rglob("summary.json"))
        for path in summaries:
            s = json.loads(path.read_text())
            assert s["config"]["load"]["mode"] == "step" and s["completed"] > 0
