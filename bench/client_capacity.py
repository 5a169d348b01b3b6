"""Client capacity side by side: how fast each client reads, and how right its timings stay.

A canned-chunk server (servers.canned: pre-rendered one-token events, a set number per socket
write, paced or as fast as the client reads) runs on CPU 0 and the client under test on CPU 1
(taskset). Every run gets a fresh server whose trace (when each request arrived, when each
write went out) is the truth. Clients: `loadgen run` on its compiled read path ("loadgen") and
on its pure-Python one ("loadgen-python", LOADGEN_CLIENT_PATH=python), and, with --vllm-venv,
vLLM's own `vllm bench serve` (Python) and its Rust client (VLLM_USE_RUST_BENCH=1; the binary
`vllm/vllm-rs` of the venv's vLLM, or --vllm-rust PATH: vLLM 0.33's wheel carries it, the CPU
build does not), on the same server in the same session. Each step runs --repeat times; the
table shows medians. The verdict lines hold loadgen to issue 46's bar: 0.6x the Rust client's
chunks/s where it ran, else 3.5x the Python client's.

1. unpaced: 16 events per write, as fast as the client reads; 16/64/256 concurrent streams.
   Chunk rate = events the server wrote / (last write - first request), from its trace.
2. paced: 256 streams, one event every 10 ms and every 4 ms, first event after 20 ms.
   ITL p50/p99 as each client reports them against the truth's (the server's write gaps);
   TTFT error = the client's mean TTFT - the server's mean (first write - request arrival).
3. calibrate (loadgen only): paced loads from easy to overloaded. loadgen's own per-token ITL
   error against the server's writes (each request matched to its trace), p99, beside its
   self-check. On the compiled path each read bounds how far off a chunk's gap can be: the
   error must stay within the bound's p99, and client_bound follows the bound. On the
   pure-Python path (LOADGEN_CLIENT_PATH=python) client_bound must be set exactly where that
   error exceeds 2 ms.
4. sustain (loadgen only; the --workers axis): open-loop constant arrivals of 256-event
   responses (64 events per write, unpaced), the rate stepped up by 1.25x from 400 req/s until
   a run fails; the sustained rate is the highest that kept send lateness p99 under 5 ms, every
   request sent at its rate and none failed. Once per --workers count (default 1,2): one
   worker on CPU 1; more workers on every CPU, sharing CPU 0 with the server (each CPU's busy
   share over the run is shown).

    python -m bench.client_capacity                              # loadgen only, ~6 minutes
    python -m bench.client_capacity --vllm-venv /path/to/venv    # with vLLM's two clients
    python -m bench.client_capacity --vllm-venv VENV --vllm-rust DIR/vllm/vllm-rs --only unpaced,paced
    python -m bench.client_capacity --quick                      # one run per step
    python -m bench.client_capacity --only paced --csv out.csv
    python -m bench.client_capacity --only sustain --workers 1,2

The vLLM clients need a tokenizer; the harness builds a small word-level one in a temporary
directory with the venv's own `transformers` (nothing is downloaded). Figures recorded for
this machine: docs/performance.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench import run_args  # noqa: E402
from loadgen.client import compiled  # noqa: E402
from loadgen.load.execute import CLIENT_PATH_ENV  # noqa: E402
from servers.embedded import canned_server  # noqa: E402
from servers.scripted.script import prompt_key  # noqa: E402
from workloads import random_lengths  # noqa: E402

INPUT_LEN, SEED, ERROR_LIMIT_MS, LATENESS_LIMIT_MS = 16, 1, 2.0, 5.0
_TOKENIZER = """
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(4000)]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer, tok.decoder = pre_tokenizers.WhitespaceSplit(), decoders.WordPiece()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                        eos_token="</s>").save_pretrained(sys.argv[1])
"""


def _cpus() -> tuple[int | None, list[str]]:
    """Server on CPU 0, client on CPU 1 when the machine has two and taskset exists."""
    if (os.cpu_count() or 1) >= 2 and subprocess.run(["which", "taskset"], capture_output=True).returncode == 0:
        return 0, ["taskset", "-c", "1"]
    return None, []


class Harness:
    def __init__(self, tmp: Path, vllm_venv: str | None, vllm_rust: str | None = None) -> None:
        self.tmp, self.runs = tmp, itertools.count()
        self.rust = Path(vllm_rust).resolve() if vllm_rust else None
        self.server_cpu, self.pin = _cpus()
        self.vllm = Path(vllm_venv) if vllm_venv else None
        if self.vllm:
            subprocess.run(
                [str(self.vllm / "bin" / "python"), "-c", _TOKENIZER, str(tmp / "tok")], check=True, capture_output=True
            )

    def clients(self) -> list[str]:
        """loadgen on its compiled path (where built) and on its pure-Python path; vLLM's Python
        client with --vllm-venv, and its Rust client where that venv has the binary."""
        ours = ["loadgen", "loadgen-python"] if compiled.available() else ["loadgen"]
        if not self.vllm:
            return ours
        return ours + ["vllm-python"] + (["vllm-rust"] if self.rust_binary() else [])

    def rust_binary(self) -> Path | None:
        """vLLM's Rust client (`vllm-rs`, VLLM_USE_RUST_BENCH=1): --vllm-rust, else where vLLM
        looks for it (VLLM_RUST_FRONTEND_PATH, or `vllm/vllm-rs` in the venv's vLLM)."""
        if self.rust:
            return self.rust
        if os.environ.get("VLLM_RUST_FRONTEND_PATH", "auto") != "auto":
            return Path(os.environ["VLLM_RUST_FRONTEND_PATH"])
        found = sorted(Path(str(self.vllm)).glob("lib/python3*/site-packages/vllm/vllm-rs"))
        return found[0] if found else None

    def run(
        self, client: str, *, conc: int, n: int, out_len: int, pacing_ms: float, per_write: int, ttft_ms: float
    ) -> dict:
        """One run of `client` against a fresh server; its figures against the server's trace."""
        i = next(self.runs)
        trace, out = self.tmp / f"trace-{i}.jsonl", self.tmp / f"run-{i}"
        with canned_server(
            "--pacing-ms",
            f"{pacing_ms:g}",
            "--events-per-write",
            str(per_write),
            "--ttft-ms",
            f"{ttft_ms:g}",
            "--trace",
            str(trace),
            cpu=self.server_cpu,
        ) as srv:
            if client.startswith("loadgen"):
                got = self._loadgen(srv.url, out, conc, n, out_len, python=client == "loadgen-python")
            else:
                got = self._vllm(srv.url, out, conc, n, out_len, rust=client == "vllm-rust")
        resp = sorted(map(json.loads, trace.read_text().splitlines()), key=lambda r: r["t_recv_ns"])[-n:]
        return {**_truth(resp, got), **got.get("extra", {})}

    def _loadgen(self, url: str, out: Path, conc: int, n: int, out_len: int, python: bool = False) -> dict:
        cmd = [
            *self.pin,
            sys.executable,
            "-m",
            "loadgen",
            *run_args(
                url,
                input_len=INPUT_LEN,
                output_len=out_len,
                seed=SEED,
                warmup=0,
                concurrency=conc,
                num_requests=n,
                output=out,
            ),
        ]
        env = {**os.environ, CLIENT_PATH_ENV: "python" if python else "compiled"}
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if res.returncode not in (0, 1):
            raise SystemExit(f"loadgen failed: {res.stderr.strip()}")
        s = json.loads((out / "summary.json").read_text())
        f = pd.read_parquet(out / "requests.parquet")
        ok = f[f["ok"]]
        itls = [np.diff(np.asarray(t, dtype=np.int64)) / 1e9 for t in ok["chunk_t_ns"]]
        return {
            "ttft_s": list(ok["ttft_ms"] / 1e3),
            "itl_s": itls,
            "frame": (ok, out_len),
            "failed": len(f) - len(ok),
            "flagged": "yes" if s["client_bound"] else "no",
            "extra": {
                "lateness_p99_ms": s["self_check"]["lateness_ms"]["p99"],
                "loop_lag_p99_ms": s["self_check"]["loop_lag_ms"]["p99"],
                "chunk_lag_p99_ms": s["self_check"]["chunk_lag_ms"]["p99"],
                "read_delay_p99_ms": s["self_check"]["read_delay_ms"]["p99"],
                "chunk_bound_p99_ms": (s["self_check"].get("chunk_bound_ms") or {}).get("p99", float("nan")),
            },
        }

    def sustain(self, workers: int) -> list[dict]:
        """One ladder of open-loop rates for `workers` processes: up by 1.25x to the first
        failing run, then three bisections between the last pass and the first failure."""
        pin = self.pin if workers == 1 or not self.pin else ["taskset", "-c", f"0-{(os.cpu_count() or 1) - 1}"]
        rows: list[dict] = []
        rate, passed, failed, bisections = 400.0, 0.0, None, 3
        with canned_server(
            "--pacing-ms", "0", "--events-per-write", "64", "--ttft-ms", "0", cpu=self.server_cpu
        ) as srv:
            while bisections and len(rows) < 20:
                rows.append(self._sustain_run(srv.url, pin, workers, rate))
                if rows[-1]["sustained"]:
                    passed = rate
                else:
                    failed = rate
                if failed is not None:
                    if not passed:
                        break
                    bisections -= 1
                rate = round(rate * 1.25) if failed is None else round((passed * failed) ** 0.5)
        return rows

    def _sustain_run(self, url: str, pin: list[str], workers: int, rate: float) -> dict:
        out = self.tmp / f"run-{next(self.runs)}"
        cmd = [
            *pin,
            sys.executable,
            "-m",
            "loadgen",
            *run_args(
                url,
                input_len=INPUT_LEN,
                output_len=256,
                rate=f"{rate:g}",
                arrival="constant",
                num_requests=int(rate * 4),
                workers=workers,
                output=out,
            ),
        ]
        busy = _cpu_busy()
        res = subprocess.run(cmd, capture_output=True, text=True)
        busy = _cpu_busy(busy)
        if res.returncode not in (0, 1):
            raise SystemExit(f"loadgen failed: {res.stderr.strip()}")
        s = json.loads((out / "summary.json").read_text())
        late = s["self_check"]["lateness_ms"]["p99"]
        ok = late < LATENESS_LIMIT_MS and s["failed"] == 0 and s["sending"]["send_rate_req_s"] >= 0.98 * rate
        return {
            "workers": workers,
            "rate_req_s": rate,
            "chunks_per_s": s["output_throughput_tok_s"],
            "lateness_p99_ms": late,
            "chunk_lag_p99_ms": s["self_check"]["chunk_lag_ms"]["p99"],
            "sustained": ok,
            **{f"cpu{i}_busy": b for i, b in enumerate(busy)},
        }

    def _vllm(self, url: str, out: Path, conc: int, n: int, out_len: int, rust: bool) -> dict:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_USE_RUST_BENCH": "1" if rust else "0"}
        if rust:
            env["VLLM_RUST_FRONTEND_PATH"] = str(self.rust_binary())
        cmd = [
            *self.pin,
            str(Path(str(self.vllm)) / "bin" / "vllm"),
            "bench",
            "serve",
            "--backend",
            "vllm",
            "--base-url",
            url,
            "--model",
            "canned",
            "--tokenizer",
            str(self.tmp / "tok"),
            "--dataset-name",
            "random",
            "--random-input-len",
            str(INPUT_LEN),
            "--random-output-len",
            str(out_len),
            "--num-prompts",
            str(n),
            "--max-concurrency",
            str(conc),
            "--ignore-eos",
            "--disable-tqdm",
            "--save-result",
            "--save-detailed",
            "--result-dir",
            str(out),
            "--result-filename",
            "result.json",
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if res.returncode != 0:
            raise SystemExit(f"vllm bench serve failed: {res.stderr.strip()[-500:]}")
        r = json.loads((out / "result.json").read_text())
        ok = [i for i, e in enumerate(r["errors"]) if not e]
        return {
            "ttft_s": [r["ttfts"][i] for i in ok],
            "itl_s": [np.asarray(r["itls"][i]) for i in ok],
            "failed": len(r["errors"]) - len(ok),
            "flagged": "no check",
        }


def _cpu_busy(before: list[tuple[int, int]] | None = None):
    """Per-CPU (busy, total) jiffies from /proc/stat; given `before`, each CPU's busy share since."""
    now = []
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                v = [int(x) for x in line.split()[1:]]
                now.append((sum(v) - v[3] - v[4], sum(v)))
    if before is None:
        return now
    return [round((b - b0) / max(1, t - t0), 2) for (b, t), (b0, t0) in zip(now, before)]


def _truth(resp: list[dict], got: dict) -> dict:
    """The client's figures beside the server's: chunk rate, ITL percentiles, TTFT mean."""
    events = sum(sum(r["events"]) for r in resp)
    span = (max(r["write_ns"][-1] for r in resp) - min(r["t_recv_ns"] for r in resp)) / 1e9
    true_itl = np.concatenate([np.diff(r["write_ns"]) / 1e9 for r in resp if len(r["write_ns"]) > 1])
    true_ttft = np.array([(r["write_ns"][0] - r["t_recv_ns"]) / 1e9 for r in resp])
    itl = np.concatenate(got["itl_s"]) if got["itl_s"] else np.array([np.nan])
    row = {
        "chunks_per_s": events / span,
        "failed": got["failed"],
        "itl_p50_ms": np.percentile(itl, 50) * 1e3,
        "itl_p99_ms": np.percentile(itl, 99) * 1e3,
        "true_itl_p50_ms": np.percentile(true_itl, 50) * 1e3,
        "true_itl_p99_ms": np.percentile(true_itl, 99) * 1e3,
        "ttft_err_mean_ms": (np.mean(got["ttft_s"]) - true_ttft.mean()) * 1e3,
        "flagged": got["flagged"],
    }
    row["itl_p99_err_ms"] = abs(row["itl_p99_ms"] - row["true_itl_p99_ms"])
    if "frame" in got:
        ok, out_len = got["frame"]
        row["itl_err_matched_p99_ms"] = _matched_itl_error(ok, out_len, resp)
    return row


def _matched_itl_error(ok: pd.DataFrame, out_len: int, resp: list[dict]) -> float:
    """loadgen only: p99 over tokens of |measured - true| ITL, each request paired with the
    server's record of the same request (by prompt)."""
    gen = random_lengths(None, input_len=INPUT_LEN, output_len=out_len, seed=SEED)
    prompts = [r.prompt for r in itertools.islice(gen, int(ok["index"].max()) + 1)]
    written = {r["key"]: r for r in resp}
    err = []
    for row in ok.itertuples():
        w = written.get(prompt_key(prompts[row.index]))
        if w is None or sum(w["events"]) != len(row.chunk_t_ns) or max(w["events"]) != 1:
            continue
        err.append(np.diff(np.asarray(row.chunk_t_ns, dtype=np.int64)) - np.diff(w["write_ns"]))
    return float(np.percentile(np.abs(np.concatenate(err)), 99) / 1e6) if err else float("nan")


def _median(runs: list[dict]) -> dict:
    out: dict[str, Any] = {k: float(np.median([r[k] for r in runs])) for k in runs[0] if k != "flagged"}
    flags = [r["flagged"] for r in runs]
    out["flagged"] = flags[0] if flags[0] == "no check" else f"{flags.count('yes')}/{len(flags)}"
    return out


def steps(only: set[str], quick: bool) -> list[dict]:
    unpaced = [
        dict(mode="unpaced", conc=c, n=2000, out_len=256, pacing_ms=0, per_write=16, ttft_ms=0)
        for c in ((64,) if quick else (16, 64, 256))
    ]
    paced = [dict(mode="paced", conc=256, n=768, out_len=128, pacing_ms=p, per_write=1, ttft_ms=20) for p in (10, 4)]
    calib = [
        dict(mode="calibrate", conc=c, n=3 * c, out_len=128, pacing_ms=p, per_write=1, ttft_ms=20)
        for c, p in (
            (64, 10),
            (128, 10),
            (256, 20),
            (256, 10),
            (384, 10),
            (256, 6),
            (512, 10),
            (256, 5),
            (640, 10),
            (256, 4),
            (384, 5),
            (256, 3),
        )
    ]
    if quick:
        calib = calib[3:4] + calib[-3:-2]
    return [s for s in unpaced + paced + calib if s["mode"] in only]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm-venv", help="a virtual environment with vLLM installed: run its clients too")
    ap.add_argument(
        "--vllm-rust",
        help="vLLM's Rust client binary (vllm/vllm-rs of a vLLM wheel that has it) when --vllm-venv's vLLM lacks it",
    )
    ap.add_argument("--only", default="unpaced,paced,calibrate,sustain", help="comma list of steps to run")
    ap.add_argument("--workers", default="1,2", help="worker counts for the sustain step (loadgen --workers)")
    ap.add_argument("--quick", action="store_true", help="fewer steps, one run each")
    ap.add_argument("--repeat", type=int, default=None, help="runs per step (default 3; 1 with --quick)")
    ap.add_argument("--csv", help="also write the table to this CSV file")
    args = ap.parse_args()
    repeat = args.repeat or (1 if args.quick else 3)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        h = Harness(Path(d), args.vllm_venv, args.vllm_rust)
        for step in steps(set(args.only.split(",")), args.quick):
            mode = step.pop("mode")
            for client in ["loadgen"] if mode == "calibrate" else h.clients():
                runs = [h.run(client, **step) for _ in range(repeat)]
                # calibration judges every run on its own; the side-by-side steps show medians
                for med in runs if mode == "calibrate" else [_median(runs)]:
                    rows.append(
                        {
                            "mode": mode,
                            "client": client,
                            "pacing_ms": step["pacing_ms"] or "none",
                            "events_per_write": step["per_write"],
                            "concurrency": step["conc"],
                            **med,
                        }
                    )
                print(
                    f"  {mode} {client} c={step['conc']} pacing={step['pacing_ms']}: "
                    f"{np.median([r['chunks_per_s'] for r in runs]):,.0f} chunks/s",
                    file=sys.stderr,
                    flush=True,
                )
        ladders = (
            [h.sustain(w) for w in map(int, args.workers.split(",")) for _ in range(repeat)]
            if "sustain" in args.only.split(",")
            else []
        )
        server_cpu = h.server_cpu
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 250)
    if len(table):
        print(table.round(2).to_string(index=False))
        _verdicts(table)
    if ladders:
        _sustained(ladders)
    if server_cpu is None:
        print("note: fewer than 2 CPUs or no taskset: server and client shared cores")
    if args.csv:
        table.to_csv(args.csv, index=False)


def _verdicts(table: pd.DataFrame) -> None:
    un = table[table["mode"] == "unpaced"].pivot_table(index="concurrency", columns="client", values="chunks_per_s")
    for c, r in un.iterrows():
        line = f"unpaced c={c}: loadgen {r['loadgen']:,.0f} chunks/s"
        if "loadgen-python" in un:
            line += f" = {r['loadgen'] / r['loadgen-python']:.2f}x its pure-Python path ({r['loadgen-python']:,.0f})"
        if "vllm-python" in un:
            line += f"; {r['loadgen'] / r['vllm-python']:.2f}x vLLM's Python client ({r['vllm-python']:,.0f})"
        if "vllm-rust" in un:
            line += f"; {r['loadgen'] / r['vllm-rust']:.2f}x vLLM's Rust client ({r['vllm-rust']:,.0f})"
        # the bar (issue 46): 0.6x the Rust client where it is installed, else 3.5x the Python one
        if "vllm-rust" in un:
            line += f" -> {'met' if r['loadgen'] >= 0.6 * r['vllm-rust'] else 'NOT met'} (>= 0.6x Rust)"
        elif "vllm-python" in un:
            line += (
                f" -> {'met' if r['loadgen'] >= 3.5 * r['vllm-python'] else 'NOT met'} (>= 3.5x Python; no Rust binary)"
            )
        print(line)
    paced = table[(table["mode"] == "paced") & (table["client"] == "loadgen")]
    for _, r in paced.iterrows():
        print(
            f"paced 256 x {r['pacing_ms']} ms: loadgen ITL p99 error {r['itl_p99_err_ms']:.2f} ms, "
            f"client_bound {r['flagged']}"
        )
    cal = table[table["mode"] == "calibrate"]
    if len(cal) and cal["chunk_bound_p99_ms"].notna().all():
        # the compiled path: each chunk's read bounds how far off its gap can be; the bound must
        # hold (the true error within it), and the flag follows it over the timing threshold
        held = cal["itl_err_matched_p99_ms"] <= cal["chunk_bound_p99_ms"] + 0.1
        print(
            f"compiled path: the chunk-gap bound held in {int(held.sum())} of {len(cal)} runs "
            f"(matched ITL error p99 <= the bound's p99 + 0.1 ms); flagged in {int((cal['flagged'] == 'yes').sum())}"
        )
        for _, r in cal[~held].iterrows():
            print(
                f"  bound broken: {r['concurrency']} streams x {r['pacing_ms']} ms: error "
                f"{r['itl_err_matched_p99_ms']:.2f} ms > bound {r['chunk_bound_p99_ms']:.2f} ms"
            )
    elif len(cal):
        over = cal["itl_err_matched_p99_ms"] > ERROR_LIMIT_MS
        fired = cal["flagged"] == "yes"
        print(
            f"client_bound calibration: {int((over == fired).sum())} of {len(cal)} runs agree "
            f"(flagged exactly where loadgen's matched ITL error p99 > {ERROR_LIMIT_MS:g} ms); "
            f"missed {int((over & ~fired).sum())}, false alarms {int((fired & ~over).sum())}"
        )
        for _, r in cal[over != fired].iterrows():
            print(
                f"  disagrees: {r['concurrency']} streams x {r['pacing_ms']} ms: error "
                f"{r['itl_err_matched_p99_ms']:.2f} ms, chunk lag p99 {r['chunk_lag_p99_ms']:.2f} ms, "
                f"flagged {r['flagged']}"
            )


def _sustained(ladders: list[list[dict]]) -> None:
    """Every ladder's runs, then the sustained chunk rate per worker count (median of ladders)."""
    runs = pd.DataFrame([r for ladder in ladders for r in ladder])
    print(runs.round(2).to_string(index=False))
    best: dict[int, list[float]] = {}
    for ladder in ladders:
        ok = [r["chunks_per_s"] for r in ladder if r["sustained"]]
        best.setdefault(ladder[0]["workers"], []).append(max(ok) if ok else 0.0)
    one = float(np.median(best.get(1, [np.nan])))
    for workers, rates in sorted(best.items()):
        med = float(np.median(rates))
        print(
            f"sustained with {workers} worker(s): {med:,.0f} chunks/s (median of "
            f"{', '.join(f'{r:,.0f}' for r in rates)})" + (f" = {med / one:.2f}x one worker" if workers > 1 else "")
        )


if __name__ == "__main__":
    main()
