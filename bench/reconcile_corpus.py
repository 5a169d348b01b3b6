"""Record the streams of tests/test_reconcile_corpus.py: real streams, each request's chunks as
loadgen read them beside its server's own counts and per-step record, for the test to mutate
(keeping every sum consistent) and to check that each mutation is reported and each original
reconciles. Kept small, in the repository (tests/data/reconcile_streams.json); the cases and their
expected verdicts are written by hand in the test, not here.

    python3 -m bench.reconcile_corpus --source emulator   # the emulator's engine (seconds)
    python3 -m bench.reconcile_corpus --source vllm-cpu   # real vLLM with the Qwen pair (minutes)

Each source: the catalog's qwen2.5-coder-1.5b-vllm-cpu deployment, variants draft-model (the 0.5B
drafting, k 3) and ngram (k 3), 2 users, 4 requests of 24 tokens of InstructCoder's code edits,
greedy, each request asking for a chunk every 2 tokens (stream_interval 2: chunks that merge
steps beside single steps), vLLM's per-step record asked for (--per-request-spec-decode-metrics
detailed). A source's streams replace its earlier ones in the file; the machine is recorded."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "reconcile_streams.json"
DEPLOYMENT = REPO / "servers" / "deployments" / "qwen2.5-coder-1.5b-vllm-cpu.toml"
VARIANTS = ("draft-model", "ngram")


def _deployment(tmp: Path) -> Path:
    """The catalog's deployment asking vLLM for its per-step record, and a 1 GiB KV cache."""
    text = DEPLOYMENT.read_text().replace(
        '"--per-request-spec-decode-metrics", "summary"', '"--per-request-spec-decode-metrics", "detailed"'
    )
    dep = tmp / DEPLOYMENT.name
    dep.write_text(text.replace('VLLM_CPU_KVCACHE_SPACE = "4"', 'VLLM_CPU_KVCACHE_SPACE = "1"'))
    return dep


def _sweep(source: str, tmp: Path, data_dir: str) -> Path:
    out = tmp / "sweep"
    argv = [sys.executable, "-m", "loadgen", "sweep", "--servers", str(_deployment(tmp)), "--variants"]
    argv += [",".join(VARIANTS), "--concurrency", "2", "--workloads", "code-edit,output=fixed:24"]
    argv += ["--data-dir", data_dir, "--num-requests", "4", "--warmup", "0", "--output", str(out)]
    argv += ["--extra-body", '{"stream_interval": 2}', "--quiet"]
    if source == "emulator":
        argv += ["--engine", "emulator", "--time-scale", "1"]
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        sys.exit(f"the sweep failed (exit {res.returncode}): {res.stderr.strip().splitlines()[-1:]}")
    return out


def _stream(cell: Path, host: dict) -> dict:
    """One cell as the corpus keeps it: the drafter, k, the counter, and per request its finish,
    chunks (tokens each, as read), the server's count, verify steps and per-step record."""
    summary = json.loads((cell / "summary.json").read_text())
    frame = pd.read_parquet(cell / "requests.parquet")
    sd = summary["spec_decode"] or {}
    requests = []
    for r in frame.sort_values("index").itertuples():
        per_step = r.server_step_accepted
        requests.append(
            {
                "index": int(r.index),
                "finish": r.finish_reason,
                "chunks": [int(n) for n in r.chunk_tokens],
                "accepted": None if pd.isna(r.server_accepted_tokens) else int(r.server_accepted_tokens),
                "verify": None if pd.isna(r.server_spec_steps) else int(r.server_spec_steps),
                "per_step": None if per_step is None else [int(a) for a in per_step],
            }
        )
    return {
        "speculative_config": json.loads(summary["config"]["speculative_config"]),
        "k": len(sd.get("per_position") or []),
        "counter": {"accepted": int(sd["accepted_tokens"]), "drafts": int(sd["drafts"])},
        "machine": f"{host.get('cpu_model', '?')} ({host.get('cpu_kind', '?')})",
        "requests": requests,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench.reconcile_corpus", description=__doc__.split("\n\n")[0])
    p.add_argument("--source", choices=("emulator", "vllm-cpu"), required=True)
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "datasets"))
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = _sweep(a.source, Path(tmp), a.data_dir)
        manifest = json.loads((out / "manifest.json").read_text())
        host = manifest.get("host") or {}
        streams = {f"{a.source}/{v}": _stream(out / "cells" / v / "code-edit" / "c2", host) for v in VARIANTS}
    for s in streams.values():
        s["vllm"] = manifest.get("versions", {}).get("vllm") if a.source == "vllm-cpu" else None
    corpus = json.loads(OUT.read_text()) if OUT.is_file() else {}
    corpus.update(streams)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(dict(sorted(corpus.items())), indent=1) + "\n")
    for name, s in streams.items():
        merged = sum(1 for r in s["requests"] for n in r["chunks"][1:] if n > 1)
        print(f"{name}: {len(s['requests'])} requests, {merged} chunks of several tokens, counter {s['counter']}")


if __name__ == "__main__":
    main()
