"""A measured run from the options of `loadgen run`, `check` and `simulate`, by their names (as
click gives them): every option checked before anything runs, each mistake a LoadgenError that
names the flag and the fix. `loadgen/sweep/planning.py` does the same for a sweep."""
from __future__ import annotations

import json
from functools import lru_cache
from types import SimpleNamespace

from loadgen.backends.workers import WorkloadRef
from loadgen.errors import LoadgenError, flagged
from loadgen.executors.conversation import Think
from loadgen.measures import slo
from loadgen.measures.tokens import TokenizerError, load_tokenizer
from loadgen.load.execute import RunSpec
from loadgen.run.measurement import RunJob
from loadgen.run.target import Note, Target
from loadgen.load.timescale import TimeScaleError, parse_scale
from loadgen.shapes import Shape
from loadgen.shapes.options import OPTIONS, from_options
from loadgen.shapes.trace import TraceReplay
from workloads import Workload, WorkloadError, open_workload
from workloads.fitting import trace_requests
from workloads.traces import read_trace

_SPEC_FIELDS = OPTIONS + ("num_requests", "duration", "warmup", "request_timeout", "max_error_rate")


@lru_cache(maxsize=4)
def _read_trace(spec: str, skip_bad: bool, start: float, window: float | None, num: int | None):
    try:
        trace = read_trace(spec, skip_bad=skip_bad)
    except WorkloadError as e:
        raise LoadgenError(str(e)) from None
    part = trace.window(start, window, num)
    if not len(part):
        raise LoadgenError(f"--trace {spec}: no requests between {start:g} s and "
                           f"{'the end' if window is None else f'{start + window:g} s'} (it spans {trace.t_s[-1]:.0f} s)")
    return trace, part


TRACE_ONLY = ("trace_speed", "trace_start", "trace_window")


def _trace(o: dict):
    """The trace's window (and the whole trace), when --trace is given."""
    if not o.get("trace"):
        for key in TRACE_ONLY:
            if o.get(key) is not None:
                flag = "--" + key.replace("_", "-")
                raise LoadgenError(f"{flag} applies to a trace replay: give --trace FORMAT:PATH, or drop {flag}")
        return None, None
    o = {**o, "trace_speed": 1.0 if o.get("trace_speed") is None else o["trace_speed"],
         "trace_start": o.get("trace_start") or 0.0}
    for key, given in (("concurrency", o["concurrency"]), ("rate", o["rate"]), ("ramp", o.get("ramp")),
                       ("arrival", o["arrival"]), ("burstiness", o["burstiness"])):
        if given is not None:
            raise LoadgenError(f"--trace is a load of its own (its times): drop --{key}")
    if o.get("workers", 1) > 1 or o.get("ray_address"):
        raise LoadgenError("--trace replays from one process: drop --workers / --ray")
    if o["trace_window"] is not None and not o["trace_window"] > 0:
        raise LoadgenError(f"--trace-window must be > 0, got {o['trace_window']}")
    if o["trace_start"] < 0:
        raise LoadgenError(f"--trace-start must be >= 0, got {o['trace_start']}")
    return _read_trace(o["trace"], o["skip_bad"], o["trace_start"], o["trace_window"], o["num_requests"])


def load_shape(o: dict) -> tuple[Shape, int | None]:
    """The load, and the number of measured requests (200 unless bounded by duration; a trace's
    window)."""
    trace, part = _trace(o)
    if part is not None:
        try:
            load = TraceReplay(tuple(part.t_s.tolist()), 1.0 if o["trace_speed"] is None else o["trace_speed"],
                               o["trace"], o["trace_start"] or 0.0)
        except ValueError as e:
            raise LoadgenError("--" + str(e).replace("_", "-")) from None
        num = len(part) - (o["warmup"] or 0)
        if num < 1:
            raise LoadgenError(f"--warmup {o['warmup']} leaves none of the window's {len(part)} requests to measure")
        return load, num
    load = from_options(o["concurrency"], o["rate"], o.get("ramp"), o["arrival"], o["burstiness"],
                        o["max_concurrency"])
    num = o["num_requests"]
    if num is None and o["duration"] is None:
        num = 200
    for key, lo in (("num_requests", 1), ("warmup", 0)):
        if o[key] is not None and o[key] < lo:
            raise LoadgenError(f"--{key.replace('_', '-')} must be >= {lo}, got {o[key]}")
    if o["duration"] is not None and not o["duration"] > 0:
        raise LoadgenError(f"--duration must be > 0, got {o['duration']}")
    return load, num


def workload(o: dict, tokenizer=None, note: Note = lambda _: None) -> Workload:
    """The workload the options describe, with the synthetic shorthand (--input-len, --output-len,
    --range-ratio) folded into its spec; with a tokenizer, synthetic prompt lengths are exact.
    With --trace: the trace's requests, their text from this workload (workloads.fitting)."""
    trace, part = _trace(o)
    if part is not None:
        return _trace_workload(o, trace, part, tokenizer, note)
    spec = o["workload"]
    shorthand = {k: o[k] for k in ("input_len", "output_len", "range_ratio") if o[k] is not None}
    for key in ("input_len", "output_len"):
        if key in shorthand and shorthand[key] < 1:
            raise LoadgenError(f"--{key.replace('_', '-')} must be >= 1, got {shorthand[key]}")
    if "range_ratio" in shorthand and not 0 <= shorthand["range_ratio"] < 1:
        raise LoadgenError(f"--range-ratio must be in [0, 1), got {shorthand['range_ratio']}")
    if shorthand:
        if not (spec == "synthetic" or spec.startswith("synthetic:")):
            raise LoadgenError("--input-len, --output-len and --range-ratio apply to synthetic workloads; "
                               "give other workloads' options in --workload")
        base = "synthetic:random" if spec == "synthetic" else spec
        spec = base + "".join(f",{k}={v}" for k, v in shorthand.items() if f"{k}=" not in base)
    try:
        w = open_workload(spec, data_dir=o["data_dir"], skip_bad=o["skip_bad"], category=o["category"],
                          tokenizer=tokenizer)
    except WorkloadError as e:
        raise LoadgenError(str(e)) from None
    if w.notice:
        note(f"note: {w.notice}")
    if w.skipped:
        note(f"note: skipped {w.skipped} bad records of {spec} (first: {w.bad[0]})")
    for what, n in w.repairs.items():
        note(f"note: {n} records of {spec} read with {what} (optional metadata)")
    return w


def _trace_workload(o: dict, trace, part, tokenizer, note: Note) -> Workload:
    if any(o[k] is not None for k in ("input_len", "output_len", "range_ratio")):
        raise LoadgenError("--input-len, --output-len and --range-ratio do not apply to --trace: the trace gives the lengths")
    content = None
    if o["workload"] != "synthetic:random":  # the default: random common words (workloads.fitting)
        content = workload({**o, **dict.fromkeys(("trace", *TRACE_ONLY))}, None, note)  # the text only
    if trace.skipped:
        note(f"note: skipped {trace.skipped} bad lines of {o['trace']} (first: {trace.bad[0]})")
    for what, n in trace.repairs.items():
        note(f"note: {n} lines of {o['trace']}: {what}")
    text = content.spec if content is not None else "random common words (no --workload)"
    return Workload(f"trace:{o['trace']}", "trace", f"{o['trace']}, text from {text}",
                    make=lambda seed: trace_requests(part, content, seed=seed, tokenizer=tokenizer),
                    exact=SimpleNamespace(exact=True) if tokenizer is not None else None)


def think(o: dict, wl: Workload | None = None) -> Think:
    """--think-time, checked; refused for a workload `wl` of single requests (no turn to wait for)."""
    try:
        pause = Think.parse(o.get("think_time"))
    except ValueError as e:
        raise LoadgenError("--" + str(e).replace("_", "-", 1)) from None
    if o.get("think_time") is not None and wl is not None and not wl.conversations:
        raise LoadgenError(f"--think-time applies to conversations, and {wl.spec} sends single requests: drop "
                           "--think-time, or give a conversation workload (turns=session, synthetic:session)")
    return pause


def objectives(specs) -> dict | None:
    """--goodput's per-request objectives (loadgen.measures.slo), or None without any."""
    try:
        return slo.objectives(list(specs)) or None
    except slo.SLOError as e:
        raise LoadgenError(str(e)) from None


def _extra_body(text: str | None) -> dict | None:
    if not text:
        return None
    try:
        extra = json.loads(text)
    except ValueError as e:
        raise LoadgenError(f"--extra-body is not valid JSON ({e}); give an object like '{{\"top_k\": 1}}'") from None
    if not isinstance(extra, dict):
        raise LoadgenError("--extra-body must be a JSON object, like '{\"top_k\": 1}'")
    return extra


def run_job(o: dict, note: Note = lambda _: None, config: dict | None = None) -> RunJob:
    """`loadgen run`'s options as a RunJob (every option checked, in one line each, before
    anything runs); `config`: more keys for the run's config record."""
    load, num = load_shape(o)
    tokenizer = None
    if o["tokenizer"]:
        try:
            tokenizer = load_tokenizer(o["tokenizer"])
        except TokenizerError as e:
            raise LoadgenError(str(e)) from None
    wl = workload(o, tokenizer, note)
    goals = objectives(o["goodput_specs"])
    headers = {"Authorization": f"Bearer {o['api_key']}"} if o["api_key"] else {}
    extra = _extra_body(o["extra_body"])
    try:
        spec = RunSpec(api_base="", model="", load=load, endpoint=o["endpoint"], num_requests=num,
                       duration_s=o["duration"], warmup=o["warmup"], seed=o["seed"],
                       request_timeout_s=o["request_timeout"], continuous_usage=not o["no_continuous_usage"],
                       keep_text=o["tokenizer"] is not None, token_ids=o["token_ids"], extra_body=extra,
                       headers=headers, think=think(o, wl), max_error_rate=o.get("max_error_rate"))
        given_scale = parse_scale(o["time_scale"])
    except TimeScaleError as e:
        raise LoadgenError(str(e)) from None
    except ValueError as e:
        raise LoadgenError(flagged(str(e), _SPEC_FIELDS)) from None
    target = Target(o["base_url"], o.get("servers"), o.get("variant"), o.get("engine"), given_scale)
    return RunJob(
        spec, wl, target, model=o["model"], keep_alive=o["keep_alive"], metrics_url=o["metrics_url"],
        workers=o["workers"], ray_address=o["ray_address"],
        workload_ref=WorkloadRef(wl.spec, o["data_dir"], o["skip_bad"], o["category"], o["tokenizer"]),
        tokenizer=tokenizer, tokenizer_path=o["tokenizer"], objectives=goals,
        lateness_threshold_ms=o["lateness_threshold_ms"], timing_threshold_ms=o["timing_threshold_ms"],
        note=note, config=dict(config or {}), steady_state=bool(o.get("steady_state")))
