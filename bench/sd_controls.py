"""vLLM's SD controls against fixed k and the oracle, on the default deployment's model
(docs/whatif.md, "vLLM's SD controls: k by batch size and adaptive verification").

Per workload (chat and code editing, from the bundled data sets in ../shared/datasets where
present, else their synthetic stand-ins):
1. traces: `loadgen simulate --profile h100-llama-3.1-8b --workload W --acceptance-traces` (the
   emulator's exact acceptance of every drafter);
2. `loadgen whatif TRACES --drafters eagle3 --k 1,3,5 --batch LEVELS --schedule --output DIR`:
   fixed k, adaptive k, adaptive verification, the schedule it derives, the oracles, each
   policy's share of the best oracle; and a deployment file (no SD, each fixed k, the schedule,
   EAGLE-3 at k = 5 with adaptive verification);
3. `loadgen sweep --servers DIR/schedule-eagle3.toml --engine emulator` over those variants,
   in virtual time (`--virtual`) and, unless --virtual-only, in real time (the emulator
   served, at the time scale its probe chooses), each directory given the traces so that
   `loadgen report` adds the what-if and leads with the controls;
then prints per level: each variant's throughput (virtual, real), the best, each control
against the best fixed k, the share of EAGLE-3's oracle, and simulate against real time.

    python3 -m bench.sd_controls                         # both workloads, levels 1,4,16,64 (~25 minutes)
    python3 -m bench.sd_controls --virtual-only          # the virtual half (~1 minute)
    python3 -m bench.sd_controls --workloads code-edit --concurrency 1,16 --dir /tmp/ctl
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROFILE = "h100-llama-3.1-8b"
DRAFTER = "eagle3"
OUTPUT = "output=fixed:128"


def _loadgen(*args: str, data_dir: str | None = None) -> str:
    env_args = ["--data-dir", data_dir] if data_dir and args[0] in ("simulate", "sweep") else []
    res = subprocess.run([sys.executable, "-m", "loadgen", *args, *env_args], capture_output=True, text=True, cwd=REPO)
    if res.returncode != 0:
        sys.exit(f"sd_controls: loadgen {args[0]} failed: {' '.join(res.stderr.strip().splitlines()[-2:])}")
    return res.stdout


def _cells(root: Path) -> dict[tuple[str, int], float]:
    import pandas as pd

    cells = pd.read_parquet(root / "cells.parquet")
    ok = cells[cells["status"] == "ok"]
    return {(r.variant, int(r.level)): float(r.output_throughput_tok_s) for r in ok.itertuples()}


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="chat,code-edit")
    ap.add_argument("--concurrency", default="1,4,16,64", help="levels (and the what-if's batch sizes)")
    ap.add_argument("--k", default="1,3,5")
    ap.add_argument("--requests", type=int, default=300, help="traces to simulate per workload")
    ap.add_argument("--num-requests", type=int, default=None, help="per real-time cell [default: the sweep's]")
    ap.add_argument("--virtual-only", action="store_true", help="skip the real-time sweep")
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared" / "datasets"))
    ap.add_argument("--dir", help="keep everything here (default: a temporary directory)")
    return ap.parse_args()


def main() -> None:
    args = _args()
    data_dir = args.data_dir if Path(args.data_dir).is_dir() else None
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="sd-controls-"))
    rows = []
    for name in args.workloads.split(","):
        rows += _workload(args, root / name, name, data_dir)
    _print(rows)


def _workload(args, here: Path, name: str, data_dir: str | None) -> list[dict]:
    """One workload: its traces, the what-if's schedule, its sweeps (virtual and real time) and
    their reports; a row per level and variant, with the what-if's oracle."""
    workload = f"{name},{OUTPUT}"
    here.mkdir(parents=True, exist_ok=True)
    traces = _traces(args, here, workload, data_dir)
    _loadgen(
        "whatif",
        str(traces),
        "--profile",
        PROFILE,
        "--drafters",
        DRAFTER,
        "--k",
        args.k,
        "--batch",
        args.concurrency,
        "--schedule",
        "--output",
        str(here / "whatif"),
    )
    doc = json.loads((here / "whatif" / "whatif.json").read_text())
    deployment = here / "whatif" / f"schedule-{DRAFTER}.toml"
    sweeps = {"virtual": here / "sweep-virtual"} | ({} if args.virtual_only else {"real": here / "sweep-real"})
    for how, out in sweeps.items():
        _sweep(args, how, out, deployment, workload, traces, data_dir)
    got = {how: _cells(out) for how, out in sweeps.items()}
    oracle = {
        int(r["batch"]): r["output_tok_s"]
        for r in doc["results"]
        if r["kind"] == "oracle" and r["policy"].startswith(f"{DRAFTER} ")
    }
    rows = []
    for level in map(int, args.concurrency.split(",")):
        for variant in sorted({v for (v, lv) in got["virtual"] if lv == level}):
            row = {"workload": name, "level": level, "variant": variant}
            for how, cells in got.items():
                row[f"{how}_tok_s"] = cells.get((variant, level))
            row["whatif_oracle_tok_s"] = oracle.get(level)
            rows.append(row)
    lead = (sweeps.get("real", sweeps["virtual"]) / "report" / "report.md").read_text().splitlines()
    print(f"[{name}] " + next((line.strip("*") for line in lead if "controls:" in line), "no controls sentence"))
    print(f"[{name}] schedule: {json.dumps(doc['schedules'][DRAFTER]['ranges'])}")
    return rows


def _traces(args, here: Path, workload: str, data_dir: str | None) -> Path:
    traces = here / "traces.jsonl"
    if not traces.exists():
        _loadgen(
            "simulate",
            "--profile",
            PROFILE,
            "--workload",
            workload,
            "--concurrency",
            "16",
            "--num-requests",
            str(args.requests),
            "--acceptance-traces",
            str(traces),
            "--output",
            str(here / "simulate"),
            data_dir=data_dir,
        )
    return traces


def _sweep(args, how: str, out: Path, deployment: Path, workload: str, traces: Path, data_dir: str | None) -> None:
    """The deployment swept (virtual or in real time) unless already there, and reported with
    the workload's traces beside it (the report's what-if and oracle)."""
    if not (out / "cells.parquet").exists():
        extra = (
            ["--virtual"]
            if how == "virtual"
            else (["--num-requests", str(args.num_requests)] if args.num_requests else [])
        )
        _loadgen(
            "sweep",
            "--servers",
            str(deployment),
            "--engine",
            "emulator",
            "--workloads",
            workload,
            "--concurrency",
            args.concurrency,
            "--quiet",
            "--output",
            str(out),
            *extra,
            data_dir=data_dir,
        )
    (out / "traces.jsonl").write_bytes(traces.read_bytes())
    (out / "whatif.json").unlink(missing_ok=True)
    _loadgen("report", str(out))


def _print(rows: list[dict]) -> None:
    import pandas as pd

    t = pd.DataFrame(rows)
    if t.empty:
        return
    out = []
    for (workload, level), g in t.groupby(["workload", "level"], sort=False):
        for how in [c[:-6] for c in t.columns if c.endswith("_tok_s") and not c.startswith("whatif")]:
            sd = g[g["variant"] != "baseline"].set_index("variant")[f"{how}_tok_s"].dropna()
            if sd.empty:
                continue
            fixed = sd[[v for v in sd.index if v.startswith(f"{DRAFTER}-k")]]
            oracle = g["whatif_oracle_tok_s"].iloc[0]
            entry = {"workload": workload, "level": level, "how": how}
            for v, tok_s in sd.items():
                entry[v] = round(tok_s)
            entry["best"] = sd.idxmax()
            entry["best fixed"] = fixed.idxmax()
            for control in ("schedule", "adaptive"):
                v = f"{DRAFTER}-{control}"
                if v in sd:
                    entry[f"{control} / best fixed"] = round(sd[v] / fixed.max(), 3)
            entry["best / oracle"] = round(sd.max() / oracle, 3) if oracle else None
            out.append(entry)
    table = pd.DataFrame(out)
    pd.set_option("display.width", 250)
    print(table.to_string(index=False))
    if {"virtual_tok_s", "real_tok_s"} <= set(t.columns):
        both = t.dropna(subset=["virtual_tok_s", "real_tok_s"])
        gap = (both["virtual_tok_s"] / both["real_tok_s"] - 1).abs()
        worst = both.loc[gap.idxmax()]
        print(
            f"simulate against the real-time emulator: {int((gap <= 0.05).sum())} of {len(both)} cells within 5% "
            f"(worst {gap.max():.1%}: {worst['variant']} at {worst['level']} on {worst['workload']})"
        )
        for variant, g in both.groupby("variant"):
            gv = (g["virtual_tok_s"] / g["real_tok_s"] - 1).abs()
            print(f"  {variant}: within {gv.max():.1%}")


if __name__ == "__main__":
    main()
