"""Sweeps with repeats (`loadgen sweep --repeats N`) and what they are for: `loadgen compare`
judging changes against the run-to-run spread, so that two runs of the same sweep (A/A) mark
(almost) nothing while a real change in one cell is still found; the report giving each cell's
mean and the rounds' spread."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

# the A/A design and its bound, shared with the bench script that measures the bound's rates
from bench.aa_calibration import DESIGN as ARGS
from bench.aa_calibration import LEVELS, REPEATS, false_mark_bound
from loadgen.results import cells as stored
from tests.conftest import cli, run_cli, server_pids

pytestmark = [pytest.mark.servers, pytest.mark.timing]  # two sweeps compared run to run: runs alone (tests/conftest.py)


def _sweep(out: Path) -> Path:
    before = server_pids()
    res = run_cli(*ARGS, "--output", str(out), timeout=400)
    assert res.returncode == 0, res.stderr
    assert server_pids() <= before
    assert f"x {REPEATS} repeats = {2 * len(LEVELS) * REPEATS} cells" in res.stderr
    assert "(lowest-highest) of the rounds" in res.stdout  # the console table's spread
    return out


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory) -> tuple[Path, Path]:
    """The same sweep run twice (an A/A pair)."""
    root = tmp_path_factory.mktemp("repeats")
    return _sweep(root / "a"), _sweep(root / "b")


def test_each_cell_is_measured_in_rounds_on_fresh_servers(sweeps):
    a, _ = sweeps
    table = pd.read_parquet(a / stored.TABLE)
    assert len(table) == 2 * len(LEVELS) * REPEATS and (table["status"] == "ok").all()
    assert sorted(table["repeat"].unique()) == list(range(1, REPEATS + 1))
    for cell, g in table.groupby("cell"):
        assert sorted(g["repeat"]) == [1, 2, 3]
        assert sorted(g["path"]) == sorted([cell, f"{cell}.r2", f"{cell}.r3"])
    # each round started every server afresh: one log per variant and round, each a new process
    logs = sorted(p.name for p in (a / "servers").glob("*.log") if "probe" not in p.name)
    assert logs == sorted(
        f"{v}{'' if r == 1 else f'.r{r}'}.log" for v in ("baseline", "eagle") for r in range(1, REPEATS + 1)
    )
    pids = {
        json.loads((a / stored.CELLS / p / "summary.json").read_text())["cell"]["server"]["pid"]
        for p in table[table["variant"] == "eagle"]["path"]
    }
    assert len(pids) == REPEATS
    assert json.loads((a / stored.MANIFEST).read_text())["plan"]["repeats"] == REPEATS


def test_a_and_a_marks_almost_nothing_and_an_injected_change_is_found(sweeps, tmp_path):
    a, b = sweeps
    res = cli("compare", str(a), str(b), "--output", str(tmp_path / "aa.csv"), "--html", str(tmp_path / "aa.html"))
    assert res.returncode == 0, res.stderr
    aa = pd.read_csv(tmp_path / "aa.csv")
    assert len(aa) == 2 * len(LEVELS) * 4 and (aa["basis"] == "repeats").all()
    assert (aa["repeats_a"] == REPEATS).all() and (aa["repeats_b"] == REPEATS).all()
    # at most the marks a calibrated compare exceeds in 1 of 1,000 A/A runs (bench/aa_calibration.py
    # derives the bound and measures the rates it rests on)
    marked = int(aa["significant"].sum())
    assert marked <= false_mark_bound(len(aa)), aa[aa["significant"]].to_string()
    assert "cover run-to-run variation too" in res.stdout and "not covered" not in res.stdout
    assert "judged from the sweeps' repeats" in html.unescape((tmp_path / "aa.html").read_text())

    # +20% TPOT in one cell of B (every repeat of it): found
    slower = tmp_path / "slower"
    shutil.copytree(b, slower, ignore=shutil.ignore_patterns("report"))
    key = f"eagle/chat/c{LEVELS[0]}"
    for path in (slower / stored.CELLS).glob(f"{key}*/requests.parquet"):
        reqs = pd.read_parquet(path)
        reqs["tpot_ms"] *= 1.2
        reqs.to_parquet(path, index=False)
    res = cli("compare", str(a), str(slower), "--output", str(tmp_path / "ab.csv"))
    assert res.returncode == 0, res.stderr
    ab = pd.read_csv(tmp_path / "ab.csv").set_index(["cell", "metric"])
    row = ab.loc[(key, "tpot_p50_ms")]
    before = aa.set_index(["cell", "metric"]).loc[(key, "tpot_p50_ms")]  # the A/A change there
    assert row["significant"] and row["change_pct"] == pytest.approx(100 * (1.2 * (1 + before["change_pct"] / 100) - 1))
    assert row["ci_low_pct"] > 10 and row["ci_low_pct"] < 20 < row["ci_high_pct"] < 35
    # the others within the A/A bound for the comparisons without a change (Holm steps down: once
    # this clear change takes the first rank, the others are held to alpha / (m - 1), ...)
    assert int(ab["significant"].sum()) - 1 <= false_mark_bound(len(ab) - 1)


def test_without_repeats_on_one_side_compare_says_run_to_run_is_not_covered(sweeps, tmp_path):
    a, b = sweeps
    single = tmp_path / "single"
    shutil.copytree(b, single, ignore=shutil.ignore_patterns("report", "*.r2", "*.r3"))
    res = cli("compare", str(a), str(single), "--output", str(tmp_path / "x.csv"))
    assert res.returncode == 0, res.stderr
    frame = pd.read_csv(tmp_path / "x.csv")
    assert (frame["basis"] == "requests").all() and (frame["repeats_b"] == 1).all()
    assert "run-to-run variation (the same sweep run again on the same machine) is not covered" in res.stdout


def test_the_report_gives_each_cells_mean_and_the_rounds_spread(sweeps):
    a, _ = sweeps
    res = cli("report", str(a))
    assert res.returncode == 0, res.stderr
    out = a / "report"
    cells = pd.read_parquet(a / stored.TABLE)
    sp = pd.read_csv(out / "speedup.csv")
    assert len(sp) == len(LEVELS) and (sp["rounds"] == REPEATS).all()
    for _, r in sp.iterrows():
        at = cells[cells["level"] == r["level"]]

        def mean(v: str, at=at) -> float:
            return at[at["variant"] == v]["output_throughput_tok_s"].mean()

        assert r["speedup"] == pytest.approx(mean("eagle") / mean("baseline"))
        rounds = [
            at[(at["variant"] == "eagle") & (at["repeat"] == k)]["output_throughput_tok_s"].iloc[0]
            / at[(at["variant"] == "baseline") & (at["repeat"] == k)]["output_throughput_tok_s"].iloc[0]
            for k in range(1, REPEATS + 1)
        ]
        assert r["speedup_min"] == pytest.approx(min(rounds)) and r["speedup_max"] == pytest.approx(max(rounds))
    thr = pd.read_csv(out / "throughput.csv")
    assert len(thr) == 2 * len(LEVELS) and (thr["repeats"] == REPEATS).all()
    acc = pd.read_csv(out / "acceptance.csv")  # per measurement: a row per repeat
    assert len(acc) == 2 * len(LEVELS) * REPEATS and sorted(acc["repeat"].unique()) == [1, 2, 3]
    md = (out / "report.md").read_text()
    assert f"measured up to {REPEATS} times, in rounds on freshly started servers" in md
    assert "run-to-run variation is not covered" not in md
    page = (out / "report.html").read_text()
    assert '"error_y"' in page  # the chart's bars span the rounds


def test_a_figure_the_repeats_cannot_give_falls_back_to_the_requests(sweeps, tmp_path):
    """A repeat whose TPOT is missing (every request a single token, say) gives no log figure:
    that change is judged from the requests, said so in `basis`, and the rest from the repeats."""
    a, b = sweeps
    odd = tmp_path / "odd"
    shutil.copytree(b, odd, ignore=shutil.ignore_patterns("report"))
    path = odd / stored.CELLS / "baseline/chat/c8.r2" / "requests.parquet"
    reqs = pd.read_parquet(path)
    reqs["tpot_ms"] = float("nan")
    reqs.to_parquet(path, index=False)
    res = cli("compare", str(a), str(odd), "--output", str(tmp_path / "odd.csv"))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    frame = pd.read_csv(tmp_path / "odd.csv").set_index(["cell", "metric"])
    assert frame.loc[("baseline/chat/c8", "tpot_p50_ms"), "basis"] == "requests"
    assert (frame.drop(index=("baseline/chat/c8", "tpot_p50_ms"))["basis"] == "repeats").all()
    assert frame["p"].notna().all()
