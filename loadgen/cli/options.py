"""Options and steps `run` and `simulate` share: the load, the workload, the results."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from loadgen import api, config, console, slo
from loadgen.cli.app import EXIT_INTERRUPTED, EXIT_NOTHING_SUCCEEDED, Failure
from loadgen.shapes import Shape
from loadgen.shapes.options import from_options
from workloads import WorkloadError, open_workload


def load_options(f):
    for opt in reversed([
        click.option("--concurrency", type=int, help="Closed loop: N users, each sends when its last request ends."),
        click.option("--rate", type=float, help="Open loop: R requests per second."),
        click.option("--ramp", metavar="[users:|rate:]A:B:S",
                     help="Load rising linearly from A to B over S seconds, then held at B: users (closed "
                     "loop, the default) or requests per second (open loop), e.g. 1:32:60 or rate:1:20:60."),
        click.option("--arrival", type=click.Choice(["poisson", "gamma", "constant"]), default=None,
                     help="Open-loop gaps [default: poisson; gamma when --burstiness is given]."),
        click.option("--burstiness", type=float, default=None,
                     help="Gamma shape B: CV of gaps = 1/sqrt(B); 1 = Poisson, < 1 burstier."),
        click.option("--max-concurrency", type=int, help="Open loop: cap on requests in flight."),
        click.option("--num-requests", type=int, help="Requests to measure (after warm-up) [default: 200 "
                     "unless --duration is given]."),
        click.option("--duration", type=float, help="Stop sending after S seconds."),
        click.option("--warmup", type=int, default=0, show_default=True,
                     help="Requests sent first and left out of the statistics."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seeds arrivals and workload."),
    ]):
        f = opt(f)
    return f


def workload_options(f):
    for opt in reversed([
        click.option("--workload", default="synthetic:random", show_default=True,
                     help="A catalog name (loadgen workloads list), FORMAT:PATH[,key=value...], "
                          "hf:DATASET_ID or synthetic:KIND[,key=value...]; docs/workloads.md."),
        click.option("--category", help="Only records of this category (formats with categories)."),
        click.option("--skip-bad", is_flag=True, help="Count and skip records that cannot be read."),
        click.option("--data-dir", envvar="LOADGEN_DATA_DIR", show_envvar=True,
                     help="Where catalog workloads find local data sets."),
        click.option("--input-len", type=int, default=None,
                     help="Synthetic shorthand: input_len (words ~ tokens) [random: 256; kinds: their data set's mean]."),
        click.option("--output-len", type=int, default=None,
                     help="Synthetic shorthand: output_len [random: 128, with ignore_eos; kinds: the model stops]."),
        click.option("--range-ratio", type=float, default=None,
                     help="Synthetic random shorthand: prompt lengths uniform within +-ratio [0.25]."),
    ]):
        f = opt(f)
    return f


def result_options(f):
    for opt in reversed([
        click.option("--goodput", "goodput_specs", multiple=True,
                     help="Per-request objectives, e.g. 'ttft<=500ms,tpot<=50ms'."),
        click.option("--output", "output_dir", type=click.Path(), default=None,
                     help="Results directory [default: results/<command>-YYYYmmdd-HHMMSS]."),
    ]):
        f = opt(f)
    return f


def flagged(message: str) -> str:
    """Name the flag: 'rate must be > 0' -> '--rate must be > 0'."""
    for word in ("max_concurrency", "concurrency", "rate", "burstiness", "num_requests",
                 "duration", "warmup", "request_timeout"):
        if message.startswith(word + " "):
            return "--" + word.replace("_", "-") + message[len(word):]
    return message


def load_shape(o: dict) -> tuple[Shape, int | None]:
    """The load, and the number of measured requests (200 unless bounded by duration)."""
    load = from_options(o["concurrency"], o["rate"], o.get("ramp"), o["arrival"], o["burstiness"],
                        o["max_concurrency"])
    num = o["num_requests"]
    if num is None and o["duration"] is None:
        num = 200
    for key, lo in (("num_requests", 1), ("warmup", 0)):
        if o[key] is not None and o[key] < lo:
            raise click.UsageError(f"--{key.replace('_', '-')} must be >= {lo}, got {o[key]}")
    if o["duration"] is not None and not o["duration"] > 0:
        raise click.UsageError(f"--duration must be > 0, got {o['duration']}")
    return load, num


def workload(o: dict, tokenizer=None):
    """The workload the options describe (with a tokenizer, synthetic prompt lengths are exact
    tokens)."""
    spec = o["workload"]
    shorthand = {k: o[k] for k in ("input_len", "output_len", "range_ratio") if o[k] is not None}
    for key in ("input_len", "output_len"):
        if key in shorthand and shorthand[key] < 1:
            raise click.UsageError(f"--{key.replace('_', '-')} must be >= 1, got {shorthand[key]}")
    if "range_ratio" in shorthand and not 0 <= shorthand["range_ratio"] < 1:
        raise click.UsageError(f"--range-ratio must be in [0, 1), got {shorthand['range_ratio']}")
    if shorthand:
        if not (spec == "synthetic" or spec.startswith("synthetic:")):
            raise click.UsageError("--input-len, --output-len and --range-ratio apply to synthetic workloads; "
                                   "give other workloads' options in --workload")
        base = "synthetic:random" if spec == "synthetic" else spec
        spec = base + "".join(f",{k}={v}" for k, v in shorthand.items() if f"{k}=" not in base)
    try:
        w = open_workload(spec, data_dir=o["data_dir"], skip_bad=o["skip_bad"], category=o["category"],
                          tokenizer=tokenizer)
    except WorkloadError as e:
        raise Failure(str(e)) from None
    if w.notice:
        click.echo(f"note: {w.notice}", err=True)
    if w.skipped:
        click.echo(f"note: skipped {w.skipped} bad records of {spec} (first: {w.bad[0]})", err=True)
    return w


def objectives(o: dict) -> dict | None:
    try:
        return slo.parse(list(o["goodput_specs"])) or None
    except ValueError as e:
        raise click.UsageError(str(e)) from None


def prepare_output(o: dict, command: str) -> Path:
    return api.prepare(o["output_dir"] or time.strftime(f"results/{command}-%Y%m%d-%H%M%S"))


def host_config() -> dict:
    return config.host()


def argv_without_secrets() -> list[str]:
    return config.argv_without_secrets()


class ProgressBar:
    """The run's progress bar on stderr (none with --quiet), from the moment the load starts."""

    def __init__(self, quiet: bool) -> None:
        self.quiet, self.bar, self.failed = quiet, None, 0

    def start(self, total: int | None) -> None:
        from tqdm import tqdm
        tqdm.monitor_interval = 0  # no monitor thread in a process that measures latency
        self.bar = tqdm(total=total, unit="req", disable=self.quiet or None, leave=False,
                        mininterval=0.5, file=sys.stderr)

    def update(self, done: int, failed: int) -> None:
        if self.bar is None:
            return
        self.failed += failed
        self.bar.update(done)
        if self.failed:
            self.bar.set_postfix(failed=self.failed, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def write_and_report(out: Path, frame, summarize_fn, *, interrupted: bool,
                     nothing_code: int = EXIT_NOTHING_SUCCEEDED, to_stderr: bool = False) -> dict:
    """Write the request table first (whatever happens next, what was measured is kept), then
    the summary; print it; exit non-zero when interrupted or nothing succeeded."""
    summary = api.write(out, frame, summarize_fn)
    return report(summary, out, interrupted=interrupted, nothing_code=nothing_code, to_stderr=to_stderr)


def report(summary: dict, out: Path, *, interrupted: bool, nothing_code: int = EXIT_NOTHING_SUCCEEDED,
           to_stderr: bool = False) -> dict:
    """Print a written run's summary and warnings; exit non-zero when interrupted or nothing
    succeeded."""
    click.echo(console.render(summary), err=to_stderr)
    for line in console.warnings(summary):
        click.echo(line, err=True)
    click.echo(f"\nResults: {out / api.SUMMARY}, {out / api.REQUESTS}", err=to_stderr)
    if interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if summary["completed"] == 0:
        click.echo("loadgen: error: no request succeeded; see the errors above", err=True)
        sys.exit(nothing_code)
    return summary


def live_metrics(port: int | None):
    """loadgen's live metrics on 127.0.0.1:`port` (--metrics-port), or None without it."""
    if port is None:
        return None
    from loadgen.live import LiveMetrics
    try:
        return LiveMetrics(port)
    except OSError as e:
        raise Failure(f"--metrics-port {port}: cannot listen on 127.0.0.1:{port} ({e.strerror or e}); "
                      "choose a free port") from None
