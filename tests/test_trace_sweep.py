"""Deciding on one's own traffic (docs/sweep.md): a production trace swept at multiples of its
own rate over a deployment's variants, each cell judged by per-request objectives, and the
report's decision by goodput; the same sweep in virtual time; the highest trace speed each
variant holds (`loadgen capacity --trace`, docs/check.md); bad options in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import cli, run_cli

pytestmark = pytest.mark.servers

AZURE = (
    Path(__file__).resolve().parents[2] / "shared" / "datasets" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
)
TRACE = ("--trace", f"azure:{AZURE}", "--trace-start", "600")
GOODPUT = ("--goodput", "ttft<=200ms,tpot<=10ms")


def _sweep(out: Path, *args: str, variants: str = "baseline,eagle") -> pd.DataFrame:
    res = run_cli("sweep", *TRACE, "--workloads", "chat", "--variants", variants, *GOODPUT, *args, "--output", str(out))
    assert res.returncode == 0, res.stderr
    assert "trace speed (x)" in res.stdout
    return pd.read_parquet(out / "cells.parquet")


def test_a_trace_swept_at_its_speeds_decides_by_goodput(tmp_path):
    virtual = _sweep(tmp_path / "virtual", "--virtual", "--trace-window", "20", "--trace-speeds", "0.5,1,2")
    assert sorted(virtual["path"]) == sorted(f"{v}/chat/x{s}" for v in ("baseline", "eagle") for s in ("0.5", "1", "2"))
    assert (virtual["status"] == "ok").all() and virtual["goodput_fraction"].notna().all()
    for _, c in virtual.iterrows():  # every speed replays the same requests, in the trace's timing divided by it
        s = json.loads((tmp_path / "virtual" / "cells" / c["path"] / "summary.json").read_text())
        load = s["config"]["load"]
        assert load["mode"] == "trace" and load["speed"] == c["level"] and s["goodput"]["cancelled"] == 0
        assert s["completed"] + s["failed"] == load["requests"] - s["config"]["warmup"]
    spans = virtual.groupby("level").apply(lambda g: g["path"].size).to_dict()
    assert set(spans) == {0.5, 1.0, 2.0}
    # faster replays load the server more: the baseline's goodput share falls with speed
    base = virtual[virtual["variant"] == "baseline"].sort_values("level")["goodput_fraction"].to_numpy()
    assert base[0] >= base[-1] and base[-1] < 0.9
    res = cli("report", str(tmp_path / "virtual"))
    assert res.returncode == 0, res.stderr
    best = pd.read_csv(tmp_path / "virtual" / "report" / "best_by_goodput.csv")
    assert sorted(best["level"]) == [0.5, 1.0, 2.0]
    for _, b in best.iterrows():
        cells = virtual[virtual["level"] == b["level"]].set_index("variant")["goodput_req_s"]
        assert b["goodput_req_s"] == cells.max()
        assert set(b["best_variant"].split(", ")) == set(cells[cells >= cells.max() * 0.995].index)
    lead = (tmp_path / "virtual" / "report" / "report.md").read_text()
    assert "On chat, by goodput (ttft<=200ms, tpot<=10ms): at 0.5x the trace's rate" in lead
    assert "at 2x the trace's rate, eagle" in lead

    # on a real server (the embedded emulator): the same requests at each speed, every cell ok
    real = _sweep(tmp_path / "real", "--trace-window", "4", "--trace-speeds", "2,4", variants="eagle")
    assert (real["status"] == "ok").all() and len(real) == 2 and real["goodput_req_s"].notna().all()
    prompts = {
        c["path"]: pd.read_parquet(tmp_path / "real" / "cells" / c["path"] / "requests.parquet")
        .sort_values("index")["prompt_tokens"]
        .tolist()
        for _, c in real.iterrows()
    }
    assert len({tuple(p) for p in prompts.values()}) == 1  # the trace's requests, fitted once


def test_capacity_searches_the_trace_speed_a_variant_holds(tmp_path):
    """`loadgen capacity --trace`: each probe replays the same window of the trace, its gaps
    divided by the probe's speed; the search doubles the speed up to --limit."""
    out = tmp_path / "cap"
    res = run_cli(
        "capacity",
        *("--servers", "llama-3.1-8b", "--engine", "emulator", "--variants", "eagle", "--workload", "chat"),
        *TRACE,
        *("--trace-window", "6", "--slo", "error_rate<=10%", "--start", "2", "--limit", "4", "--repeats", "1"),
        *("--output", str(out)),
    )
    assert res.returncode == 0, res.stderr
    assert "Highest trace speed within the SLOs:" in res.stdout
    assert "holds at every level up to the limit 4" in res.stdout
    found = json.loads((out / "capacity.json").read_text())
    assert found["by"] == "trace speed" and found["trace"]["trace_start"] == 600
    assert [p["level"] for p in found["results"][0]["probes"]] == [2.0, 4.0]
    frames = {s: pd.read_parquet(out / "eagle" / f"x{s}-1" / "requests.parquet").sort_values("index") for s in (2, 4)}
    assert len(frames[2]) > 10 and frames[2]["ok"].all() and frames[4]["ok"].all()
    assert frames[2]["prompt_tokens"].tolist() == frames[4]["prompt_tokens"].tolist()  # the same requests
    offsets = {s: (f["t_scheduled_ns"] - f["t_scheduled_ns"].min()).to_numpy() / 1e9 for s, f in frames.items()}
    assert abs(offsets[2] - 2 * offsets[4]).max() < 1e-3 and offsets[2].max() > 1
