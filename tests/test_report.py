"""`loadgen report` and `loadgen compare` on a sweep of the emulated engine, whose behaviour is
known: n-gram ahead of EAGLE on code editing and behind it on chat, and speedups that fall as
load grows (the study's pattern, docs/emulator.md). What the report does with a sweep is not
about real time, so the sweep is simulated (`sweep --virtual`: the same cells, manifest and
summaries, in seconds); the report of a sweep measured in real time, with its flags, time scales
and repeats, is checked on the real sweeps of test_acceptance_axis, test_repeats and below (SD
that never pays)."""

from __future__ import annotations

import html as html_lib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest

from loadgen.results import cells
from tests.conftest import cli, run_cli, server_pids

pytestmark = pytest.mark.engines

DATA = Path(__file__).resolve().parents[2] / "shared" / "datasets"
TOP = 16  # the sweep's levels: 1 and TOP users
FIGURES = {
    "throughput",
    "speedup",
    "latency",
    "frontier",
    "acceptance",
    "acceptance_length",
    "per_position",
    "steps",
    "waste",
    "per_request",
}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    before = server_pids()
    out = tmp_path_factory.mktemp("report") / "sweep"
    res = run_cli(
        "sweep",
        "--servers",
        "llama-3.1-8b",
        "--engine",
        "emulator",
        "--variants",
        "baseline,ngram,eagle",
        "--workloads",
        "chat,output=fixed:128,code-edit,output=fixed:128",
        "--data-dir",
        str(DATA),
        "--concurrency",
        f"1,{TOP}",
        "--duration",
        "3",
        "--virtual",
        "--quiet",
        "--output",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    assert server_pids() <= before
    return out


@pytest.fixture(scope="module")
def report(sweep) -> Path:
    res = cli("report", str(sweep))
    assert res.returncode == 0, res.stderr
    assert "report.html" in res.stdout
    return sweep / "report"


def csv(report: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(report / f"{name}.csv")


def test_the_tables_show_the_emulators_known_behaviour(report):
    sp = csv(report, "speedup").set_index(["workload", "variant", "level"])["speedup"]
    for level in (1, TOP):
        assert sp["code-edit", "ngram", level] > sp["code-edit", "eagle", level]
        assert sp["chat", "ngram", level] < sp["chat", "eagle", level]
    for workload in ("chat", "code-edit"):
        for variant in ("ngram", "eagle"):
            assert 1 < sp[workload, variant, TOP] < sp[workload, variant, 1]
    best = csv(report, "best_variant").set_index(["workload", "level"])["best_variant"]
    assert best["code-edit", 1] == "ngram" and best["chat", 1] == "eagle"
    be = csv(report, "break_even")
    assert len(be) == 4 and be["break_even_level"].isna().all()
    assert be["verdict"].str.startswith(f"pays at every level measured (up to {TOP})").all()


def test_acceptance_waste_and_per_request_tables(report):
    acc = csv(report, "acceptance")
    sd = acc[acc["variant"] != "baseline"]
    assert (sd["acceptance_rate"].between(0, 1)).all() and (sd["mean_acceptance_length"] > 1).all()
    # vLLM-style chunks: the client sees every step; without per-request counts (this deployment
    # has none) the drafts accepted past max_tokens are the server's alone, so the client's count
    # is the stream's, a little under the server's, and the reconciliation says why
    assert (sd["accepted_source"] == "stream_with_step_counter").all() and sd["reconciled"].isna().all()
    assert (sd["client_accepted_tokens"] == sd["client_stream_accepted_tokens"]).all()
    assert sd["client_over_server"].between(0.95, 1.0).all()
    base = acc[acc["variant"] == "baseline"]
    # a baseline: nothing to reconcile (the server drafted nothing), and the table says so
    assert (base["client_accepted_tokens"] == 0).all() and base["reconciled"].isna().all()
    assert (base["reconciliation"] == "nothing to reconcile: the server drafted nothing").all()
    steps = csv(report, "steps")
    assert steps.groupby(["workload", "variant"])["share"].sum().round(9).eq(1).all()
    assert set(steps.loc[steps["variant"] == "baseline", "tokens_per_step"]) == {1}
    assert steps.loc[steps["variant"] == "eagle", "tokens_per_step"].max() == 4  # k = 3
    waste = csv(report, "waste")
    assert set(waste["variant"]) == {"ngram", "eagle"} and (waste["rejected_per_generated_token"] > 0).all()
    assert waste["est_rejected_verify_share"].between(0, 1, inclusive="neither").all()  # h100 profile known
    pos = csv(report, "per_position")
    assert set(pos["position"]) == {0, 1, 2}
    # acceptance at each position is no higher than at the one before
    for _, g in pos.groupby(["workload", "variant", "level"]):
        assert g.sort_values("position")["acceptance"].is_monotonic_decreasing
    per = csv(report, "per_request")
    assert (per["requests"] > 0).all() and len(per) == 12


def test_every_output_is_written(report):
    assert {p.stem for p in report.glob("*.png")} == FIGURES
    tables = {
        "throughput",
        "speedup",
        "break_even",
        "best_variant",
        "latency",
        "acceptance",
        "per_position",
        "steps",
        "waste",
        "per_request",
        "breakdown",  # the emulator's profile prices its SD cells' steps (docs/metrics.md, "Time breakdown")
    }
    # cells whose servers were sampled through their windows (a window over a second long: docs/metrics.md,
    # "Over time") add their timeline
    sampled = any(
        json.loads(p.read_text()).get("timeline") for p in (report.parent / "cells").glob("*/*/*/summary.json")
    )
    tables |= {"timeline"} if sampled else set()
    assert {p.stem for p in report.glob("*.csv")} == tables == {p.stem for p in report.glob("*.parquet")}
    md = (report / "report.md").read_text()
    linked = set(re.findall(r"\]\(([^)]+\.png)\)", md))
    assert {Path(p).stem for p in linked} == FIGURES and all((report / p).is_file() for p in linked)
    html = (report / "report.html").read_text()
    # the HTML shows the interactive speedup chart where report.md shows speedup.png
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', html)) == len(FIGURES) - 1
    assert "<table>" in html
    assert 'id="speedup-chart"' in html and "<details>" in html
    assert not re.search(r'<script[^>]+src=|<link[^>]+href="http', html)  # nothing fetched when viewed


_SCIENTIFIC = re.compile(r"(?<![\w.])\d+(\.\d+)?[eE][+-]?\d+(?![\w])")


def _visible(html: str) -> str:
    """The page's text and attributes without its scripts and embedded images."""
    html = re.sub(r"<script.*?</script>", " ", html, flags=re.S)
    return re.sub(r'data:image/png;base64,[^"]+', " ", html)


def test_no_number_in_scientific_notation(report):
    for text in ((report / "report.md").read_text(), _visible((report / "report.html").read_text())):
        found = _SCIENTIFIC.findall(text)
        assert not _SCIENTIFIC.search(text), found[:5]


def test_the_decision_summary_says_what_the_tables_say(report):
    """Each workload's sentence names, for each load range, the best variant of the table and
    its speedups as the table has them; the break-even table's verdict closes it."""
    md = (report / "report.md").read_text()
    lead = [line.strip("*") for line in md.splitlines() if line.startswith("**On ") or line.startswith("**How sure")]
    best = csv(report, "best_variant")
    assert len(lead) == 3
    for workload in ("chat", "code-edit"):
        (sentence,) = [s for s in lead if s.startswith(f"On {workload}:")]
        _check_sentence(sentence, best[best["workload"] == workload])
        assert f"Speculative decoding pays (or is even) at every load measured (up to {TOP} users)" in sentence
    assert lead[-1].startswith("How sure: every cell was simulated in virtual time (sweep --virtual)")
    assert "in virtual time (every cell simulated: sweep --virtual)" in md


def _how_sure_counts_the_flags(report: Path) -> None:
    """A measured sweep's 'how sure' sentence counts the flagged cells of the tables."""
    md = (report / "report.md").read_text()
    (sure,) = [line.strip("*") for line in md.splitlines() if line.startswith("**How sure")]
    cells = csv(report, "throughput")  # every cell, the baseline's too
    flagged = sum(1 for f in cells["flags"] if isinstance(f, str) and f)
    assert (
        f"How sure: {flagged} of {len(cells)} cells flagged"
        if flagged
        else f"How sure: none of the {len(cells)} cells is flagged"
    ) in sure


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_html_report_renders_in_headless_chromium(report, tmp_path):
    exe = _chromium()
    if exe is None:
        if os.environ.get("LOADGEN_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is not installed (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    url = (report / "report.html").as_uri()
    # networking off: every host name resolves nowhere, no background fetches
    common = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=10000",
        "--disable-background-networking",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--window-size=1280,900",
    ]
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*common, "--hide-scrollbars", f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True
    )
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.std() > 0.05  # not one colour
    assert (pixels.mean(axis=-1) < 0.9).mean() > 0.03  # a real share of the first screen is drawn on
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    loaded = re.search(r'data-images-loaded="(\d+)/(\d+)"', dom)
    assert loaded and loaded.group(1) == loaded.group(2) == str(len(FIGURES) - 1)
    attr = lambda name: json.loads(html_lib.unescape(re.search(f'{name}="([^"]*)"', dom).group(1)))  # noqa: E731
    decision, chart = attr("data-decision-box"), attr("data-chart-box")
    assert 0 <= decision[0] < decision[1] <= chart[0] and chart[1] <= 900 and chart[2] > 200  # both on the first screen
    points = attr("data-chart-points")  # [workload, variant, level, speedup, tok/s, flags] read from the chart
    sp = csv(report, "speedup").set_index(["workload", "variant", "level"])
    assert len(points) == len(sp)
    for workload, variant, level, speedup, tok_s, flags in points:
        row = sp.loc[(workload, variant, int(level))]
        assert speedup == pytest.approx(row["speedup"], rel=1e-9)
        assert tok_s == pytest.approx(row["output_throughput_tok_s"], rel=1e-9)
        assert flags == (row["flags"] if isinstance(row["flags"], str) else "")


def _check_sentence(sentence: str, best: pd.DataFrame) -> None:
    """Every 'S.SSx at L' in the sentence is the table's best speedup at load L, every level's
    winner (a speedup over 1.02) is named, and the first and last loads are there."""
    by_level = best.set_index("level")
    pairs = re.findall(r"(\d+\.\d\d)x at ([\d,]+)", sentence)
    assert pairs or (best["speedup"] <= 1.02).all()  # a speedup for each range where SD pays
    for speedup, level in pairs:
        assert float(speedup) == pytest.approx(by_level.loc[int(level.replace(",", "")), "speedup"], abs=0.005)
    for _level, r in by_level.iterrows():
        assert (r["best_variant"] if r["speedup"] > 1.02 else "no speculative decoding") in sentence
    assert f"from {by_level.index.min()} " in sentence or f"at {by_level.index.min()} " in sentence


def test_the_decision_summary_of_a_sweep_where_sd_never_pays(tmp_path):
    """Synthetic acceptance pinned near nothing (acceptance length 1.05): speculative decoding
    costs at every load; the summary says so, and that no variant pays. A property of the cost
    model and the report, not of real time: the sweep is virtual (no machine can distort it)."""
    out = tmp_path / "sweep"
    res = run_cli(
        "sweep",
        "--servers",
        "llama-3.1-8b-current",
        "--engine",
        "emulator",
        "--variants",
        "baseline,eagle3-synthetic",
        "--acceptance-lengths",
        "1.05",
        "--workloads",
        "chat,output=fixed:64",
        "--data-dir",
        str(DATA),
        "--concurrency",
        "1,8",
        "--duration",
        "2",
        "--virtual",
        "--quiet",
        "--output",
        str(out),
        timeout=400,
    )
    assert res.returncode == 0, res.stderr
    res = cli("report", str(out))
    assert res.returncode == 0, res.stderr
    report = out / "report"
    md = (report / "report.md").read_text()
    (sentence,) = [line.strip("*") for line in md.splitlines() if line.startswith("**On chat")]
    best = csv(report, "best_variant")
    assert (best["best_variant"] == "baseline").all()
    assert (csv(report, "speedup")["speedup"] < 1).all()
    _check_sentence(sentence, best)
    assert "from 1 to 8 users, no speculative decoding (baseline)" in sentence
    assert sentence.endswith("No speculative-decoding variant pays at any load measured.")
    # a virtual sweep's report says what it is (the flags' count: tests/test_acceptance_axis.py's real sweep)
    assert "every cell was simulated in virtual time" in md


def test_a_partial_or_broken_sweep_gives_a_partial_report(sweep, tmp_path):
    copy = tmp_path / "partial"
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("report"))
    shutil.rmtree(copy / cells.CELLS / "eagle" / "chat" / f"c{TOP}")  # not run yet
    (copy / cells.CELLS / "ngram" / "code-edit" / "c1" / "summary.json").write_text("{ not json")  # broken
    res = cli("report", str(copy))
    assert res.returncode == 0, res.stderr
    md = (copy / "report" / "report.md").read_text()
    assert "1 of 12 planned cells are missing" in md and f"eagle/chat/c{TOP}" in md
    assert "could not be read" in md and "ngram/code-edit/c1" in md
    assert f"eagle/chat/c{TOP}" in res.stderr and "Traceback" not in res.stderr
    sp = csv(copy / "report", "speedup")
    assert len(sp) == 6  # 8 ratios less the two whose cell is gone


def test_a_single_runs_directory_gets_its_report_too(sweep, tmp_path):
    """`loadgen report DIR` on one run (`loadgen run --output`, here killed before its summary:
    summarized from its journal first) and on one sweep cell's directory: the same tables and
    charts, for one cell, and a lead that says what the run measured."""
    run = tmp_path / "run"
    res = run_cli(
        "run", "--concurrency", "2", "--num-requests", "12", "--output-len", "24", "--quiet", "--output", str(run)
    )
    assert res.returncode == 0, res.stderr
    (run / "summary.json").unlink()  # as a run killed at its end leaves it
    res = cli("report", str(run))
    assert res.returncode == 0, res.stderr
    md = (run / "report" / "report.md").read_text()
    assert "One run (run (eagle)) on synthetic:random at 2 users: 12 requests" in md
    latency = csv(run / "report", "latency")
    assert len(latency) == 1 and latency["ttft_p50_ms"].iloc[0] > 0
    assert (run / "report" / "per_request.png").is_file() and (run / "summary.json").is_file()
    cell = sweep / cells.CELLS / "eagle" / "chat" / "c1"
    res = cli("report", str(cell), "--output", str(tmp_path / "cell-report"))
    assert res.returncode == 0, res.stderr
    md = (tmp_path / "cell-report" / "report.md").read_text()
    assert "One run (eagle) on chat at 1 users" in md and len(csv(tmp_path / "cell-report", "acceptance")) == 1


@pytest.mark.parametrize("case", ["no_dir", "no_manifest", "bad_manifest", "no_cells"])
def test_bad_results_directories_are_one_line(sweep, tmp_path, case):
    target = tmp_path / "x"
    if case != "no_dir":
        target.mkdir()
    if case == "bad_manifest":
        (target / cells.MANIFEST).write_text("{ broken")
    if case == "no_cells":
        shutil.copy(sweep / cells.MANIFEST, target / cells.MANIFEST)
    res = cli("report", str(target))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    [line] = res.stderr.strip().splitlines()
    assert line.startswith("loadgen: error: ") and str(target) in line


def test_compare_finds_a_real_change_and_no_change_against_itself(sweep, tmp_path):
    same = cli("compare", str(sweep), str(sweep), "--output", str(tmp_path / "same.csv"))
    assert same.returncode == 0, same.stderr
    frame = pd.read_csv(tmp_path / "same.csv")
    assert len(frame) == 12 * 4 and not frame["significant"].any() and (frame["change_pct"] == 0).all()
    slower = tmp_path / "slower"
    shutil.copytree(sweep, slower, ignore=shutil.ignore_patterns("report"))
    key = f"eagle/chat/c{TOP}"  # ~30 requests: a clear interval
    path = slower / cells.CELLS / key / "requests.parquet"
    reqs = pd.read_parquet(path)
    reqs["ttft_ms"] *= 1.5
    reqs.to_parquet(path, index=False)
    res = cli(
        "compare",
        str(sweep),
        str(slower),
        "--output",
        str(tmp_path / "diff.csv"),
        "--html",
        str(tmp_path / "diff.html"),
    )
    assert res.returncode == 0, res.stderr
    page = (tmp_path / "diff.html").read_text()
    assert 'id="compare-chart"' in page and "1 of 48 changes significant after Holm" in page
    assert "run-to-run variation" in res.stdout and not _SCIENTIFIC.search(_visible(page))
    diff = pd.read_csv(tmp_path / "diff.csv").set_index(["cell", "metric"])
    row = diff.loc[(key, "ttft_p50_ms")]
    assert row["significant"] and row["change_pct"] == pytest.approx(50.0)
    assert row["ci_low_pct"] > 0
    assert diff.drop(index=(key, "ttft_p50_ms"))["change_pct"].eq(0).all()
    assert re.search(rf"{re.escape(key)}\s+ttft_p50_ms .*\+50\.0%.*\*", res.stdout)
    bad = cli("compare", str(sweep), str(tmp_path))
    assert bad.returncode == 2 and "holds no sweep" in bad.stderr


def test_summary_is_consistent_with_cells(sweep):
    """The report reads cells from their summaries; cells.parquet holds the same rows."""
    table = pd.read_parquet(sweep / cells.TABLE)
    keys = {json.loads(p.read_text())["cell"]["key"] for p in (sweep / cells.CELLS).glob("*/*/*/summary.json")}
    assert set(table["path"]) == keys and len(keys) == 12


def test_traces_in_the_results_add_a_what_if_section(sweep, tmp_path):
    """Acceptance traces (here the simulator's, exact) put in a sweep's directory: the report
    evaluates them on the model's cost profile at the sweep's concurrency levels, keeps
    whatif.json and shows the section."""
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("report"))
    res = run_cli(
        "simulate",
        "--profile",
        "h100-llama-3.1-8b",
        "--concurrency",
        "4",
        "--num-requests",
        "8",
        "--workload",
        "synthetic:chat",
        "--output-len",
        "24",
        "--output",
        str(tmp_path / "sim"),
        "--acceptance-traces",
        str(copy / "traces.jsonl"),
    )
    assert res.returncode == 0, res.stderr
    res = cli("report", str(copy))
    assert res.returncode == 0, res.stderr
    assert "what-if evaluated here over traces.jsonl on profile h100-llama-3.1-8b" in res.stderr
    doc = json.loads((copy / "whatif.json").read_text())
    assert doc["traces"] == 8 and doc["drafters"][0] == "ngram"
    wide = pd.read_csv(copy / "report" / "whatif.csv").set_index("policy")
    assert list(wide.columns) == ["realisable", "B=1", f"B={TOP}"]  # the sweep's levels
    assert (wide.loc["none"].drop("realisable") == 1.0).all()
    # every drafter of the profile is in the emulator's traces; the combination takes the best of all
    assert doc["drafters"] == ["ngram", "draft_model", "eagle", "eagle3"]
    combined = "combination oracle (ngram+draft_model+eagle+eagle3)"
    for single in ("ngram oracle", "eagle oracle <=5", "draft_model oracle <=5"):
        assert (wide.loc[combined].drop("realisable") >= wide.loc[single].drop("realisable") * 0.97).all(), single
    md = (copy / "report" / "report.md").read_text()
    assert "## What-if: fixed k, oracles and combined drafters" in md and "whatif.png" in md
    assert "Best realisable policy per batch size: B=1:" in md and f"B={TOP}:" in md
    gap = doc["gap"]  # the best realisable policy's share of the best oracle, per batch size
    assert set(gap) == {"1", str(TOP)} and all(0 < g["share"] <= 1 for g in gap.values())
    assert f"best oracle's throughput: B=1: {gap['1']['share']:.0%}" in md
    # the HTML: the section's own interactive chart, its points the table's, plotly embedded once
    page = (copy / "report" / "report.html").read_text()
    assert page.count('id="whatif-chart"') == 1 and page.count("plotly.js v") == 1
    fig = json.loads(re.search(r'Plotly\.newPlot\(\s*"whatif-chart",\s*(\[.*?\]),\s*\{', page, re.S).group(1))
    points = {(p[0], int(p[1])): p[2] for trace in fig for p in trace["customdata"]}
    assert points == {(pol, int(c[2:])): wide.loc[pol, c] for pol in wide.index for c in ("B=1", f"B={TOP}")}
    assert "Recommended k schedule (vLLM's num_speculative_tokens_per_batch_size): ngram: [[1, " in md
    res = cli("report", str(copy))  # the kept whatif.json is used as is
    assert res.returncode == 0 and "what-if evaluated here" not in res.stderr


def test_export_as_llmd_benchmark_reports_valid_against_the_published_schema(sweep, tmp_path):
    """`loadgen export`: every measured cell a Benchmark Report v0.2.1 that the published JSON
    Schema (llmd-benchmark-report's own br_v0_2_json_schema.json, from PyPI) accepts and its
    own loader reads, with the cell's figures; a run's directory gives one; bad input is one line."""
    import importlib.resources

    import jsonschema
    from llmd_benchmark_report import load_benchmark_report

    schema = json.loads(
        importlib.resources.files("llmd_benchmark_report").joinpath("br_v0_2_json_schema.json").read_text()
    )
    validator = jsonschema.Draft202012Validator(schema)
    out = tmp_path / "llmd"
    res = cli("export", str(sweep), "--output", str(out))
    assert res.returncode == 0, res.stderr
    table = pd.read_parquet(sweep / "cells.parquet")
    ok = table[table["status"] == "ok"]
    files = sorted(out.glob("benchmark_report,*.json"))
    assert len(files) == len(ok) > 0 and f"{len(ok)} Benchmark Reports" in res.stdout
    uids = set()
    for path in files:
        doc = json.loads(path.read_text())
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert not errors, (path.name, errors[:3])
        br = load_benchmark_report(doc)  # what the llm-d harness does with a report
        key = doc["run"]["description"].rsplit("(", 1)[1].rstrip(")")
        summary = json.loads((sweep / "cells" / key / "summary.json").read_text())
        agg = br.results.request_performance.aggregate
        assert agg.latency.time_to_first_token.p99 == pytest.approx(summary["ttft_ms"]["p99"])
        assert agg.latency.time_per_output_token.mean == pytest.approx(summary["tpot_ms"]["mean"])
        assert agg.throughput.output_token_rate.mean == pytest.approx(summary["output_throughput_tok_s"])
        assert agg.requests.total == summary["completed"] + summary["failed"] + summary["cancelled"]
        assert doc["scenario"]["stack"][0]["native"]["config"]["loadgen"]["variant"] == key.split("/")[0]
        uids.add(doc["run"]["uid"])
    assert len(uids) == len(files)  # a report per cell, each its own uid, one eid for the sweep
    # the check can fail: a unit the schema does not know is refused
    doc["results"]["request_performance"]["aggregate"]["latency"]["request_latency"]["units"] = "furlongs"
    assert any("furlongs" in e.message for e in validator.iter_errors(doc))

    one = sweep / "cells" / ok["path"].iloc[0]
    res = cli("export", str(one), "--output", str(tmp_path / "one"))
    assert res.returncode == 0, res.stderr
    assert not list(validator.iter_errors(json.loads((tmp_path / "one" / "benchmark_report.json").read_text())))
    res = cli("export", str(tmp_path / "nothing-here"))
    assert res.returncode == 2 and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
