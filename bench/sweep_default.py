"""`loadgen sweep` with no options (the README's main job) on this machine: how long it takes
(target: 6 minutes on 2 cores), how many cells it flags, and whether each figure is what its
emulated H100 would do: every cell is served again by `loadgen simulate` (the same engine in
virtual time, no clock to fall behind) on the same requests and load, and the two speedups are
set side by side.

    python -m bench.sweep_default                   # the full default: 56 cells
    python -m bench.sweep_default --data-dir ../shared/datasets   # the real data sets
    python -m bench.sweep_default -- --time-scale 1               # options for loadgen sweep
    python -m bench.sweep_default --results DIR     # a finished sweep of the default plan, set beside the model

Pass/fail lines (issue 19): at most 3 of 56 cells flagged, every speedup within 5% of the model's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from loadgen.load.execute import LoadShape  # noqa: E402
from loadgen.measures.frame import request_frame  # noqa: E402
from loadgen.measures.summary import summarize  # noqa: E402
from loadgen.simulate.virtual import SimSpec, simulate  # noqa: E402
from servers.emulator.spec import parse  # noqa: E402
from workloads import open_workload  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 360.0
MAX_FLAGGED = 3
MAX_SPEEDUP_ERROR = 0.05


def model_tok_s(manifest: dict, cell: pd.Series, data_dir: str | None) -> float:
    """The cell's output throughput in virtual time: the same requests, load and engine settings."""
    plan = manifest["plan"]
    argv = manifest["servers"][cell["variant"]]["argv"]
    spec = parse(argv[argv.index("--speculative-config") + 1]) if "--speculative-config" in argv else None
    wl = open_workload(cell["workload_spec"], data_dir=data_dir)
    level = cell["level"]
    load = LoadShape(concurrency=int(level)) if cell["mode"] == "closed" else LoadShape(rate=level)
    n = plan["num_requests"] or (
        max(plan["min_requests"], plan["per_user"] * int(level)) if cell["mode"] == "closed" else plan["min_requests"]
    )
    sim = SimSpec("h100-llama-3.1-8b", spec, load, num_requests=n, seed=plan["seed"])
    result = simulate(sim, wl.requests(None, plan["seed"]))
    config = {"clock": {"t0_ns": result.run.t0_ns}, "load": load.describe()}  # a closed loop's window, as the cell's
    s = summarize(request_frame(result.run.records), ([], []), config=config)
    return float(s["output_throughput_tok_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", help="LOADGEN_DATA_DIR for the sweep (default: the offline stand-ins)")
    ap.add_argument("--results", type=Path, help="compare this finished sweep instead of running one")
    ap.add_argument("sweep_args", nargs="*", help="more options for loadgen sweep (after --)")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "LOADGEN_DATA_DIR"}
    if args.data_dir:
        env["LOADGEN_DATA_DIR"] = str(Path(args.data_dir).resolve())
    if args.results:
        cells = pd.read_parquet(args.results / "cells.parquet")
        manifest = json.loads((args.results / "manifest.json").read_text())
        why = flag_reasons(args.results, cells)
        wall = float("nan")
    else:
        cells, manifest, why, wall = _run(args, env)
    data_dir = env.get("LOADGEN_DATA_DIR")
    cells["model_tok_s"] = [model_tok_s(manifest, c, data_dir) for _, c in cells.iterrows()]
    cells["flagged"] = cells["client_bound"].fillna(False).astype(bool) | cells["server_behind"].fillna(False).astype(
        bool
    )
    errors = _print_cells(cells)
    _print_summary(cells, errors, wall, args.data_dir)
    if why:
        print("\nwhy flagged:\n" + "\n".join(f"  {k}: {v}" for k, v in why.items()))


def _run(args, env: dict) -> tuple[pd.DataFrame, dict, dict, float]:
    """`loadgen sweep` run here, timed: its cells, manifest, flag reasons and wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep"
        t0 = time.monotonic()
        res = subprocess.run(
            [sys.executable, "-m", "loadgen", "sweep", "--quiet", "--output", str(out), *args.sweep_args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - t0
        if res.returncode not in (0, 1):
            sys.exit(f"sweep failed ({res.returncode}): {res.stderr.strip().splitlines()[-1:]}")
        cells = pd.read_parquet(out / "cells.parquet")
        manifest = json.loads((out / "manifest.json").read_text())
        why = flag_reasons(out, cells)
        print(res.stdout)
        print("\n".join(line for line in res.stderr.splitlines() if line.startswith("time scale")))
    return cells, manifest, why, wall


def _print_cells(cells: pd.DataFrame) -> pd.Series:
    """Each cell's throughput and speedup beside its model's; the SD cells' speedup errors."""
    base = cells[cells["variant"] == "baseline"].set_index(["workload", "level"])
    rows = []
    print(
        f"\n{'workload':>10} {'level':>5} {'variant':>8} {'scale':>5} {'tok/s':>8} {'model':>8} {'real/model':>10} "
        f"{'speedup':>8} {'model':>6} {'error':>7}  flags"
    )
    for _, c in cells.iterrows():
        b = base.loc[(c["workload"], c["level"])]
        speedup = c["output_throughput_tok_s"] / b["output_throughput_tok_s"]
        model = c["model_tok_s"] / b["model_tok_s"]
        err = speedup / model - 1 if c["variant"] != "baseline" else None
        rows.append(err)
        flags = ",".join(f for f in ("client_bound", "server_behind") if bool(c[f])) if c["flagged"] else ""
        scale = c["time_scale"] if "time_scale" in c and pd.notna(c["time_scale"]) else 1.0
        print(
            f"{c['workload']:>10} {c['level']:>5g} {c['variant']:>8} {scale:>5g} "
            f"{c['output_throughput_tok_s']:>8.0f} {c['model_tok_s']:>8.0f} "
            f"{c['output_throughput_tok_s'] / c['model_tok_s']:>10.3f} "
            + (f"{speedup:>8.2f} {model:>6.2f} {err:>+7.1%}" if err is not None else f"{'':>8} {'':>6} {'':>7}")
            + f"  {flags}"
        )
    return pd.Series([e for e in rows if e is not None])


def _print_summary(cells: pd.DataFrame, errors: pd.Series, wall: float, data_dir: str | None) -> None:
    flagged = int(cells["flagged"].sum())
    summary = [
        ("cells", f"{len(cells)} ({int((cells['status'] == 'ok').sum())} ok)"),
        ("wall time", f"{wall:.0f} s (target < {TARGET_S:.0f} s: {'met' if wall < TARGET_S else 'MISSED'})"),
        (
            "cells flagged",
            f"{flagged} (client_bound {int(cells['client_bound'].fillna(False).sum())}, server_behind "
            f"{int(cells['server_behind'].fillna(False).sum())}; target <= {MAX_FLAGGED}: "
            f"{'met' if flagged <= MAX_FLAGGED else 'MISSED'})",
        ),
        (
            "speedup vs model",
            f"max |error| {errors.abs().max():.1%}, mean {errors.mean():+.1%} (target within "
            f"{MAX_SPEEDUP_ERROR:.0%}: {'met' if errors.abs().max() <= MAX_SPEEDUP_ERROR else 'MISSED'})",
        ),
        (
            "throughput vs model",
            f"real/model {(cells['output_throughput_tok_s'] / cells['model_tok_s']).min():.3f} "
            f"to {(cells['output_throughput_tok_s'] / cells['model_tok_s']).max():.3f}",
        ),
        ("CPUs", f"{os.cpu_count()}"),
        ("data", data_dir or "offline stand-ins"),
    ]
    width = max(len(k) for k, _ in summary)
    print("\n" + "\n".join(f"{k:<{width}}  {v}" for k, v in summary))


def flag_reasons(root: Path, cells: pd.DataFrame) -> dict[str, str]:
    """What flagged each flagged cell: the self-check's reasons and the emulator's own view."""
    out = {}
    for _, c in cells.iterrows():
        if not (c.get("client_bound") or c.get("server_behind")):
            continue
        try:
            s = json.loads((root / "cells" / c["path"] / "summary.json").read_text())
        except (OSError, ValueError, TypeError):
            continue
        emu = (s.get("server") or {}).get("emulator") or {}
        out[f"{c['workload']} {c['level']:g} {c['variant']}"] = "; ".join(
            s["self_check"]["reasons"]
            + (
                [
                    f"delivered {emu.get('delivered_of_model', float('nan')):.3f} of model, "
                    f"step lag p99 <= {emu.get('step_lag_p99_s_at_most')}"
                ]
                if emu.get("behind")
                else []
            )
        )
    return out


if __name__ == "__main__":
    main()
