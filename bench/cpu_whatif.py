"""What-if on real traces, checked against real vLLM (docs/whatif.md, "Checked against real
vLLM"): acceptance traces taken from real vLLM serving Gemma-3-270M with n-gram at k = 3 feed
`loadgen whatif` on a cost profile fitted from the same sweep (bench/cpu_profile.py), and its
prediction for k = 5, which it has not seen, is set beside real vLLM run at k = 5.

    python3 -m bench.cpu_whatif                      # the sweep (about 11 minutes on 2 cores), then the rest
    python3 -m bench.cpu_whatif --results OUT/sweep  # a finished sweep of it
    python3 -m bench.cpu_whatif --servers llama-3.1-8b --engine emulator --levels 1,4  # rehearsed on the emulator

The sweep: `loadgen sweep --token-ids` of a deployment file written beside the results, the
catalog's gemma-3-270m-vllm-cpu with one more variant, `ngram-k5` (its n-gram at k = 5), over
baseline, ngram (k = 3) and ngram-k5 at --levels (1,4,16) on code-edit, greedy (temperature 0
on every request: a data set's requests set none, and vLLM then samples at the model's default,
1 for this Gemma, where a draft is accepted by chance; the traces replay prompt lookup against
the tokens the run emitted, which is what vLLM accepts only when decoding is greedy). Then: the profile fitted
on the baseline and k = 3 cells only; per level, `loadgen traces --ngram 2,5` (the deployment's
prompt_lookup_min and max) of its k = 3 cell and `loadgen whatif --k 3,5 --batch LEVEL` on them
(the very requests the level's other cells served). Printed per level: measured and predicted
output tok/s and speedup over baseline, at k = 3 (seen) and k = 5 (unseen), with each error, and
a check line: k = 5 within 10% at every level. bench/cpu_profile.py's table for the same sweep
comes first (every cell, replayed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
from bench import cpu_profile  # noqa: E402
from servers.deployments import load  # noqa: E402

DEPLOYMENT = "gemma-3-270m-vllm-cpu"
SEEN, UNSEEN = 3, 5
TOLERANCE = 0.10


def deployment_file(out: Path, deployment: str) -> Path:
    """The catalog's deployment with its n-gram variant at k = UNSEEN besides."""
    dep = load(deployment)
    ngram = dep.variants["ngram"].speculative_config
    assert ngram is not None and ngram["num_speculative_tokens"] == SEEN
    text = (REPO / "servers" / "deployments" / f"{deployment}.toml").read_text()
    if f"ngram-k{UNSEEN}" in dep.variants:  # the catalog has it already
        have = dep.variants[f"ngram-k{UNSEEN}"].speculative_config or {}
        assert {**ngram, "num_speculative_tokens": UNSEEN} == have, (
            f"{deployment}'s ngram-k{UNSEEN} is not its ngram at k={UNSEEN}"
        )
    else:
        text += (
            f"\n# bench/cpu_whatif.py: the n-gram variant at k = {UNSEEN}, what `loadgen whatif` predicts\n"
            f"[variants.ngram-k{UNSEEN}]\n"
            'args = ["--per-request-spec-decode-metrics", "summary"]\n'
            f'speculative_config = {{ method = "ngram", num_speculative_tokens = {UNSEEN}, '
            f"prompt_lookup_min = {ngram['prompt_lookup_min']}, prompt_lookup_max = {ngram['prompt_lookup_max']} }}\n"
        )
    path = out / f"{deployment}-k{UNSEEN}.toml"
    path.write_text(text)
    return path


def loadgen(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "loadgen", *args], cwd=REPO, check=True)


def measured(found: list[dict]) -> dict[tuple[str, int], float]:
    return {(c["variant"], c["level"]): c["summary"]["output_throughput_tok_s"] for c in found}


def predicted(whatif: dict) -> dict[tuple[str, int], float]:
    """whatif.json's rows as (variant, batch) -> output tok/s."""
    names = {"none": "baseline", f"ngram k={SEEN}": "ngram", f"ngram k={UNSEEN}": f"ngram-k{UNSEEN}"}
    return {(names[r["policy"]], r["batch"]): r["output_tok_s"] for r in whatif["results"] if r["policy"] in names}


def table(meas: dict, pred: dict, levels: list[int]) -> tuple[list[str], list[str]]:
    rows = [
        "| users | k | measured tok/s | whatif tok/s | error | measured speedup | whatif speedup | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    bad = []
    for level in levels:
        for variant, k in (("ngram", SEEN), (f"ngram-k{UNSEEN}", UNSEEN)):
            key, base = (variant, level), ("baseline", level)
            if not all(x in meas and x in pred for x in (key, base)):
                bad.append(f"c{level} k={k}: not measured or not predicted")
                continue
            m, p = meas[key], pred[key]
            sm, sp = m / meas[base], p / pred[base]
            err, serr = p / m - 1, sp / sm - 1
            seen = "" if k == UNSEEN else " (seen)"
            rows.append(f"| {level} | {k}{seen} | {m:.1f} | {p:.1f} | {err:+.1%} | {sm:.2f} | {sp:.2f} | {serr:+.1%} |")
            if k == UNSEEN:
                bad += [
                    f"c{level} {what} {e:+.1%}"
                    for what, e in (("throughput", err), ("speedup", serr))
                    if abs(e) > TOLERANCE
                ]
    what = f"whatif's k = {UNSEEN} from k = {SEEN} traces within {TOLERANCE:.0%} of the measured k = {UNSEEN}"
    check = f"{'ok  ' if not bad else 'FAIL'} {what}"
    return rows, [check + ("" if not bad else f": {', '.join(bad)}")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, help="a finished sweep of this script (OUT/sweep)")
    ap.add_argument("--output", type=Path, default=Path("cpu-whatif"), help="where everything goes")
    ap.add_argument("--levels", default="1,4,16", help="concurrency levels")
    ap.add_argument("--servers", default=DEPLOYMENT, help="a catalog deployment with an n-gram variant at k = 3")
    ap.add_argument("--engine", help="serve it on this engine instead (emulator: the rehearsal)")
    ap.add_argument("--num-requests", type=int, help="requests a cell [default: the sweep's]")
    ap.add_argument("--data-dir", default=os.environ.get("LOADGEN_DATA_DIR", str(REPO.parent / "shared" / "datasets")))
    args = ap.parse_args()
    out = args.output.resolve()
    out.mkdir(parents=True, exist_ok=True)
    levels = [int(x) for x in args.levels.split(",")]
    sweep = args.results
    if sweep is None:
        sweep = out / "sweep"
        argv = [
            "sweep",
            "--servers",
            str(deployment_file(out, args.servers)),
            "--variants",
            f"baseline,ngram,ngram-k{UNSEEN}",
        ]
        argv += ["--concurrency", args.levels, "--workloads", "code-edit", "--token-ids", "--data-dir", args.data_dir]
        argv += ["--extra-body", json.dumps({"temperature": 0.0})]  # greedy: see the docstring
        argv += ["--output", str(sweep)] + (["--num-requests", str(args.num_requests)] if args.num_requests else [])
        argv += ["--engine", args.engine] if args.engine else []
        subprocess.run([sys.executable, "-m", "loadgen", *argv], cwd=REPO, check=False)  # failed cells: below
    if not (sweep / "manifest.json").exists():
        print(f"cpu_whatif: error: {sweep} is not a sweep's directory (no manifest.json)", file=sys.stderr)
        return 2
    lines, checks = cpu_profile.report(sweep, out / "profiles")
    print("\n".join(lines) + "\n")
    found = cpu_profile.cells(sweep)
    seen = [c for c in found if c["variant"] in ("baseline", "ngram")]
    if not any(c["variant"] == "ngram" for c in seen) or not any(c["variant"] == "baseline" for c in seen):
        print(f"cpu_whatif: error: {sweep} has no finished baseline or ngram cell", file=sys.stderr)
        return 1
    dep = cpu_profile.deployment_of(sweep)
    spec = dep.variants["ngram"].speculative_config
    profile = out / "ngram-fitted-on-k3.toml"  # the baseline and k = 3 cells only: k = 5 unseen
    profile.write_text(cpu_profile.profile_text(dep, "ngram", cpu_profile.fitted(seen), spec, sweep))
    pred: dict[tuple[str, int], float] = {}
    for c in sorted((c for c in seen if c["variant"] == "ngram"), key=lambda c: c["level"]):
        # per level, the traces of its own k = 3 cell: the very requests its k = 5 and baseline
        # cells served (the same workload, seed and count), at the same number of users
        level, n = c["level"], int(c["summary"]["completed"])
        cell = sweep / "cells" / "ngram" / c["workload"] / f"c{level}"
        traces = out / f"traces-c{level}.jsonl"
        lookup = f"{spec['prompt_lookup_min']},{spec['prompt_lookup_max']}"
        loadgen("traces", str(cell), "--ngram", lookup, "--output", str(traces))
        where = out / f"whatif-c{level}"
        argv = ["whatif", str(traces), "--profile", str(profile), "--batch", str(level), "--k", f"{SEEN},{UNSEEN}"]
        loadgen(*argv, "--requests", str(n), "--output", str(where))
        pred |= predicted(json.loads((where / "whatif.json").read_text()))
    rows, check = table(measured(found), pred, levels)
    print("\n" + "\n".join(rows) + "\n")
    print("\n".join(checks + check))
    return 1 if any(c.startswith("FAIL") for c in check) else 0


if __name__ == "__main__":
    sys.exit(main())
