"""Real vLLM's CPU engine, fitted and predicted (docs/performance.md, "The emulator against vLLM's
CPU engine"): a cost profile from real vLLM's own measured steps, then every measured cell run
again in virtual time on it (`loadgen simulate`'s engine), side by side.

    python3 -m bench.cpu_profile                          # runs bench/vllm_cpu.py's sweeps first
    python3 -m bench.cpu_profile --results DIR [DIR ...]   # finished sweeps, one per deployment
    loadgen simulate --profile OUT/gemma-3-270m-vllm-cpu/ngram.toml ...   # a fitted profile, used

Per deployment (a sweep's directory): the forward is fitted on the baseline cells' engine
steps (loadgen/measures/enginesteps.py: vLLM's step timeline from all requests' chunk times,
prefills included; its step count is the chunk times', printed beside vLLM's own), each variant's drafting on its own
cells' residuals (per step in which a request drafts, and per draft token, the drafts from the
stream and vLLM's per-request counts: `fitted`); written as one profile per variant
(OUT/DEPLOYMENT/VARIANT.toml). Then each cell is run again in virtual time on its variant's
profile: the same users, and its requests as vLLM served them (prompt tokens as vLLM counted them,
output tokens, and each decode step's drafts and emitted tokens from the stream and vLLM's
per-request counts), on the engine `loadgen whatif` drives (servers/emulator/replay.py: the
serving engine's scheduler and step costs, drafts as recorded). What is predicted is the engine:
its scheduling and what its steps cost, not how often drafts are right (that is the recorded
part; `loadgen whatif` on a run's traces predicts other k). Printed per cell: measured and
predicted output tok/s, each variant's speedup over baseline measured and predicted, and a check
line per deployment (every cell within 10%).

Why on this machine: the emulator's scheduler and cost model are checked against a real engine
here, where vLLM serves, and not only on a GPU host (bench/gpu_vllm.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]

from loadgen.measures import enginesteps  # noqa: E402
from servers.deployments import load, render  # noqa: E402
from servers.emulator import costfit  # noqa: E402

TOLERANCE = 0.10


def cells(sweep: Path) -> list[dict]:
    """The sweep's finished cells: variant, workload, level, k (its drafts a step, 0 without
    SD), summary, measured requests."""
    variants = deployment_of(sweep).variants
    out = []
    for f in sorted(sweep.glob("cells/*/*/*/summary.json")):
        s = json.loads(f.read_text())
        if not s.get("completed"):
            continue
        variant, workload, level = f.parts[-4], f.parts[-3], int(f.parts[-2].removeprefix("c"))
        frame = pd.read_parquet(f.parent / "requests.parquet")
        spec = variants[variant].speculative_config if variant in variants else None
        k = int(spec["num_speculative_tokens"]) if spec else 0
        out.append({"variant": variant, "workload": workload, "level": level, "k": k, "summary": s, "frame": frame})
    return out


def vllm_steps(c: dict) -> int | None:
    """The steps vLLM took in the cell (its iteration-tokens histogram's count over the cell's
    window), where it was scraped and only measured requests ran in it."""
    hist = ((c["summary"].get("server") or {}).get("histograms") or {}).get("iteration_tokens") or {}
    n = hist.get("count")
    return int(n) if n and not c["frame"]["warmup"].any() else None


def fitted(found: list[dict]) -> dict:
    """The engine's steps of every cell (loadgen/measures/enginesteps.py's engine_steps: the whole timeline,
    prefills included, one sample per step vLLM took), the forward fitted on the baseline's by
    plain least squares (a cell's throughput is its mean step, stalls of a CPU the client shares
    included, so none is left out): constant + per KV token + per batched token. Each drafter on
    its cells' residuals: a constant in a step in which any running request drafts (`per_step`)
    and a cost per draft token; of the running requests, those whose chunk emitted an accepted
    draft drafted, the others with the chance vLLM's counts leave (an n-gram drafts only where
    its lookup matches; EAGLE always)."""
    # the steps the chunk times say, never held to vLLM's count (report() prints both)
    steps = [(c, enginesteps.engine_steps(c["frame"][~c["frame"]["warmup"]], c["k"])) for c in found]
    for c, st in steps:
        c["steps_read"] = len(st)
    out = costfit.linear_fit([("baseline", s) for c, s in steps if c["variant"] == "baseline"], robust=False)
    fw = out["forward"]
    for v in dict.fromkeys(c["variant"] for c in found if c["variant"] != "baseline"):
        s = np.concatenate([s for c, s in steps if c["variant"] == v])
        resid = s[:, 0] - (fw["constant"] + fw["per_kv_token"] * s[:, 1] + fw["per_batched_token"] * s[:, 2])
        d = np.linalg.lstsq(s[:, 5:7], resid, rcond=None)[0]
        out[v] = {"per_step": float(d[0]), "per_draft_token": float(d[1]), "samples": len(s), "dropped": 0}
    return out


def max_model_len(argv) -> int:
    argv = list(argv)
    return int(argv[argv.index("--max-model-len") + 1]) if "--max-model-len" in argv else 131072  # the model's


def profile_text(dep, variant: str, fit: dict, spec: dict | None, where: Path) -> str:
    """A profile file for `dep` serving `variant`: this linear fit written by the one profile
    writer (servers/emulator/costfit.py's profile_text, as `loadgen fit` writes its own)."""
    from servers.emulator.profile import Drafter, Forward

    fw = fit["forward"]
    forward = Forward(
        constant=fw["constant"], per_kv_token=fw["per_kv_token"], per_batched_token=fw["per_batched_token"]
    )
    drafters = {}
    if spec is not None and variant in fit:
        d, k = fit[variant], int(spec["num_speculative_tokens"])
        drafter = Drafter(spec["method"], per_step=d["per_step"], per_draft_token=d["per_draft_token"], fit_k=k)
        drafters[spec["method"]] = (drafter, costfit.Fit({}, d["samples"], 0.0))
    return costfit.profile_text(
        description=f"{dep.description} ({variant}), fitted",
        models=[dep.served_model_name],
        max_model_len=max_model_len(render(dep, variant, port=1).argv),
        forward=(forward, costfit.Fit({}, fw["samples"], 0.0)),
        drafters=drafters,
        source=f"bench/cpu_profile.py's linear model (the study's form) on real vLLM's measured steps ({where})",
    )


def _count(x) -> int | None:
    return None if x is None or pd.isna(x) else int(x)


def plan_of(row, method: str | None, k: int) -> tuple[int, list[tuple[str, int, int]]]:
    """A measured request as the replaying engine takes it (servers/emulator/replay.py): its
    output length and one (drafter, drafts, emitted) per decode step. The steps are its stream's
    chunks after the first token, a chunk of more tokens than one step can emit split; where
    vLLM's own counts say there were more steps (chunks coalesced under load), the largest are
    split until they agree. Of the steps, vLLM's num_spec_steps carried drafts: every step that
    emitted an accepted draft, the rest spread evenly over the others; each with the request's
    mean drafts per drafting step (vLLM's num_draft_tokens over num_spec_steps)."""
    n = [int(x) for x in row.chunk_tokens]
    total = sum(n)
    cap = k + 1 if method else 1
    emitted: list[int] = []
    for e in ([n[0] - 1] if n[0] > 1 else []) + n[1:]:
        while e > 0:
            emitted.append(min(e, cap))
            e -= emitted[-1]
    accepted = _count(row.server_accepted_tokens) if method else 0
    least = (
        len(emitted) if accepted is None else (total - 1) - accepted
    )  # decode steps vLLM took, but those a max_tokens cut shortened
    while len(emitted) < least and max(emitted, default=1) > 1:
        i = emitted.index(max(emitted))
        emitted[i : i + 1] = [emitted[i] - 1, 1]
    if not method:
        return total, [("", 0, e) for e in emitted]
    spec_steps = _count(row.server_spec_steps)
    drafting = [e > 1 for e in emitted]
    want = int(spec_steps) if spec_steps is not None else sum(drafting)
    others = [i for i, d in enumerate(drafting) if not d]
    extra = max(0, min(len(others), want - sum(drafting)))
    for j in range(extra):  # spread evenly over the steps without an accepted draft
        drafting[others[(j * len(others)) // extra]] = True
    tokens = _count(row.server_draft_tokens)
    per = min(k, round(tokens / want)) if tokens and want else k
    return total, [(method, max(per, e - 1), e) if d else ("", 0, e) for d, e in zip(drafting, emitted)]


def predict(profile: Path, spec: dict | None, c: dict, mode: bool = False) -> dict:
    """The cell in virtual time: its users, and its requests as measured (prompt tokens as vLLM
    counted them, output, steps and drafts per step), replayed on the fitted profile; `mode`:
    every step pays what the profile's drafter adds to a step with SD configured."""
    from loadgen.measures.frame import request_frame
    from loadgen.measures.summary import summarize
    from loadgen.shapes import ClosedLoop
    from loadgen.simulate.virtual import SimSpec, simulate
    from servers.emulator import profile as profiles
    from servers.emulator.replay import ReplayEngine
    from workloads import Request

    method, k = (spec["method"], int(spec["num_speculative_tokens"])) if spec else (None, 0)
    m = c["frame"][c["frame"]["ok"] & ~c["frame"]["warmup"]].sort_values("index")
    rows = list(m.itertuples())
    plans = [plan_of(r, method, k) for r in rows]
    engine = ReplayEngine(profiles.load(str(profile)), mode=method if mode else None)

    def submit(eng, req, t_send: float, sink) -> None:
        i = int(req.id)
        total, plan = plans[i]
        eng.submit_plan(req.id, [1] * int(rows[i].prompt_tokens), [1] * total, plan, arrival=t_send, sink=sink)

    reqs = (Request(id=str(i), prompt="", max_tokens=plans[i][0], workload="measured") for i in range(len(rows)))
    sim = SimSpec(str(profile), None, ClosedLoop(c["level"]), num_requests=len(rows))
    result = simulate(sim, reqs, engine=engine, submit=submit)
    frame = request_frame(result.run.records)
    s = summarize(frame, ([], []), config={"clock": {"t0_ns": result.run.t0_ns}, "load": sim.load.describe()})
    return {"tput": s["output_throughput_tok_s"], "failed": int((~frame["ok"]).sum())}


def fmt(x, spec: str) -> str:
    return "" if x is None else format(x, spec)


def deployment_of(sweep: Path):
    """The sweep's deployment: its file where it still is (one's own, or the catalog's), else the
    catalog's of that name."""
    d = json.loads((sweep / "manifest.json").read_text())["deployment"]
    src = d.get("source")
    return load(src if src and Path(src).exists() else d["name"])


def report(sweep: Path, out: Path) -> tuple[list[str], list[str]]:
    dep = deployment_of(sweep)
    deployment = dep.name
    found = cells(sweep)
    if not any(c["variant"] == "baseline" for c in found):
        return [], [f"FAIL {deployment}: no finished baseline cell in {sweep}: nothing to fit the forward on"]
    fit = fitted(found)
    (out / deployment).mkdir(parents=True, exist_ok=True)
    rows, pred, meas, failed, written = [], {}, {}, [], set()
    for c in found:
        spec = dep.variants[c["variant"]].speculative_config
        path = out / deployment / f"{c['variant']}.toml"
        if c["variant"] not in written:  # this run's fit, never a profile an earlier run left there
            path.write_text(profile_text(dep, c["variant"], fit, spec, sweep))
            written.add(c["variant"])
        p = predict(path, spec, c)
        key = (c["variant"], c["level"])
        pred[key], meas[key] = p["tput"], c["summary"]["output_throughput_tok_s"]
        if p["failed"]:  # a replayed request the profile could not serve: that cell's figure is not the cell's
            failed.append(f"{c['variant']}/c{c['level']} {p['failed']} replayed requests failed")
    fw = fit["forward"]
    head = [
        f"{deployment}: forward fitted on {fw['samples']:,} baseline steps ({fw['dropped']:,} outliers left out): "
        f"{fw['constant'] * 1e3:.3f} ms + {fw['per_kv_token'] * 1e9:.3f} ns per KV token + "
        f"{fw['per_batched_token'] * 1e6:.1f} us per batched token",
    ]
    for v in dict.fromkeys(c["variant"] for c in found if c["variant"] != "baseline"):
        if v in fit:
            d = fit[v]
            head.append(
                f"  {v}: drafting {d['per_step'] * 1e3:+.3f} ms a step + "
                f"{d['per_draft_token'] * 1e3:+.3f} ms per draft token ({d['samples']:,} steps)"
            )
    rows = [
        "| variant | users | measured tok/s | simulated tok/s | error | measured speedup | simulated speedup | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    bad = list(failed)
    for (v, level), m in sorted(meas.items(), key=lambda kv: (kv[0][0] != "baseline", kv[0])):
        p = pred[(v, level)]
        err = p / m - 1 if m else None
        sm = sp = serr = None
        if v != "baseline" and ("baseline", level) in meas:
            sm, sp = m / meas[("baseline", level)], p / pred[("baseline", level)]
            serr = sp / sm - 1
        rows.append(
            f"| {v} | {level} | {m:.1f} | {p:.1f} | {fmt(err, '+.1%')} | {fmt(sm, '.2f')} | {fmt(sp, '.2f')} "
            f"| {fmt(serr, '+.1%')} |"
        )
        for what, e in (("throughput", err), ("speedup", serr)):
            if e is not None and abs(e) > TOLERANCE:
                bad.append(f"{v}/c{level} {what} {e:+.1%}")
    counts = ", ".join(f"{c['variant']}/c{c['level']} {c['steps_read']}/{vllm_steps(c) or '?'}" for c in found)
    head.append(f"  steps read off the chunk times / vLLM's own count: {counts}")
    check = [
        f"{'ok  ' if not bad else 'FAIL'} {deployment}: simulated within {TOLERANCE:.0%} of measured, every cell"
        + ("" if not bad else f": {len(bad)} off ({', '.join(bad)})")
    ]
    return head + [""] + rows, check


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, nargs="+", help="finished sweeps of bench/vllm_cpu.py, one a deployment")
    ap.add_argument("--output", type=Path, default=Path("cpu-profiles"), help="where the fitted profiles go")
    ap.add_argument(
        "--data-dir", type=Path, default=Path(os.environ.get("LOADGEN_DATA_DIR", REPO.parent / "shared" / "datasets"))
    )
    args = ap.parse_args()
    sweeps = args.results
    if not sweeps:
        tmp = args.output / "sweeps"
        argv = [
            sys.executable,
            str(REPO / "bench" / "vllm_cpu.py"),
            "--output",
            str(tmp),
            "--data-dir",
            str(args.data_dir),
        ]
        subprocess.run(argv, check=False)  # its table and checks, then ours
        sweeps = sorted(p for p in tmp.iterdir() if (p / "manifest.json").exists())
    if missing := [str(s) for s in sweeps if not (s / "manifest.json").exists()]:
        print(f"cpu_profile: error: not a sweep's directory (no manifest.json): {', '.join(missing)}", file=sys.stderr)
        return 2
    checks = []
    for s in sweeps:
        lines, check = report(s, args.output)
        print("\n".join(lines) + "\n")
        checks += check
    print("\n".join(checks))
    return 1 if any(c.startswith("FAIL") for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
