"""The emulator held to a real engine where SD pays (docs/performance.md, "Fitted on some cells,
judged on the others"): Qwen2.5-Coder-1.5B on vLLM's CPU build, drafted by n-gram and by its 0.5B
sibling. A cost profile fitted on part of a real sweep predicts the rest, in one run:

    python3 -m bench.qwen_fit --output OUT        # runs the real sweeps first (about 30 minutes)
    python3 -m bench.qwen_fit --results SWEEP --alone SWEEP0 --output OUT

- The real sweeps (`--results`, `--alone`, or run here): qwen2.5-coder-1.5b-vllm-cpu's baseline,
  ngram, draft-model and draft-model-k5 at 1, 2, 4, 8 and 16 users on code-edit (InstructCoder)
  and chat (ShareGPT) with `--token-ids`; and qwen2.5-coder-0.5b-vllm-cpu (the draft model served
  alone) at the same levels on code-edit.
- Fitted on: code-edit, k 3 (baseline, ngram, draft-model), at 1, 4 and 16 users: the engine's
  steps read off the chunk times alone (loadgen/measures/enginesteps.py's engine_steps, not held to vLLM's
  count, which is printed beside it), servers/emulator/costfit.py's roofline forward and
  non-negative drafter terms. The profile is written to OUT/profile.toml; an existing one is
  refused (a rerun into the same folder would predict with the old profile).
- Predicted: every cell, (a) `simulated`: the cell's requests replayed step for step as vLLM
  served them (bench/cpu_profile.py's plan_of) on the fitted profile; (b) `virtual`: `loadgen
  sweep --virtual --replay SWEEP` on the deployment with that profile (the real cell's token ids:
  the same prompt and output tokens, its acceptance per position; the live engine decides the
  steps). Errors in-sample and out-of-sample in separate columns; out-of-sample: k 5, 2 and 8
  users, chat.
- The time breakdown of each SD cell (drafting, verifying accepted tokens, verifying rejected
  drafts, the rest: costfit.breakdown) from the fitted model over the cell's measured steps; and
  the fitted parts against the real engine: the draft model's fitted forward against its own
  step served alone, the target's forward against the baseline's measured step at the same
  tokens.
- `loadgen whatif` on the draft-model cells' real traces (code-edit), on the fitted profile.

Checks printed last: every out-of-sample cell within 10% on output tok/s and speedup, no fitted
term negative, the virtual cells' tokens equal to the real cells' request by request.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
from bench import cpu_profile  # noqa: E402
from loadgen.measures import enginesteps  # noqa: E402
from servers.emulator import costfit  # noqa: E402

DEPLOYMENT, ALONE = "qwen2.5-coder-1.5b-vllm-cpu", "qwen2.5-coder-0.5b-vllm-cpu"
VARIANTS = ("baseline", "ngram", "draft-model", "draft-model-k5")
LEVELS, WORKLOADS = "1,2,4,8,16", "code-edit,chat"
FIT_WORKLOAD, FIT_VARIANTS, FIT_LEVELS = "code-edit", ("baseline", "ngram", "draft-model"), (1, 4, 16)
TOLERANCE = 0.10


def in_sample(c: dict) -> bool:
    return c["workload"] == FIT_WORKLOAD and c["variant"] in FIT_VARIANTS and c["level"] in FIT_LEVELS


def sweep(servers: str, out: Path, data: Path, variants: str | None, workloads: str) -> None:
    argv = [sys.executable, "-m", "loadgen", "sweep", "--servers", servers, "--concurrency", LEVELS, "--token-ids"]
    argv += ["--workloads", workloads, "--data-dir", str(data), "--output", str(out)]
    subprocess.run(argv + (["--variants", variants] if variants else []), cwd=REPO, check=False)


def method_of(dep, variant: str) -> tuple[str | None, int]:
    spec = dep.variants[variant].speculative_config
    return (spec["method"], int(spec["num_speculative_tokens"])) if spec else (None, 0)


def fit(found: list[dict], dep, alone: list[dict]) -> tuple:
    """The forward on the in-sample baseline steps, each drafter on its in-sample steps; the
    draft model's own forward on the 0.5B's steps served alone, at the same levels."""
    fit_cells = [c for c in found if in_sample(c)]
    base = np.concatenate([c["steps"] for c in fit_cells if c["variant"] == "baseline"])
    forward = costfit.fit_forward(base)
    own = [c["steps"] for c in alone if c["level"] in FIT_LEVELS]
    draft_alone = costfit.fit_forward(np.concatenate(own)) if own else None
    drafters = {}
    for v in FIT_VARIANTS[1:]:
        method, k = method_of(dep, v)
        assert method is not None, v  # the SD variants fitted
        steps = np.concatenate([c["steps"] for c in fit_cells if c["variant"] == v])
        drafters[method] = costfit.fit_drafter(method, k, steps, forward[0], draft_alone[0] if draft_alone else None)
    return forward, drafters, draft_alone, sorted({f"{c['variant']}/c{c['level']}" for c in fit_cells})


def write_profile(out: Path, dep, forward, drafters, sweep_dir: Path) -> Path:
    path = out / "profile.toml"
    argv = cpu_profile.render(dep, "baseline", port=1).argv
    path.write_text(
        costfit.profile_text(
            description=f"{dep.description}, fitted",
            models=[dep.served_model_name],
            max_model_len=cpu_profile.max_model_len(argv),
            forward=forward,
            drafters=drafters,
            source=f"bench/qwen_fit.py on {sweep_dir}, in-sample {FIT_WORKLOAD} k 3 at {FIT_LEVELS} users",
        )
    )
    return path


def virtual(out: Path, profile: Path, sweep_dir: Path, data: Path) -> Path:
    """`loadgen sweep --virtual --replay` on the catalog's deployment with the fitted profile."""
    text = (REPO / "servers" / "deployments" / f"{DEPLOYMENT}.toml").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("emulator_args = "))
    dep_file = out / f"{DEPLOYMENT}-fitted.toml"
    dep_file.write_text(text.replace(line, f'{line[:-1]}, "--profile", "{profile.resolve()}"]'))
    where = out / "virtual"
    argv = [sys.executable, "-m", "loadgen", "sweep", "--servers", str(dep_file), "--engine", "emulator", "--virtual"]
    argv += ["--replay", str(sweep_dir), "--variants", ",".join(VARIANTS), "--concurrency", LEVELS]
    argv += ["--workloads", WORKLOADS, "--data-dir", str(data), "--output", str(where)]
    r = subprocess.run(argv, cwd=REPO, check=False, capture_output=True, text=True)
    if r.returncode:
        print(r.stdout[-2000:] + r.stderr[-2000:], file=sys.stderr)
    return where


def _virtual_cell(where: Path, c: dict) -> tuple[float | None, int]:
    """The virtual cell's output tok/s, and how many of the real cell's requests it served with
    other prompt or output token counts (or not at all)."""
    d = where / "cells" / c["variant"] / c["workload"] / f"c{c['level']}"
    if not (d / "summary.json").exists():
        return None, len(c["frame"])
    s = json.loads((d / "summary.json").read_text())
    v = pd.read_parquet(d / "requests.parquet").set_index("request_id")
    real = c["frame"][c["frame"]["ok"] & ~c["frame"]["warmup"]].set_index("request_id")
    cols = ["prompt_tokens", "completion_tokens"]
    j = real[cols].merge(v[cols], how="left", left_index=True, right_index=True, suffixes=("", "_v"))
    differ = int(
        ((j["prompt_tokens"] != j["prompt_tokens_v"]) | (j["completion_tokens"] != j["completion_tokens_v"])).sum()
    )
    return s.get("output_throughput_tok_s"), differ


def _err(p, m):
    return None if p is None or not m else p / m - 1


def _f(x, spec: str) -> str:
    return "" if x is None or x != x else format(x, spec)


def predictions(found: list[dict], dep, profile: Path, where: Path) -> pd.DataFrame:
    rows = []
    for c in found:
        spec = dep.variants[c["variant"]].speculative_config
        sim = cpu_profile.predict(profile, spec, c, mode=True)
        vt, differ = _virtual_cell(where, c)
        rows.append(
            {
                "workload": c["workload"],
                "variant": c["variant"],
                "users": c["level"],
                "sample": "in" if in_sample(c) else "out",
                "measured": c["summary"]["output_throughput_tok_s"],
                "simulated": sim["tput"],
                "virtual": vt,
                "token_counts_differ": differ,
                "steps": len(c["steps"]),
                "vllm_steps": cpu_profile.vllm_steps(c),
            }
        )
    t = pd.DataFrame(rows)
    base = t[t["variant"] == "baseline"].set_index(["workload", "users"])
    for col in ("measured", "simulated", "virtual"):
        t[f"speedup_{col}"] = [
            None
            if r.variant == "baseline"
            or (r.workload, r.users) not in base.index
            or not base.loc[(r.workload, r.users), col]
            else (r[col] or np.nan) / base.loc[(r.workload, r.users), col]
            for _, r in t.iterrows()
        ]
    return t


def table(t: pd.DataFrame, what: str) -> list[str]:
    """tok/s (`what` ""), or speedup (`what` "speedup_"): measured, simulated, virtual, and each
    prediction's error in an in-sample and an out-of-sample column."""
    lines = [
        "| workload | variant | users | measured | simulated | virtual | simulated error, in-sample | out-of-sample "
        "| virtual error, in-sample | out-of-sample |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in t.iterrows():
        m = r[f"{what}measured"]
        if what and (m is None or m != m):
            continue
        errs = {p: _err(r[f"{what}{p}"], m) for p in ("simulated", "virtual")}
        cols = []
        for p in ("simulated", "virtual"):
            cols += [
                _f(errs[p], "+.1%") if r["sample"] == "in" else "",
                _f(errs[p], "+.1%") if r["sample"] == "out" else "",
            ]
        lines.append(
            f"| {r['workload']} | {r['variant']} | {r['users']} | {_f(m, '.2f')} | {_f(r[f'{what}simulated'], '.2f')} "
            f"| {_f(r[f'{what}virtual'], '.2f')} | " + " | ".join(cols) + " |"
        )
    return lines


def breakdown_table(found: list[dict], dep, forward, drafters) -> list[str]:
    lines = [
        "| workload | variant | users | drafting | verifying accepted | verifying rejected | rest "
        "| modelled / measured time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in found:
        method, k = method_of(dep, c["variant"])
        d = drafters.get(method, (None,))[0] if method else None
        b = costfit.breakdown(c["steps"], forward[0], d, k)
        lines.append(
            f"| {c['workload']} | {c['variant']} | {c['level']} | {b['drafting_share']:.0%} "
            f"| {b['verify_accepted_share']:.0%} "
            f"| {b['verify_rejected_share']:.0%} | {b['rest_share']:.0%} | {b['modelled_s'] / b['measured_s']:.2f} |"
        )
    return lines


def _ms(measured: float, model: float) -> str:
    return f"{measured * 1e3:.1f} | {model * 1e3:.1f} | {model / measured - 1:+.1%}"


def _knee(fw) -> float:
    return fw.weights / fw.per_batched_token if fw.per_batched_token else 0.0


def decode_step(steps: np.ndarray, running: int) -> tuple[float, float] | None:
    """The median measured step of `running` requests decoding and no prompt in it (seconds),
    and its median KV tokens."""
    sel = steps[(steps[:, costfit.PREFILL] == 0) & (steps[:, costfit.RUNNING] == running)]
    return (float(np.median(sel[:, costfit.T])), float(np.median(sel[:, costfit.KV]))) if len(sel) >= 3 else None


def against_engine(found: list[dict], alone: list[dict], forward, drafters) -> list[str]:
    """The fitted parts against what the real engine shows where it can be measured: the draft
    model's own forward (k of them a drafting step) against its decode step served alone at the
    same requests; the target's forward against the baseline's decode step at the same tokens."""
    lines = [
        "| part | tokens a forward | measured step (ms) | fitted forward (ms) | error |",
        "|---|---|---|---|---|",
    ]
    draft = drafters.get("draft_model", (None,))[0]
    for c in alone:
        got = decode_step(c["steps"], c["level"])
        if got is None or draft is None:
            continue
        model = float(draft.draft_forward.time(got[1], c["level"]))
        tag = "in-sample" if c["level"] in FIT_LEVELS else "out-of-sample"
        lines.append(f"| 0.5B draft model alone ({tag}) | {c['level']} | {_ms(got[0], model)} |")
    for c in found:
        if c["variant"] != "baseline" or c["workload"] != FIT_WORKLOAD:
            continue
        got = decode_step(c["steps"], c["level"])
        if got is not None:
            model = float(forward[0].time(got[1], c["level"]))
            tag = "in-sample" if in_sample(c) else "out-of-sample"
            lines.append(f"| 1.5B target (baseline, {tag}) | {c['level']} | {_ms(got[0], model)} |")
    return lines


def whatif(out: Path, sweep_dir: Path, profile: Path) -> list[str]:
    """`loadgen traces` on the code-edit draft-model cells, then `loadgen whatif` on them."""
    traces = out / "traces-draft-model.jsonl"
    with traces.open("w") as f:
        for d in sorted((sweep_dir / "cells" / "draft-model" / FIT_WORKLOAD).glob("c*")):
            tmp = out / f"traces-{d.name}.jsonl"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "loadgen",
                    "traces",
                    str(d),
                    "--drafter",
                    "draft_model:3",
                    "--ngram",
                    "2,5",
                    "--output",
                    str(tmp),
                ],
                cwd=REPO,
                check=False,
                capture_output=True,
            )
            if tmp.exists():
                f.write(tmp.read_text())
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadgen",
            "whatif",
            str(traces),
            "--profile",
            str(profile),
            "--batch",
            LEVELS,
            "--output",
            str(out / "whatif"),
        ],
        cwd=REPO,
        check=False,
        capture_output=True,
        text=True,
    )
    return (r.stdout + r.stderr).strip().splitlines()


WHATIF_CELLS = {
    "none": "baseline",
    "ngram k=3": "ngram",
    "draft_model k=3": "draft-model",
    "draft_model k=5": "draft-model-k5",
}


def whatif_beside(out: Path, t: pd.DataFrame) -> list[str]:
    """`whatif`'s fixed-k policies beside the real code-edit cells they correspond to (the same
    drafter at the same k; the traces are the draft-model cells', n-gram replayed over their ids)."""
    path = out / "whatif" / "whatif.json"
    if not path.exists():
        return ["(no whatif.json)"]
    real = t[t["workload"] == FIT_WORKLOAD].set_index(["variant", "users"])["measured"]
    lines = ["| policy | users | whatif tok/s | real cell | measured tok/s | error |", "|---|---|---|---|---|---|"]
    for r in json.loads(path.read_text())["results"]:
        v = WHATIF_CELLS.get(r["policy"])
        if v is None or (v, r["batch"]) not in real.index:
            continue
        m = real[(v, r["batch"])]
        got = r["output_tok_s"]
        lines.append(f"| {r['policy']} | {r['batch']} | {got:.2f} | {v} | {m:.2f} | {_err(got, m):+.1%} |")
    return lines


def again(t: pd.DataFrame, other: Path) -> tuple[list[str], str]:
    """The same cells measured again (another sweep of the deployment on this machine): how far
    apart the two measurements of a cell are, the bound on how close any prediction can be judged."""
    rows = []
    for c in cpu_profile.cells(other):
        hit = t[(t["workload"] == c["workload"]) & (t["variant"] == c["variant"]) & (t["users"] == c["level"])]
        if len(hit):
            rows.append(
                (
                    c["workload"],
                    c["variant"],
                    c["level"],
                    hit["measured"].iloc[0],
                    c["summary"]["output_throughput_tok_s"],
                )
            )
    lines = ["| workload | variant | users | this sweep | the other | difference |", "|---|---|---|---|---|---|"]
    lines += [f"| {w} | {v} | {u} | {a:.2f} | {b:.2f} | {_err(b, a):+.1%} |" for w, v, u, a, b in rows]
    d = np.abs([b / a - 1 for *_, a, b in rows]) if rows else np.zeros(0)
    summary = (
        f"the same cells measured twice ({other}): median |difference| {np.median(d):.1%}, "
        f"{int((d <= TOLERANCE).sum())} of {len(d)} within {TOLERANCE:.0%}"
        if len(d)
        else f"no cell of {other} matches"
    )
    return lines, summary


def load(sweep_dir: Path) -> list[dict]:
    found = [c for c in cpu_profile.cells(sweep_dir) if c["variant"] in VARIANTS]
    for c in found:
        c["steps"] = enginesteps.engine_steps(c["frame"][~c["frame"]["warmup"]], c["k"])
    return found


def checks(t: pd.DataFrame, forward, drafters) -> list[str]:
    out_rows = t[t["sample"] == "out"]
    bad = []
    for _, r in out_rows.iterrows():
        for p in ("simulated", "virtual"):
            for what in ("", "speedup_"):
                e = _err(r[f"{what}{p}"], r[f"{what}measured"])
                if (
                    r[f"{what}measured"] is not None
                    and r[f"{what}measured"] == r[f"{what}measured"]
                    and (e is None or abs(e) > TOLERANCE)
                ):
                    cell = f"{r['workload']}/{r['variant']}/c{r['users']}"
                    bad.append(f"{p} {cell} {'speedup ' if what else 'tok/s '}{_f(e, '+.1%') or 'missing'}")
    neg = costfit.negative_terms(forward[1], {m: f for m, (_, f) in drafters.items()})
    differ = int(t["token_counts_differ"].sum())
    return [
        f"{'ok  ' if not bad else 'FAIL'} out-of-sample cells within {TOLERANCE:.0%} on tok/s and speedup"
        + (f": {len(bad)} off ({'; '.join(bad)})" if bad else ""),
        f"{'ok  ' if not neg else 'FAIL'} no fitted term negative" + (f": {', '.join(neg)}" if neg else ""),
        f"{'ok  ' if not differ else 'FAIL'} virtual cells' prompt and output tokens equal to the real cells' "
        f"request by request" + (f": {differ} requests differ" if differ else ""),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, help=f"a finished sweep of {DEPLOYMENT} with --token-ids [run here]")
    ap.add_argument("--alone", type=Path, help=f"a finished sweep of {ALONE} [run here]")
    ap.add_argument("--output", type=Path, required=True, help="where the profile, virtual sweep and traces go")
    ap.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "datasets")
    ap.add_argument("--again", type=Path, help="another sweep of the same cells: how repeatable a cell is here")
    args = ap.parse_args()
    out = args.output
    if (out / "profile.toml").exists():
        print(
            f"{out / 'profile.toml'} exists: give a new --output (a fitted profile is written fresh each run)",
            file=sys.stderr,
        )
        return 2
    out.mkdir(parents=True, exist_ok=True)
    sweep_dir, alone_dir = args.results or out / "sweep", args.alone or out / "alone"
    if args.results is None:
        sweep(DEPLOYMENT, sweep_dir, args.data_dir, ",".join(VARIANTS), WORKLOADS)
    if args.alone is None:
        sweep(ALONE, alone_dir, args.data_dir, None, FIT_WORKLOAD)
    dep = cpu_profile.deployment_of(sweep_dir)
    found, alone = load(sweep_dir), load(alone_dir) if (alone_dir / "manifest.json").exists() else []
    forward, drafters, draft_alone, fitted_on = fit(found, dep, alone)
    profile = write_profile(out, dep, forward, drafters, sweep_dir)
    where = virtual(out, profile, sweep_dir, args.data_dir)
    t = predictions(found, dep, profile, where)
    fw = forward[0]
    print(f"{sweep_dir}: {DEPLOYMENT}, {cpu_profile_machine()}")
    print(f"fitted on {', '.join(fitted_on)} ({FIT_WORKLOAD}); profile {profile}")
    print(
        f"forward: {fw.per_kv_token * 1e6:.3f} us per KV token + max({fw.weights * 1e3:.1f} ms, "
        f"{fw.per_batched_token * 1e3:.2f} ms per token) (knee {_knee(fw):.0f} tokens), "
        f"{forward[1].samples} steps, rms {forward[1].rms * 1e3:.1f} ms"
    )
    if draft_alone is not None:
        d0 = draft_alone[0]
        print(
            f"the 0.5B draft model served alone: {d0.per_kv_token * 1e6:.3f} us per KV token + "
            f"max({d0.weights * 1e3:.1f} ms, {d0.per_batched_token * 1e3:.2f} ms per token) (knee {_knee(d0):.0f}), "
            f"{draft_alone[1].samples} steps, rms {draft_alone[1].rms * 1e3:.1f} ms"
        )
    for method, (_, f) in drafters.items():
        terms = ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in f.terms.items())
        print(f"{method}: {terms} ({f.samples} steps, rms {f.rms * 1e3:.1f} ms)")
    print("\nengine steps read off the chunk times, against vLLM's own count:")
    print(
        ", ".join(
            f"{r.variant}/{r.workload}/c{r.users} {r.steps}/{_f(r.vllm_steps, '.0f') or '?'}" for r in t.itertuples()
        )
    )
    print("\noutput tok/s\n" + "\n".join(table(t, "")))
    print("\nspeedup over baseline\n" + "\n".join(table(t, "speedup_")))
    print("\ntime breakdown (share of the modelled step time, fitted model over each cell's measured steps)")
    print("\n".join(breakdown_table(found, dep, forward, drafters)))
    print("\nfitted parts against the real engine\n" + "\n".join(against_engine(found, alone, forward, drafters)))
    print("\nloadgen whatif on the code-edit draft-model cells' traces\n" + "\n".join(whatif(out, sweep_dir, profile)))
    print("\nwhatif's fixed-k policies beside the real code-edit cells\n" + "\n".join(whatif_beside(out, t)))
    t.to_csv(out / "predictions.csv", index=False)
    lines = checks(t, forward, drafters)
    errs = {
        p: np.abs([_err(r[p], r["measured"]) or np.inf for _, r in t[t["sample"] == "out"].iterrows()])
        for p in ("simulated", "virtual")
    }
    lines += [
        f"     out-of-sample tok/s, {p}: median |error| {np.median(e):.1%}, {int((e <= TOLERANCE).sum())} of {len(e)} "
        f"within {TOLERANCE:.0%}"
        for p, e in errs.items()
    ]
    if args.again:
        table_, said = again(t, args.again)
        print("\nrepeatability: the same cells in another sweep\n" + "\n".join(table_))
        lines.append(f"     {said}")
    print("\n" + "\n".join(lines))
    return 0 if all(ln.startswith(("ok", " ")) for ln in lines) else 1


def cpu_profile_machine() -> str:
    from bench import qwen_cpu

    return qwen_cpu.machine()


if __name__ == "__main__":
    sys.exit(main())
