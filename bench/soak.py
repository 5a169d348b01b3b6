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

    python3 bench/soak.py --minutes 60 --streams 256              # the recorded figures
    python3 bench/soak.py --minutes 3 --streams 256 --json out.json
    python3 bench/soak.py --minutes 10 --server emulator --time-scale 4

Figures recorded for this machine: docs/performance.md ("Long runs").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from servers.embedded import canned_server, emulator_server  # noqa: E402

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


def soak(args, url: str, server_pid: int, out: Path) -> dict:
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
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples = []
    next_at = t0 + args.sample_s
    while proc.poll() is None:
        time.sleep(min(1.0, max(0.0, next_at - time.monotonic())))
        if time.monotonic() >= next_at and proc.poll() is None:
            samples.append(
                {
                    "t_s": round(time.monotonic() - t0, 1),
                    "client_mib": rss_kib(proc.pid, True) / 1024,
                    "server_mib": rss_kib(server_pid) / 1024,
                    "journal_mib": sum(p.stat().st_size for p in out.glob("records-*.jsonl")) / 2**20,
                }
            )
            next_at += args.sample_s
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - t0
    import pandas as pd

    frame = pd.read_parquet(out / "requests.parquet", columns=["index", "ok", "error_type"])
    idx = frame["index"].sort_values().to_numpy()
    summary = json.loads((out / "summary.json").read_text())
    return {
        "exit": proc.returncode,
        "stderr_tail": stderr[-500:],
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
    args = p.parse_args()
    if args.show:
        saved = json.loads(Path(args.show).read_text())
        vars(args).update({k: v for k, v in saved["args"].items() if k not in ("show", "json")})
        res = saved
        v = verdict(res, args.minutes, _scale(args))
        show(args, res, v)
        sys.exit(0 if v["ok"] else 1)
    if args.server == "canned":
        server = canned_server("--ttft-ms", "5", "--pacing-ms", str(args.pacing_ms))
    else:
        server = emulator_server(LLAMA, "--speculative-config", EAGLE, "--time-scale", str(args.time_scale))
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp, server as srv:
        out = Path(args.output) if args.output else Path(tmp) / "run"
        res = soak(args, srv.url, srv.pid, out)
    v = verdict(res, args.minutes, _scale(args))
    show(args, res, v)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **res, "verdict": v}, indent=1))
    sys.exit(0 if v["ok"] else 1)


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
    if v.get("after_load_peak_mib"):
        print(
            f"after the load, computing the results from the journal: client RSS up to "
            f"{v['after_load_peak_mib']:,.0f} MiB ({res['wall_s'] - args.minutes * 60:.0f} s)"
        )


if __name__ == "__main__":
    main()
