"""Soak: a long `loadgen run` at many streams, its memory sampled, every request counted.

`loadgen run --concurrency STREAMS --duration MINUTES` against the canned server (paced:
first event after 5 ms, one token event every --pacing-ms, --output-len tokens a response) or,
with --server emulator, the emulator (Llama-3.1-8B, EAGLE k=3; --time-scale to keep its
pace). Every --sample-s seconds the client's and the server's resident memory (VmRSS, the
client with its child processes) is read from /proc. Afterwards: every request is in the
results once (indices 0..n-1, none twice; a number may be missing only where a closed-loop
user had prepared its next request when the deadline came: at most one per stream), how many
failed, and the journal's size. Prints a table (memory per sample) and a verdict line: the client's RSS at the end
against minute 5 (or the first sample after a tenth of the run, for short soaks).

    python3 -m bench.soak --minutes 60 --streams 256              # the recorded figures
    python3 -m bench.soak --minutes 3 --streams 256 --json out.json
    python3 -m bench.soak --minutes 10 --server emulator --time-scale 4
    python3 -m bench.soak --minutes 0.25 --versus 1 --pacing-ms 8  # peak RSS flat with the length

Every soak also prints the client's peak RSS start to finish (its load and its end of run:
requests.parquet and summary.json from the journal); `--versus MINUTES` runs a second soak of
that length and checks the longer one's peak within 1.15x of the shorter's.

The end of a run, in bounded memory: `--synthetic hour|day|N` writes a journal of N finished
128-chunk requests (hour: the recorded hour's 361,805; day: 8.7 million, a day at 100 a second)
with a generator, in the journal's own format, and runs the end-of-run path on it in a child
process (`loadgen summarize`: requests.parquet in row groups, then summary.json streaming):
its peak RSS and time, the journal's bytes per request. `--compare` also summarizes the
requests.parquet written with every value held in memory (loadgen.measures.pooled.HOLD
unbounded: numpy's figures over whole arrays, as before) and checks that every figure agrees.

    python3 -m bench.soak --synthetic hour --compare --forms   # --forms: the journal in other forms
    python3 -m bench.soak --synthetic day

Figures recorded for this machine: docs/performance.md ("Long runs").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from servers.embedded import canned_server, emulator_server  # noqa: E402

PEAK_BOUND = 1.15  # a run 4x as long: its peak RSS at most this much higher (issue 46)

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE = '{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'


def rss_kib(pid: int, children: bool = False) -> int:
    """Resident memory of `pid` (and, with `children`, of every descendant), KiB; 0 if gone."""
    pids = [pid]
    if children:
        parents: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                parents.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(int(entry.name))
        todo = [pid]
        while todo:
            for c in parents.get(todo.pop(), []):
                pids.append(c)
                todo.append(c)
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


SYNTHETIC = {"hour": 361_805, "day": 8_700_000}
CHUNKS = 128


def synthetic_journal(directory: Path, requests: int, chunks: int = CHUNKS, rate: float = 100.5, seed: int = 0) -> int:
    """A journal of `requests` finished requests of `chunks` chunks each, as a run at `rate`
    requests a second against an SD server would leave it (one process): written batch by batch
    by a generator (vectorized, not a day of waiting), in the journal's own format
    (loadgen.outputs.journal). Returns its size in bytes."""
    import json

    import numpy as np
    import pyarrow as pa

    from loadgen.client.columnar import SCHEMA
    from loadgen.outputs import journal

    rng = np.random.default_rng(seed)
    t0 = 10**12
    header = {"t0_ns": t0, "t0_unix": 1.7e9, "worker": 0, "workers": 1, "time_scale": 1.0}
    path = journal.path_for(directory, 0)
    sink = pa.OSFile(str(path), "wb")
    writer = pa.ipc.new_stream(sink, SCHEMA.with_metadata({"start": json.dumps(header)}), options=journal._WRITE)
    per_batch = 25  # a quarter second's requests at 100 a second, as the journal flushes them
    big = 4096  # generated together, written in journal-sized batches
    done = 0
    while done < requests:
        b = min(big, requests - done)
        batch = _requests(rng, done, b, chunks, rate, t0)
        for i in range(0, b, per_batch):
            writer.write_batch(batch.slice(i, per_batch))
        done += b
    writer.close()
    sink.close()
    _lag(directory, rng, requests, rate, t0)
    (directory / "end-0.json").write_text('{"interrupted": false}')
    return path.stat().st_size


def _requests(rng, done: int, b: int, chunks: int, rate: float, t0: int):
    """Requests done..done+b as one record batch of the journal's schema."""
    import numpy as np
    import pyarrow as pa

    from loadgen.client.columnar import SCHEMA

    index = np.arange(done, done + b)
    sched = t0 + (index * (1e9 / rate)).astype(np.int64)
    send = sched + rng.integers(20_000, 200_000, b)
    ttft = rng.lognormal(np.log(40e6), 0.3, b).astype(np.int64)
    gaps = rng.lognormal(np.log(12e6), 0.25, (b, chunks - 1)).astype(np.int64)
    tokens = rng.choice([1, 2, 3, 4], p=[0.35, 0.3, 0.2, 0.15], size=(b, chunks))
    dt = np.concatenate([(send + ttft)[:, None], gaps], axis=1)  # the first absolute, then gaps
    t_end = (send + ttft + gaps.sum(axis=1)) + 50_000
    offsets = pa.array(np.arange(0, (b + 1) * chunks, chunks, dtype=np.int32))
    lists = {
        "chunk_t_ns": pa.ListArray.from_arrays(offsets, pa.array(dt.ravel())),
        "chunk_usage": pa.ListArray.from_arrays(offsets, pa.array(tokens.ravel().astype(np.int64))),
        "chunk_chars": pa.ListArray.from_arrays(offsets, pa.array((tokens * 4).ravel().astype(np.int64))),
    }
    total = tokens.sum(axis=1)
    cols = {
        "index": index,
        "request_id": [f"synthetic-{i}" for i in index],
        "warmup": np.zeros(b, bool),
        "t_scheduled_ns": sched,
        "workload": np.full(b, "random"),
        "category": np.full(b, ""),
        "max_tokens": np.full(b, 512),
        "queue_delay_ns": np.zeros(b, np.int64),
        "worker": np.zeros(b, np.int64),
        "session": np.full(b, ""),
        "turn": np.zeros(b, np.int64),
        "t_session_send_ns": np.zeros(b, np.int64),
        "t_call_ns": send - 10_000,
        "t_send_ns": send,
        "t_headers_ns": send + ttft // 2,
        "t_end_ns": t_end,
        "read_delay_ns": rng.integers(0, 300_000, b),
        "status": np.full(b, 200),
        "error_type": pa.nulls(b, pa.string()),
        "error_message": pa.nulls(b, pa.string()),
        "finish_reason": np.full(b, "length"),
        "prompt_tokens": rng.integers(100, 2000, b),
        "usage_completion_tokens": total,
        "reasoning_tokens": pa.nulls(b, pa.int64()),
        "done": np.ones(b, bool),
        "server_draft_tokens": pa.nulls(b, pa.int64()),
        "server_accepted_tokens": pa.nulls(b, pa.int64()),
        "server_spec_steps": pa.nulls(b, pa.int64()),
        **lists,
        "chunk_text": pa.nulls(b, pa.list_(pa.string())),
        "chunk_phase": pa.nulls(b, pa.list_(pa.int8())),  # no reasoning phases
        "chunk_reasoning": pa.nulls(b, pa.list_(pa.int64())),
        "prompt_token_ids": pa.nulls(b, pa.list_(pa.int64())),
        "token_ids": pa.nulls(b, pa.list_(pa.int64())),
    }
    batch = pa.RecordBatch.from_arrays(
        [pa.array(cols[f.name], f.type) if not isinstance(cols[f.name], pa.Array) else cols[f.name] for f in SCHEMA],
        schema=SCHEMA,
    )
    return batch


def _lag(directory: Path, rng, requests: int, rate: float, t0: int) -> None:
    """The loop's lag ticks of the run, 100 a second."""
    import numpy as np
    import pyarrow as pa

    from loadgen.outputs import journal

    lag_rows = int((requests / rate) * 100)  # the loop's lag ticks, 100 a second
    lag = pa.OSFile(str(directory / "lag-0.arrows"), "wb")
    w = pa.ipc.new_stream(lag, journal._LAG, options=journal._WRITE)
    for start in range(0, lag_rows, 1_000_000):
        n = min(1_000_000, lag_rows - start)
        at = t0 + (np.arange(start, start + n) * 10_000_000) + rng.integers(0, 1_000_000, n)
        w.write_batch(
            pa.RecordBatch.from_arrays([pa.array(at), pa.array(rng.integers(0, 2_000_000, n))], schema=journal._LAG)
        )
    w.close()
    lag.close()


CONFIG = {
    "config": {"command": "run", "load": {"mode": "closed", "concurrency": 256}, "time_scale": 1.0},
    "summarize": {},
}
_END_OF_RUN = """
import json, resource, sys, time
from pathlib import Path
from loadgen.results import store
from loadgen.results.recover import summarize_dir
t = time.monotonic()
_, summary = summarize_dir(sys.argv[1])
store.write_summary(Path(sys.argv[1]), summary)
print(json.dumps({"s": time.monotonic() - t, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
_IN_MEMORY = """
import json, resource, sys
import pandas as pd
from loadgen.measures import pooled
from loadgen.measures.summary import summarize
from loadgen.results import store
pooled.HOLD = 1 << 62  # every value held: numpy over whole arrays
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
frame = pd.read_parquet(d + "/requests.parquet")
lag = pd.read_parquet(d + "/lag.parquet")
out = summarize(frame, (lag["at_ns"].tolist(), lag["lag_ns"].tolist()), config=s["config"])
json.dump(out, open(d + "/summary-in-memory.json", "w"))
print(json.dumps({"peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _agree(a, b, path: str = "") -> list[str]:
    """Where two summaries differ: exactly, but for mean and std (summation order: relative 1e-12)."""
    import math

    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in set(a) | set(b) for d in _agree(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, float) and isinstance(b, float):
        if a == b or (math.isnan(a) and math.isnan(b)):
            return []
        if path.endswith((".mean", ".std")) and abs(a - b) <= 1e-12 * max(abs(a), abs(b)):
            return []
        return [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def end_of_run(args) -> dict:
    n = SYNTHETIC.get(args.synthetic) or int(args.synthetic)
    with tempfile.TemporaryDirectory(prefix="soak-synthetic-", dir=args.output) as tmp:
        d = Path(args.keep) if args.keep else Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        t = time.monotonic()
        kept = (d / "end-0.json").is_file() and (d / "generated").read_text().strip() == str(n)
        if kept:  # the same journal, made before: only the end of the run again
            for name in ("requests.parquet", "summary.json"):
                (d / name).unlink(missing_ok=True)
            size = (d / "records-0.arrows").stat().st_size
        else:
            size = synthetic_journal(d, n)
            (d / "generated").write_text(str(n))
        made_s = time.monotonic() - t
        (d / "config.json").write_text(json.dumps(CONFIG))
        t = time.monotonic()
        res = subprocess.run([sys.executable, "-c", _END_OF_RUN, str(d)], cwd=REPO, capture_output=True, text=True)
        wall = time.monotonic() - t
        if res.returncode != 0:
            raise SystemExit(f"the end of the run failed: {res.stderr[-3000:]}")
        got = json.loads(res.stdout.strip().splitlines()[-1])
        out = {
            "requests": n,
            "chunks": CHUNKS,
            "journal_bytes": size,
            "bytes_per_request": size / n,
            "generated_s": made_s,
            "end_of_run_s": wall,
            "peak_rss_mib": got["peak_mib"],
            "requests_parquet_bytes": (d / "requests.parquet").stat().st_size,
        }
        if args.forms:
            out["forms"] = journal_forms(d)
        if args.compare:
            import pyarrow as pa
            import pyarrow.parquet as pq

            from loadgen.outputs import journal

            lag = journal.meta(d)
            pq.write_table(pa.table({"at_ns": lag.lag_at_ns, "lag_ns": lag.lag_ns}), d / "lag.parquet")
            res = subprocess.run([sys.executable, "-c", _IN_MEMORY, str(d)], cwd=REPO, capture_output=True, text=True)
            if res.returncode != 0:
                raise SystemExit(f"the in-memory summary failed: {res.stderr[-3000:]}")
            streamed = json.loads((d / "summary.json").read_text())
            held = json.loads((d / "summary-in-memory.json").read_text())
            streamed.pop("journal", None)
            out["in_memory_peak_rss_mib"] = json.loads(res.stdout.strip().splitlines()[-1])["peak_mib"]
            out["differences"] = _agree(streamed, json.loads(json.dumps(held, default=str)))
        return out


def journal_forms(d: Path, sample: int = 100_000) -> list[dict]:
    """The journal's first `sample` requests re-written in each form it could take: bytes a
    request, and seconds to read them back (pyarrow); JSON lines as loadgen wrote them before
    (a line a record, arrays as lists; its size from the first 10,000, not read back)."""
    from dataclasses import asdict

    import pyarrow as pa

    from loadgen.client.columnar import decoded, records_of

    reader = pa.ipc.open_stream(pa.OSFile(str(d / "records-0.arrows")))
    batches, rows = [], 0
    for batch in reader:
        batches.append(batch)
        rows += batch.num_rows
        if rows >= sample:
            break
    out = []
    head = records_of(decoded(pa.Table.from_batches(batches).slice(0, 10_000).combine_chunks().to_batches()[0]))
    as_json = sum(
        len(json.dumps({"r": {k: (list(v) if hasattr(v, "tolist") else v) for k, v in asdict(r).items()}})) + 1
        for r in head
    )
    out.append({"form": "JSON lines (before)", "bytes": as_json / len(head), "read_s": None})
    for codec, name in (
        (None, "Arrow IPC, uncompressed"),
        ("lz4", "Arrow IPC, LZ4"),
        ("zstd", "Arrow IPC, zstd (the journal)"),
    ):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batches[0].schema, options=pa.ipc.IpcWriteOptions(compression=codec)) as w:
            for b in batches:
                w.write_batch(b)
        buf = sink.getvalue()
        t = time.perf_counter()
        n = sum(b.num_rows for b in pa.ipc.open_stream(buf))
        out.append({"form": name, "bytes": buf.size / n, "read_s": time.perf_counter() - t})
    return out


def show_end_of_run(args, res: dict) -> None:
    print(f"end of run, synthetic journal ({args.synthetic}): {res['requests']:,} requests x {res['chunks']} chunks")
    print("| journal | per request | end-of-run time | peak RSS | requests.parquet |")
    print("|---|---|---|---|---|")
    print(
        f"| {res['journal_bytes'] / 2**20:,.0f} MiB | {res['bytes_per_request']:.0f} B | {res['end_of_run_s']:.0f} s "
        f"| {res['peak_rss_mib']:,.0f} MiB | {res['requests_parquet_bytes'] / 2**20:,.0f} MiB |"
    )
    if "forms" in res:
        print("| journal form (the first 100,000 requests) | bytes a request | reading them |")
        print("|---|---|---|")
        for f in res["forms"]:
            read = "-" if f["read_s"] is None else f"{f['read_s']:.2f} s"
            print(f"| {f['form']} | {f['bytes']:,.0f} | {read} |")
    if "differences" in res:
        diffs = res["differences"]
        print(
            f"every figure against the whole-array computation (peak {res['in_memory_peak_rss_mib']:,.0f} MiB): "
            + ("equal (mean and std within 1e-12)" if not diffs else f"{len(diffs)} differ: {diffs[:5]}")
        )


def _command(args, url: str, out: Path) -> list[str]:
    """The soak's `loadgen run`: the streams for the minutes, short prompts, fixed answers."""
    cmd = [
        sys.executable,
        "-m",
        "loadgen",
        "run",
        "--base-url",
        url,
        "--concurrency",
        str(args.streams),
        "--duration",
        str(args.minutes * 60),
        "--num-requests",
        "100000000",
        "--input-len",
        "16",
        "--output-len",
        str(args.output_len),
        "--quiet",
        "--output",
        str(out),
    ]
    if args.workers > 1:
        cmd += ["--workers", str(args.workers)]
    return cmd


def soak(args, url: str, server_pid: int, out: Path) -> dict:
    cmd = _command(args, url, out)
    t0 = time.monotonic()
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, text=True)
    samples = []
    next_at = t0 + args.sample_s
    peak_kib = 0

    def ended() -> bool:  # reaped here, for its own peak RSS (wait4's rusage: this child's alone)
        nonlocal peak_kib
        if proc.returncode is not None:
            return True
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == 0:
            return False
        proc.returncode = os.waitstatus_to_exitcode(status)
        peak_kib = usage.ru_maxrss
        return True

    while not ended():
        time.sleep(min(1.0, max(0.0, next_at - time.monotonic())))
        if time.monotonic() >= next_at and not ended():
            samples.append(
                {
                    "t_s": round(time.monotonic() - t0, 1),
                    "client_mib": rss_kib(proc.pid, True) / 1024,
                    "server_mib": rss_kib(server_pid) / 1024,
                    "journal_mib": sum(p.stat().st_size for p in out.glob("records-*.arrows")) / 2**20,
                }
            )
            next_at += args.sample_s
    err.seek(0)
    stderr = err.read()
    err.close()
    wall = time.monotonic() - t0
    return _result(args, out, proc.returncode, stderr, peak_kib, wall, samples)


def _result(args, out: Path, code, stderr: str, peak_kib: int, wall: float, samples: list) -> dict:
    """The soak's record: memory, every request counted (none duplicated, at most one a stream
    missing), and the run's own summary."""
    import pandas as pd

    frame = pd.read_parquet(out / "requests.parquet", columns=["index", "ok", "error_type"])
    idx = frame["index"].sort_values().to_numpy()
    summary = json.loads((out / "summary.json").read_text())
    return {
        "exit": code,
        "stderr_tail": stderr[-500:],
        "peak_mib": peak_kib / 1024,  # the client's, start to finish: its load and its end
        "wall_s": wall,
        "samples": samples,
        "requests": int(len(frame)),
        "duplicated": int(len(idx) - len(set(idx.tolist()))),
        # numbers never sent: a closed-loop user prepares its next request while one is in
        # flight, and drops it at the deadline (at most one per stream)
        "missing": int((idx.max() + 1 - len(set(idx.tolist()))) if len(idx) else 0),
        "streams": args.streams,
        "failed": int((~frame["ok"]).sum()),
        "errors": frame["error_type"].value_counts().to_dict(),
        "completed": summary["completed"],
        "client_bound": summary["client_bound"],
        "output_tok_s": summary["output_throughput_tok_s"],
    }


def verdict(res: dict, minutes: float, scale: float = 1.0) -> dict:
    """The client's RSS at the end of the load (the last sample before the duration ends; after
    it, the run computes its results from the journal, which takes memory by the run's size)
    against minute 5 (or a tenth of the run); the peak after the load is reported beside it."""
    s = [x for x in res["samples"] if x["t_s"] <= minutes * 60 * scale]
    if len(s) < 2:
        return {"ok": False, "why": "fewer than two samples"}
    ref_t = min(300.0, minutes * 60 * scale / 10)
    ref = next((x for x in s if x["t_s"] >= ref_t), s[0])
    end = s[-1]
    growth = end["client_mib"] / ref["client_mib"] - 1
    after = [x["client_mib"] for x in res["samples"] if x["t_s"] > minutes * 60 * scale]
    return {
        "reference_t_s": ref["t_s"],
        "reference_mib": ref["client_mib"],
        "end_t_s": end["t_s"],
        "end_mib": end["client_mib"],
        "growth": growth,
        "after_load_peak_mib": max(after) if after else None,
        "ok": abs(growth) <= 0.10
        and res["duplicated"] == 0
        and res["missing"] <= res.get("streams", 0)
        and res["exit"] == 0,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--server", choices=("canned", "emulator"), default="canned")
    p.add_argument("--pacing-ms", type=float, default=20.0, help="canned: one token event every this many ms")
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--time-scale", type=float, default=1.0, help="emulator: run it this many times slower")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--sample-s", type=float, default=10.0)
    p.add_argument("--output", help="results directory to keep [default: a temporary one]")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--show", metavar="JSON", help="print the table and verdict of an earlier run's --json, run nothing")
    p.add_argument("--synthetic", help="the end of a run only, on a generated journal: hour, day or a request count")
    p.add_argument("--compare", action="store_true", help="--synthetic: check every figure against whole arrays")
    p.add_argument("--keep", metavar="DIR", help="--synthetic: make (or reuse) the journal in DIR, and keep it")
    p.add_argument("--forms", action="store_true", help="--synthetic: the journal's size and reading in other forms")
    p.add_argument(
        "--versus",
        type=float,
        metavar="MINUTES",
        help="also a soak this long (a fresh server): the client's peak RSS, start to finish, of both "
        f"(the longer within {PEAK_BOUND}x of the shorter)",
    )
    args = p.parse_args()
    if args.synthetic:
        res = end_of_run(args)
        show_end_of_run(args, res)
        if args.json:
            Path(args.json).write_text(json.dumps({"args": vars(args), **res}, indent=1))
        sys.exit(0 if not res.get("differences") else 1)
    if args.show:
        saved = json.loads(Path(args.show).read_text())
        vars(args).update({k: v for k, v in saved["args"].items() if k not in ("show", "json")})
        res = saved
        v = verdict(res, args.minutes, _scale(args))
        show(args, res, v)
        sys.exit(0 if v["ok"] else 1)
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp, _server(args) as srv:
        out = Path(args.output) if args.output else Path(tmp) / "run"
        res = soak(args, srv.url, srv.pid, out)
    v = verdict(res, args.minutes, _scale(args))
    show(args, res, v)
    if args.versus:
        other = argparse.Namespace(**{**vars(args), "minutes": args.versus, "output": None})
        with tempfile.TemporaryDirectory(prefix="soak-") as tmp, _server(args) as srv:
            res2 = soak(other, srv.url, srv.pid, Path(tmp) / "run")
        (short, a), (long, b) = sorted([(args.minutes, res), (args.versus, res2)], key=lambda x: x[0])
        ratio = b["peak_mib"] / a["peak_mib"] if a["peak_mib"] else float("inf")
        good = ratio <= PEAK_BOUND and b["exit"] == 0 and a["exit"] == 0
        v["ok"] = v["ok"] and good
        print(
            f"peak RSS, start to finish: {short:g} min {a['peak_mib']:.0f} MiB ({a['requests']:,} requests), "
            f"{long:g} min {b['peak_mib']:.0f} MiB ({b['requests']:,} requests): {ratio:.2f}x "
            f"(bound {PEAK_BOUND}x); {'PASS' if good else 'FAIL'}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **res, "verdict": v}, indent=1))
    sys.exit(0 if v["ok"] else 1)


def _server(args):
    """The server a soak runs against, started fresh (a context manager)."""
    if args.server == "canned":
        return canned_server("--ttft-ms", "5", "--pacing-ms", str(args.pacing_ms))
    return emulator_server(LLAMA, "--speculative-config", EAGLE, "--time-scale", str(args.time_scale))


def _scale(args) -> float:
    """Real seconds per emulated second of the load (the emulator's --time-scale)."""
    return args.time_scale if args.server == "emulator" else 1.0


def show(args, res: dict, v: dict) -> None:
    print(
        f"soak: {args.minutes:g} min, {args.streams} streams against the {args.server} server "
        f"({'pacing ' + format(args.pacing_ms, 'g') + ' ms, ' if args.server == 'canned' else ''}"
        f"{args.output_len} tokens a response); wall {res['wall_s']:.0f} s"
    )
    print("(missing: numbers prepared at the deadline and never sent, at most one per stream)")
    print("| t (s) | client RSS (MiB) | server RSS (MiB) | journal (MiB) |")
    print("|---|---|---|---|")
    for x in res["samples"]:
        print(f"| {x['t_s']:.0f} | {x['client_mib']:.1f} | {x['server_mib']:.1f} | {x['journal_mib']:.1f} |")
    print(
        f"requests {res['requests']:,} (completed {res['completed']:,}, failed {res['failed']}), "
        f"duplicated {res['duplicated']}, never sent {res['missing']}; output {res['output_tok_s']:,.0f} tok/s; "
        f"client_bound {res['client_bound']}; exit {res['exit']}"
    )
    print(
        f"client RSS {v.get('end_mib', 0):.1f} MiB at {v.get('end_t_s', 0):.0f} s vs {v.get('reference_mib', 0):.1f} "
        f"MiB at {v.get('reference_t_s', 0):.0f} s: {v.get('growth', 0):+.1%}; {'PASS' if v['ok'] else 'FAIL'}"
    )
    if res.get("peak_mib"):
        print(f"client peak RSS, start to finish (its load and its end): {res['peak_mib']:.0f} MiB")
    if v.get("after_load_peak_mib"):
        print(
            f"after the load, computing the results from the journal: client RSS up to "
            f"{v['after_load_peak_mib']:,.0f} MiB ({res['wall_s'] - args.minutes * 60:.0f} s)"
        )


if __name__ == "__main__":
    main()
