"""Which dtype each local model should be served in on vLLM's CPU build, on this CPU
(docs/vllm-cpu.md, "dtype by CPU"). For every model the project serves there (the tiny Llama,
Gemma-3-270M, the Qwen2.5-Coder pair) and every dtype vLLM's CPU build offers (bfloat16,
float32, float16), one `loadgen sweep` of the deployment's baseline at 1 and 4 users on code
editing (64 tokens an answer, greedy, with every answer's token ids), the deployment's
`dtype_by_cpu` replaced by the one dtype; then the table: model x dtype, output tokens per
second at 1 and 4 users, the median TPOT at 1 (ms: decoding alone, without the prefill), and
whether each 1-user answer's first 64 greedy tokens are those float32 gave (the most exact
arithmetic here), with the CPU kind the rows were measured on (servers/deploy/machine.py
`kind`: avx512_bf16, avx512, avx2) and the CPU itself; under each model, the fastest dtype (by
the geometric mean of 1 and 4 users), the fastest that served float32's tokens, and the one the
catalog chooses for this kind.

    python3 -m bench.vllm_dtype                               # every model and dtype: about 25 minutes on 2 cores
    python3 -m bench.vllm_dtype --models qwen2.5-coder-1.5b-vllm-cpu --dtypes bfloat16,float32
    python3 -m bench.vllm_dtype --results DIR                 # the table of sweeps made before (DIR/MODEL/DTYPE)

Needs the vllm-cpu extra and the local models (docs/vllm-cpu.md) and InstructCoder (--data-dir,
default ../shared/datasets beside the repository). Each row is this machine's: run it on a
machine of each CPU kind and record each table with its machine line.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from bench.qwen_cpu import machine
from servers.deploy import machine as cpu
from servers.deployments import catalog
from servers.engines import vllm_cpu

REPO = Path(__file__).resolve().parents[1]
MODELS = ("tiny-llama-vllm-cpu", "gemma-3-270m-vllm-cpu", "qwen2.5-coder-0.5b-vllm-cpu", "qwen2.5-coder-1.5b-vllm-cpu")
DTYPES = ("bfloat16", "float32", "float16")
REFERENCE = "float32"
TOKENS = 64


def with_dtype(name: str, dtype: str, where: Path) -> Path:
    """The catalog's deployment `name` as a file of its own whose dtype_by_cpu names `dtype` for
    every CPU kind (the rest of the file as it is)."""
    text = (catalog.HERE / f"{name}.toml").read_text()
    text = re.sub(r"(?m)^dtype_by_cpu\s*=.*\n", "", text)
    path = where / f"{name}-{dtype}.toml"
    path.write_text(f'dtype_by_cpu = {{ default = "{dtype}" }}\n' + text)
    return path


def sweep(deployment: Path, out: Path, data: Path) -> tuple[int, float]:
    """The deployment's baseline at 1 and 4 users, greedy, with token ids: (exit code, seconds)."""
    argv = [sys.executable, "-m", "loadgen", "sweep", "--servers", str(deployment), "--variants", "baseline"]
    argv += ["--concurrency", "1,4", "--workloads", f"code-edit,output=fixed:{TOKENS}", "--data-dir", str(data)]
    argv += ["--token-ids", "--output", str(out)]
    start = time.monotonic()
    rc = subprocess.run(argv, cwd=REPO, check=False).returncode  # a dtype that does not serve is a row
    return rc, time.monotonic() - start


def cell(out: Path, level: int) -> tuple[float | None, dict[str, list[int]], float | None]:
    """A cell's output tokens per second, each measured answer's first token ids by request, and
    its median TPOT (ms: the decode step alone, without the prompt's prefill)."""
    where = out / "cells" / "baseline" / "code-edit" / f"c{level}"
    if not (where / "summary.json").exists():
        return None, {}, None
    summary = json.loads((where / "summary.json").read_text())
    frame = pd.read_parquet(where / "requests.parquet")
    frame = frame[frame["ok"] & ~frame["warmup"]]
    ids = {r.request_id: [int(t) for t in r.output_token_ids[:TOKENS]] for r in frame.itertuples()}
    return summary.get("output_throughput_tok_s") or None, ids, (summary.get("tpot_ms") or {}).get("p50")


def why_not(out: Path) -> str:
    """Why a dtype did not serve: the last error its server's log gave (vLLM refuses some
    dtypes for some models), or that no sweep ran."""
    log = out / "servers" / "baseline.log"
    if not log.exists():
        return "did not serve: no sweep"
    lines = log.read_text(errors="replace").splitlines()
    errors = [ln.strip() for ln in lines if "rror" in ln and "WARNING" not in ln and "visit" not in ln]
    return f"did not serve: {errors[-1][:110]}" if errors else "did not serve (its server's log says no error)"


def same(ids: dict[str, list[int]], ref: dict[str, list[int]]) -> str:
    """Whether every answer both served has the reference's tokens, and if not where the first differs."""
    both = sorted(set(ids) & set(ref))
    if not both:
        return "-"
    differ = [next((i for i, (a, b) in enumerate(zip(ids[r], ref[r])) if a != b), None) for r in both]
    bad = [i for i in differ if i is not None]
    return "identical" if not bad else f"{len(bad)} of {len(both)} differ (first at token {min(bad)})"


def table(results: Path, models, dtypes) -> list[str]:
    kind = json.loads((results / "machine.json").read_text())["kind"] if (results / "machine.json").exists() else "?"
    head = f"{'model':<30} {'CPU kind':<12} {'dtype':<9} {'tok/s 1':>8} {'tok/s 4':>8} {'TPOT 1':>7}"
    lines = [f"{head}  first {TOKENS} tokens vs {REFERENCE}"]
    for name in models:
        rows = {d: (cell(results / name / d, 1), cell(results / name / d, 4)) for d in dtypes}
        ref = rows.get(REFERENCE, ((None, {}, None), None))[0][1]
        speed, verdicts = {}, {}
        for d, ((one, ids, tpot), (four, _, _)) in rows.items():
            verdicts[d] = same(ids, ref) if one is not None else why_not(results / name / d)
            one_s, four_s = (f"{x:8.2f}" if x else f"{'-':>8}" for x in (one, four))
            tpot_s = f"{tpot:7.1f}" if tpot else f"{'-':>7}"
            lines.append(f"{name:<30} {kind:<12} {d:<9} {one_s} {four_s} {tpot_s}  {verdicts[d]}")
            if one and four:
                speed[d] = (one * four) ** 0.5  # the geometric mean of 1 and 4 users: neither load alone
        chosen = vllm_cpu.dtype(catalog.load(name), kind)
        fastest = max(speed, key=speed.__getitem__, default=None)
        exact = max((d for d in speed if verdicts[d] == "identical"), key=speed.__getitem__, default=None)
        lines.append(
            f"  fastest (geometric mean of 1 and 4 users): {fastest or '-'}; fastest with float32's tokens: "
            f"{exact or '-'}; the catalog chooses {chosen or 'vLLM default'} on {kind}"
        )
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "datasets"))
    p.add_argument("--output", default=None, help="keep the sweeps in DIR/MODEL/DTYPE (default: a temporary folder)")
    p.add_argument("--results", default=None, help="only the table, of sweeps made before into DIR")
    args = p.parse_args()
    models, dtypes = args.models.split(","), args.dtypes.split(",")
    if REFERENCE not in dtypes:
        sys.exit(f"--dtypes {args.dtypes}: the tokens are compared with {REFERENCE}'s; include it")
    if args.results:
        print("\n".join(table(Path(args.results), models, dtypes)))
        return
    results = Path(args.output or tempfile.mkdtemp(prefix="vllm-dtype-"))
    results.mkdir(parents=True, exist_ok=True)
    (results / "machine.json").write_text(json.dumps({"kind": cpu.kind(), "machine": machine()}))
    times = []
    for name in models:
        for d in dtypes:
            rc, seconds = sweep(with_dtype(name, d, results), results / name / d, Path(args.data_dir))
            times.append(f"{name} {d}: exit {rc}, {seconds:.0f} s")
    print(f"machine: {machine()}; CPU kind {cpu.kind()}")
    print("\n".join(times))
    print("\n".join(table(results, models, dtypes)))


if __name__ == "__main__":
    main()
