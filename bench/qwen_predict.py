"""Predict what was not measured, on this machine (docs/performance.md, "Predicted before
measured"): a real sweep of the Qwen pair, `loadgen fit` on it, then predictions of other cells
that read nothing of those cells, each then measured three times.

    python3 -m bench.qwen_predict --output OUT                 # runs every sweep here (about 95 minutes on 2 cores)
    python3 -m bench.qwen_predict --sweeps DIR --output OUT    # DIR holds the sweeps below, finished

The sweeps (qwen2.5-coder-1.5b-vllm-cpu: Qwen2.5-Coder-1.5B drafted by its 0.5B sibling, greedy,
64 output tokens, 8 requests a cell, --token-ids; the same requests at every level):
- DIR/fit: baseline, n-gram k 3, draft model k 3 on code-edit (InstructCoder) at 1 and 4 users,
  three rounds (--repeats 3: this machine's speed drifts by 15-30% between runs of one cell, and a
  profile from one run would carry that run's speed);
- DIR/alone: the 0.5B served alone (qwen2.5-coder-0.5b-vllm-cpu) at 1 and 4 users on code-edit,
  three rounds;
- DIR/sources: the draft model at k 5 at 1 user on math (GSM8K) and chat (ShareGPT): those
  workloads' token ids and draft-model acceptance (another k than the predicted cells');
- DIR/measured-code, DIR/measured-other (--repeats 3, each round on fresh servers): code-edit at 2
  and 8 users (baseline, n-gram, draft model k 3 and k 5), math and chat at 1, 4 and 8 users
  (baseline, n-gram, draft model k 3): the predicted cells, measured.

`loadgen fit DIR/fit --alone DIR/alone` writes OUT/profile.toml. The predictions: `loadgen sweep
--virtual --profile OUT/profile.toml --traces-from DIR/fit,DIR/sources` (loadgen/sweep/predicted.py:
each cell's requests' tokens and acceptance from another cell, never from itself; its source is
printed per cell). Nothing under DIR/measured-* is read before the comparison. Printed: per cell
predicted and measured output tok/s and speedup over the baseline, the error, the measured
spread over the three rounds ((max - min) / mean), and where the acceptance came from; then the
check: speedup within 10% and tok/s within 15% for at least 80% of the cells.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEPLOYMENT, ALONE = "qwen2.5-coder-1.5b-vllm-cpu", "qwen2.5-coder-0.5b-vllm-cpu"
SWEEPS = {  # name: (deployment, variants, workloads, levels, repeats)
    "fit": (DEPLOYMENT, "baseline,ngram,draft-model", "code-edit", "1,4", 3),
    "alone": (ALONE, None, "code-edit", "1,4", 3),
    "sources": (DEPLOYMENT, "draft-model-k5", "math,chat", "1", 1),
    "measured-code": (DEPLOYMENT, "baseline,ngram,draft-model,draft-model-k5", "code-edit", "2,8", 3),
    "measured-other": (DEPLOYMENT, "baseline,ngram,draft-model", "math,chat", "1,4,8", 3),
}
SPEEDUP_TOL, TPUT_TOL, SHARE = 0.10, 0.15, 0.80


def _argv(name: str, data: Path, out: Path, virtual: bool = False) -> list[str]:
    dep, variants, workloads, levels, repeats = SWEEPS[name]
    argv = [sys.executable, "-m", "loadgen", "sweep", "--servers", dep, "--workloads", workloads]
    argv += ["--concurrency", levels, "--data-dir", str(data), "--output", str(out), "--num-requests", "8"]
    argv += ["--variants", variants] if variants else []
    if not virtual:
        argv += ["--token-ids"] + (["--repeats", str(repeats)] if repeats > 1 else [])
    return argv


def run_sweeps(where: Path, data: Path) -> None:
    for name in SWEEPS:
        if not (where / name / "cells.parquet").exists():
            subprocess.run(_argv(name, data, where / name), cwd=REPO, check=False)


def predict(where: Path, data: Path, out: Path, profile: Path) -> dict[str, Path]:
    """The predicted sweeps, one per measured one, in virtual time."""
    done = {}
    for name in ("measured-code", "measured-other"):
        target = out / f"predicted-{name.split('-')[1]}"
        argv = _argv(name, data, target, virtual=True) + [
            "--engine",
            "emulator",
            "--virtual",
            "--profile",
            str(profile),
        ]
        argv += ["--traces-from", f"{where / 'fit'},{where / 'sources'}", "--quiet"]
        r = subprocess.run(argv, cwd=REPO, check=False, capture_output=True, text=True)
        if r.returncode:
            print(r.stdout[-3000:] + r.stderr[-3000:], file=sys.stderr)
        done[name] = target
    return done


def _cells(root: Path) -> dict[tuple[str, str, int, int], dict]:
    """(variant, workload, level, repeat) -> summary, for every ok cell."""
    out = {}
    for f in sorted(root.glob("cells/*/*/*/summary.json")):
        s = json.loads(f.read_text())
        c = s["cell"]
        if c.get("status") == "ok":
            out[(c["variant"], c["workload"], int(c["level"]), int(c.get("repeat") or 1))] = s
    return out


def _spread(xs: list[float]) -> float | None:
    return (max(xs) - min(xs)) / float(np.mean(xs)) if len(xs) > 1 else None


def compare(measured: Path, predicted: Path) -> list[dict]:
    m, p = _cells(measured), _cells(predicted)
    rows = []
    for variant, workload, level, _ in sorted({(v, w, lv, 1) for v, w, lv, _ in m}):
        runs = sorted(r for v, w, lv, r in m if (v, w, lv) == (variant, workload, level))
        tput = [m[(variant, workload, level, r)]["output_throughput_tok_s"] for r in runs]
        base = [m.get(("baseline", workload, level, r), {}).get("output_throughput_tok_s") for r in runs]
        speed = [t / b for t, b in zip(tput, base) if b] if variant != "baseline" else []
        ps = p.get((variant, workload, level, 1))
        pb = p.get(("baseline", workload, level, 1))
        pt = ps["output_throughput_tok_s"] if ps else None
        psp = pt / pb["output_throughput_tok_s"] if ps and pb and variant != "baseline" else None
        how = ((ps or {}).get("config") or {}).get("prediction") or {}
        rows.append(
            {
                "workload": workload, "variant": variant, "users": level,
                "predicted": pt, "measured": float(np.mean(tput)), "spread": _spread(tput),
                "speedup_predicted": psp, "speedup_measured": float(np.mean(speed)) if speed else None,
                "speedup_spread": _spread(speed), "source": _source(how), "rounds": len(runs),
            }
        )  # fmt: skip
    return rows


def _source(how: dict) -> str:
    src = how.get("source")
    if not src:
        return how.get("how", "")
    parts = Path(src).parts
    return f"{parts[-5]}:{'/'.join(parts[-3:])} ({how.get('how', '')})"


def _pct(x) -> str:
    return "" if x is None else f"{x:+.1%}"


def _err(p, m):
    return None if p is None or not m else p / m - 1


def table(rows: list[dict]) -> list[str]:
    out = [
        "| workload | variant | users | tok/s predicted | measured (spread) | error | speedup predicted "
        "| measured (spread) | error | acceptance and tokens from |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sp = r["speedup_spread"]
        out.append(
            f"| {r['workload']} | {r['variant']} | {r['users']} | {r['predicted'] or 0:.2f} | {r['measured']:.2f} "
            f"({r['spread'] or 0:.0%}) | {_pct(_err(r['predicted'], r['measured']))} | "
            + (
                f"{r['speedup_predicted']:.2f}x | {r['speedup_measured']:.2f}x ({sp or 0:.0%}) | "
                f"{_pct(_err(r['speedup_predicted'], r['speedup_measured']))}"
                if r["speedup_measured"] and r["speedup_predicted"]
                else " |  |"
            )
            + f" | {r['source']} |"
        )
    return out


def _explained(r: dict, e_t, e_s) -> bool:
    """Whether each of a cell's errors past its tolerance lies within the machine's own spread
    for that figure (the rounds' max - min over their mean): the prediction is then as close to
    the cell as the cell's own rounds are to each other."""
    for e, tol, spread in ((e_t, TPUT_TOL, r["spread"]), (e_s, SPEEDUP_TOL, r["speedup_spread"])):
        if e is not None and abs(e) > tol and (spread is None or abs(e) > spread):
            return False
    return e_t is not None


def check(rows: list[dict]) -> list[str]:
    ok, off, inside = 0, [], 0
    for r in rows:
        e_t = _err(r["predicted"], r["measured"])
        base = r["variant"] == "baseline"
        e_s = None if base else _err(r["speedup_predicted"], r["speedup_measured"])
        good = e_t is not None and abs(e_t) <= TPUT_TOL and (base or (e_s is not None and abs(e_s) <= SPEEDUP_TOL))
        ok += good
        if not good:
            why = _explained(r, e_t, e_s)
            inside += why
            off.append(
                f"{r['workload']}/{r['variant']}/c{r['users']} tok/s {_pct(e_t)}"
                + ("" if base else f", speedup {_pct(e_s)}")
                + (" (within the rounds' spread)" if why else "")
            )
    share = ok / len(rows) if rows else 0.0
    head = f"{'ok  ' if share >= SHARE else 'FAIL'} {ok} of {len(rows)} cells ({share:.0%}) within {TPUT_TOL:.0%} on "
    lines = [head + f"tok/s and {SPEEDUP_TOL:.0%} on speedup (aim: {SHARE:.0%})"]
    lines.append(f"     of the {len(off)} off, {inside} within the machine's own spread over the three rounds")
    return lines + [f"     off: {o}" for o in off]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweeps", type=Path, help="a directory holding the finished sweeps [run here, into OUT/sweeps]")
    ap.add_argument("--output", type=Path, required=True)
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "datasets")
    args = ap.parse_args()
    from loadgen import api
    from servers.emulator.fingerprint import describe

    where = args.sweeps or args.output / "sweeps"
    if args.sweeps is None:
        run_sweeps(where, args.data_dir)
    profile = args.output / "profile.toml"
    fitted = api.fit(api.FitJob([where / "fit"], profile, alone=[where / "alone"], force=True))
    print("\n".join(fitted.record) + "\n")
    predicted = predict(where, args.data_dir, args.output, profile)
    rows = [r for name, p in predicted.items() for r in compare(where / name, p)]
    print(f"machine: {describe(fitted.machine)}; profile {profile}\n")
    print("\n".join(table(rows)))
    (args.output / "predictions.json").write_text(json.dumps(rows, indent=1))
    lines = check(rows)
    print("\n" + "\n".join(lines))
    return 0 if lines[0].startswith("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
