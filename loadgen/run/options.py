"""A measured run from typed options (`RunOptions`, whose shared groups `simulate` takes too):
every option checked before anything runs, each mistake a LoadgenError that names the flag and
the fix. The command line builds these models from its flags (loadgen/cli/options.py: one
field each, the load shapes' from their family); Python builds them directly, and both are
checked by this one code. `loadgen/planning/build.py` does the same for a sweep."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from loadgen.errors import LoadgenError, flagged
from loadgen.executors.conversation import Think
from loadgen.load.execute import RunSpec
from loadgen.load.timescale import TimeScaleError, parse_scale
from loadgen.load.workload import WorkloadRef
from loadgen.measures import slo
from loadgen.measures.reconcile import declared_k
from loadgen.measures.tokens import TokenizerError, load_tokenizer
from loadgen.options import LoadOptions, RunOptions, WorkloadOptions, extra_body, with_sampling
from loadgen.run.measurement import RunJob
from loadgen.run.target import Note, Target
from loadgen.shapes import Shape
from loadgen.shapes import options as shape_options
from workloads import Workload, WorkloadError, open_workload
from workloads.fitting import trace_requests
from workloads.spec import Sampling


def _spec_fields() -> tuple[str, ...]:
    """The option names a RunSpec's message may start with (longer ones first)."""
    names = [f.name for f in shape_options.flags()] + [
        "num_requests",
        "duration",
        "warmup",
        "request_timeout",
        "max_error_rate",
    ]
    return tuple(sorted(names, key=len, reverse=True))


def load_shape(o: LoadOptions) -> tuple[Shape, int | None]:
    """The load, and the number of measured requests (200 unless bounded by duration; a trace's
    window)."""
    load = shape_options.from_options(o.shape, o)
    defined = load.requests()
    if defined is not None:
        left = defined - (o.warmup or 0)
        if left < 1:
            raise LoadgenError(f"--warmup {o.warmup} leaves none of the window's {defined} requests to measure")
        return load, left
    num: int | None = o.num_requests
    if num is None and o.duration is None:
        num = 200
    for key, given, lo in (("num_requests", o.num_requests, 1), ("warmup", o.warmup, 0)):
        if given is not None and given < lo:
            raise LoadgenError(f"--{key.replace('_', '-')} must be >= {lo}, got {given}")
    if o.duration is not None and not o.duration > 0:
        raise LoadgenError(f"--duration must be > 0, got {o.duration}")
    return load, num


def workload(o: WorkloadOptions, tokenizer=None, note: Note = lambda _: None, load: Shape | None = None) -> Workload:
    """The workload the options describe, with the synthetic shorthand (--input-len, --output-len,
    --range-ratio) folded into its spec; with a tokenizer, synthetic prompt lengths are exact.
    A trace replay's `load`: the trace's requests, their text from this workload (workloads.fitting)."""
    if getattr(load, "window", None) is not None:
        return _trace_workload(o, load, tokenizer, note)
    spec = o.workload
    shorthand = {
        k: v
        for k, v in (("input_len", o.input_len), ("output_len", o.output_len), ("range_ratio", o.range_ratio))
        if v is not None
    }
    for key in ("input_len", "output_len"):
        if key in shorthand and shorthand[key] < 1:
            raise LoadgenError(f"--{key.replace('_', '-')} must be >= 1, got {shorthand[key]}")
    if "range_ratio" in shorthand and not 0 <= shorthand["range_ratio"] < 1:
        raise LoadgenError(f"--range-ratio must be in [0, 1), got {shorthand['range_ratio']}")
    if shorthand:
        if not (spec == "synthetic" or spec.startswith("synthetic:")):
            raise LoadgenError(
                "--input-len, --output-len and --range-ratio apply to synthetic workloads; "
                "give other workloads' options in --workload"
            )
        base = "synthetic:random" if spec == "synthetic" else spec
        spec = base + "".join(f",{k}={v}" for k, v in shorthand.items() if f"{k}=" not in base)
    spec = with_sampling(spec, o)
    try:
        w = open_workload(spec, data_dir=o.data_dir, skip_bad=o.skip_bad, category=o.category, tokenizer=tokenizer)
    except WorkloadError as e:
        raise LoadgenError(str(e)) from None
    if w.notice:
        note(f"note: {w.notice}")
    if w.skipped:
        note(f"note: skipped {w.skipped} bad records of {spec} (first: {w.bad[0]})")
    for what, n in w.repairs.items():
        note(f"note: {n} records of {spec} read with {what} (optional metadata)")
    return w


def _trace_workload(o: WorkloadOptions, load: Any, tokenizer, note: Note) -> Workload:
    trace, source = load.trace, load.source
    if any(v is not None for v in (o.input_len, o.output_len, o.range_ratio)):
        raise LoadgenError(
            "--input-len, --output-len and --range-ratio do not apply to --trace: the trace gives the lengths"
        )
    content = None
    if o.workload != "synthetic:random":  # the default: random common words (workloads.fitting)
        content = workload(o, None, note)  # the text only
    if trace.skipped:
        note(f"note: skipped {trace.skipped} bad lines of {source} (first: {trace.bad[0]})")
    for what, n in trace.repairs.items():
        note(f"note: {n} lines of {source}: {what}")
    fitted = fit_to_trace(load, content, tokenizer)
    if content is None:  # random words: the command line's sampling, if any, applies all the same
        fitted.sampling = open_workload(with_sampling("synthetic:random", o)).sampling
    return fitted


def fit_to_trace(load: Any, content: Workload | None, tokenizer=None) -> Workload:
    """A trace replay's requests (`load`: its window), their text from `content` (None: random
    common words), as workloads.fitting makes them: `loadgen run --trace` and a trace sweep's
    cells alike."""
    part, source = load.window, load.source
    text = content.spec if content is not None else "random common words (no --workload)"
    return Workload(
        f"trace:{source}",
        "trace",
        f"{source}, text from {text}",
        make=lambda seed: trace_requests(part, content, seed=seed, tokenizer=tokenizer),
        exact=SimpleNamespace(exact=True) if tokenizer is not None else None,
        sampling=content.sampling if content is not None else Sampling(),  # the text's workload's
    )


def think(o: LoadOptions, wl: Workload | None = None) -> Think:
    """--think-time, checked; refused for a workload `wl` of single requests (no turn to wait for)."""
    try:
        pause = Think.parse(o.think_time)
    except ValueError as e:
        raise LoadgenError("--" + str(e).replace("_", "-", 1)) from None
    if o.think_time is not None and wl is not None and not wl.conversations:
        raise LoadgenError(
            f"--think-time applies to conversations, and {wl.spec} sends single requests: drop "
            "--think-time, or give a conversation workload (turns=session, synthetic:session)"
        )
    return pause


def objectives(specs) -> dict | None:
    """--goodput's per-request objectives (loadgen.measures.slo), or None without any."""
    try:
        return slo.objectives(list(specs)) or None
    except slo.SLOError as e:
        raise LoadgenError(str(e)) from None


_extra_body = extra_body  # the one parser of --extra-body (loadgen.options)
EXAMPLE_SPEC = '{"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3}'


def run_job(o: RunOptions, note: Note = lambda _: None, config: dict | None = None) -> RunJob:
    """`loadgen run`'s options as a RunJob (every option checked, in one line each, before
    anything runs); `config`: more keys for the run's config record."""
    load, num = load_shape(o)
    tokenizer = None
    if o.tokenizer:
        try:
            tokenizer = load_tokenizer(o.tokenizer)
        except TokenizerError as e:
            raise LoadgenError(str(e)) from None
    wl = workload(o, tokenizer, note, load)
    goals = objectives(o.goodput_specs)
    headers = {"Authorization": f"Bearer {o.api_key}"} if o.api_key else {}
    extra = _extra_body(o.extra_body)
    try:
        spec = RunSpec(
            api_base="",
            model="",
            load=load,
            endpoint=o.endpoint,
            num_requests=num,
            duration_s=o.duration,
            warmup=o.warmup,
            seed=o.seed,
            request_timeout_s=o.request_timeout,
            continuous_usage=not o.no_continuous_usage,
            keep_text=o.tokenizer is not None,
            token_ids=o.token_ids,
            extra_body=extra,
            headers=headers,
            think=think(o, wl),
            max_error_rate=o.max_error_rate,
            scrape_interval_s=_metrics_interval(o),
        )
        given_scale = parse_scale(o.time_scale)  # a number or None ("auto" is a sweep's)
        assert given_scale is None or isinstance(given_scale, float)
    except TimeScaleError as e:
        raise LoadgenError(str(e)) from None
    except ValueError as e:
        raise LoadgenError(flagged(str(e), _spec_fields())) from None
    target = Target(o.base_url, o.servers, o.variant, o.engine, given_scale, declared_spec(o))
    return RunJob(
        spec,
        wl,
        target,
        model=o.model,
        keep_alive=o.keep_alive,
        metrics_url=o.metrics_url,
        workers=o.workers,
        ray_address=o.ray_address,
        workload_ref=WorkloadRef(wl.spec, o.data_dir, o.skip_bad, o.category, o.tokenizer),
        tokenizer=tokenizer,
        tokenizer_path=o.tokenizer,
        objectives=goals,
        lateness_threshold_ms=o.lateness_threshold_ms,
        timing_threshold_ms=o.timing_threshold_ms,
        note=note,
        config=dict(config or {}),
        steady_state=o.steady_state,
    )


def declared_spec(o: RunOptions) -> str | None:
    """--speculative-config, checked: a JSON object naming k (num_speculative_tokens), and only
    for a server at --base-url (loadgen knows what a server it starts runs)."""
    text = o.speculative_config
    if text is None:
        return None
    if o.base_url is None:
        started = (
            f"--servers {o.servers} --variant {o.variant}'s own" if o.servers else "the embedded emulator's EAGLE k=3"
        )
        raise LoadgenError(
            f"--speculative-config declares what a server at --base-url runs; loadgen records {started}: drop it"
        )
    try:
        spec = json.loads(text)
    except ValueError as e:
        raise LoadgenError(f"--speculative-config is not valid JSON ({e}): give vLLM's, e.g. {EXAMPLE_SPEC}") from None
    if not isinstance(spec, dict) or declared_k(spec) is None:
        raise LoadgenError(
            f"--speculative-config {text} names no k: give a JSON object with num_speculative_tokens, "
            f"e.g. {EXAMPLE_SPEC}"
        )
    return json.dumps(spec, separators=(",", ":"))


def _metrics_interval(o: RunOptions) -> float:
    """--metrics-interval, refused where nothing is sampled (--metrics-url none)."""
    if o.metrics_interval is None:
        return 1.0
    if (o.metrics_url or "").lower() == "none":
        raise LoadgenError("--metrics-interval spaces the samples of --metrics-url, which is none: drop one of them")
    return o.metrics_interval
