"""A sweep's plan from the options of `loadgen sweep`: the embedded default's presets, every
option checked, the deployment loaded, and the plan described in words (--dry-run)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from loadgen.errors import LoadgenError
from loadgen.load.timescale import TimeScaleError, parse_scale
from loadgen.options import SweepOptions, extra_body, with_sampling
from loadgen.planning.plan import Plan, PlanError, labels, levels, servers, split_workloads, with_profile
from loadgen.planning.profiles import checked
from loadgen.shapes import Shape
from loadgen.shapes import options as shape_options
from servers import engines
from servers.deployments import DeploymentError, acceptance_variant, load, on_engine, with_acceptance_lengths
from workloads import WorkloadError, open_workload


# `loadgen sweep` without --servers: the emulated engine with the study's Llama-3.1-8B on H100
# cost model, four variants, two workloads of fixed 128-token answers, concurrency 1..64;
# sized to finish within 5 minutes on a 2-core laptop (docs/sweep.md).
@dataclass(frozen=True)
class Preset:
    """What a sweep runs when its options do not say."""

    workloads: tuple[str, ...]
    concurrency: str
    min_requests: int
    per_user: int
    warmup: int
    servers: str = ""
    engine: str | None = None
    variants: str = ""


EMBEDDED = Preset(
    servers="llama-3.1-8b",
    engine=engines.embedded(),
    variants="baseline,ngram,eagle,eagle3",
    workloads=("chat,output=fixed:128", "code-edit,output=fixed:128"),
    concurrency="1..64",
    min_requests=8,
    per_user=2,
    warmup=1,
)
DEFAULT = Preset(workloads=("chat", "code-edit"), concurrency="1..256", min_requests=50, per_user=4, warmup=4)
PLAN_OPTIONS = tuple(f.name for f in fields(SweepOptions))  # what --resume takes from the manifest


def _ints(text: str, flag: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise LoadgenError(f"{flag} {text!r}: give numbers separated by commas, like 0,1,2,3") from None
    if not out or min(out) < 0:
        raise LoadgenError(f"{flag} {text!r}: give numbers >= 0 separated by commas, like 0,1,2,3")
    return out


def plan_from(o: SweepOptions) -> tuple[Plan, object]:
    """The sweep's plan (and its deployment) from the options of `loadgen sweep`, by their
    names: every option checked, LoadgenError (one line, naming the option) otherwise."""
    embedded = o.servers is None
    preset = EMBEDDED if embedded else DEFAULT
    try:
        dep = on_engine(load(o.servers or EMBEDDED.servers), o.engine or (EMBEDDED.engine if embedded else None))
    except DeploymentError as e:
        raise LoadgenError(str(e)) from None
    dep = with_profile(dep, _profile(o, dep))
    dep, variants, templates, lengths = _variants(o, dep, embedded)
    own = _own_shape(o)
    mode, lv, specs = _levels(o, own, preset)
    for key, given, lo in (("num_requests", o.num_requests, 1), ("warmup", o.warmup, 0), ("repeats", o.repeats, 1)):
        if given is not None and given < lo:
            raise LoadgenError(f"--{key.replace('_', '-')} must be >= {lo}, got {given}")
    if o.duration is not None and not o.duration > 0:
        raise LoadgenError(f"--duration must be > 0, got {o.duration}")
    gpus = _ints(o.gpus, "--gpus") if o.gpus else list(range(dep.tensor_parallel_size))
    if len(gpus) < dep.tensor_parallel_size:
        raise LoadgenError(f"--gpus {o.gpus}: deployment {dep.name!r} needs {dep.tensor_parallel_size} GPUs per server")
    specs = _fit_answers([with_sampling(spec, o) for spec in specs], dep, o.data_dir)
    names = [_open(spec, o.data_dir).name for spec in specs]
    if o.virtual:
        _check_virtual(o, dep)
    mismatch = checked(dep, variants, o.profile_anyway)
    time_scale = None if o.virtual else _time_scale(o.time_scale, dep)
    arrival = o.arrival or ("gamma" if o.burstiness is not None else "poisson")
    where = o.servers or EMBEDDED.servers
    if Path(where).exists():  # a file: found again by --resume from any directory
        where = str(Path(where).resolve())
    plan = Plan(
        deployment=where,
        engine=dep.engine,
        variants=variants,
        workloads=specs,
        workload_labels=labels(specs, names),
        mode=mode,
        levels=lv,
        num_requests=o.num_requests,
        duration_s=o.duration,
        warmup=(preset.warmup if dep.warmup is None else dep.warmup) if o.warmup is None else o.warmup,
        seed=o.seed,
        endpoint=o.endpoint,
        arrival=arrival,
        burstiness=1.0 if o.burstiness is None else o.burstiness,
        request_timeout_s=o.request_timeout,
        extra_body=extra_body(o.extra_body),
        token_ids=bool(o.token_ids),
        goodput=_objectives(o.goodput),
        data_dir=str(Path(o.data_dir).resolve()) if o.data_dir else None,
        gpus=gpus,
        parallel=o.parallel,
        port=o.port,
        baseline=o.baseline,
        executable=_command(o.executable),
        min_requests=dep.min_requests or preset.min_requests,
        per_user=dep.requests_per_user or preset.per_user,
        workers=o.workers,
        metrics_interval_s=1.0 if o.metrics_interval is None else o.metrics_interval,
        time_scale=time_scale,
        acceptance_templates=templates,
        acceptance_lengths=lengths,
        repeats=o.repeats or 1,
        virtual=bool(o.virtual),
        replay=_replay(o),
        traces_from=_traces_from(o),
        profile_mismatch=mismatch or None,
        profile=_profile(o, dep),
        shape=None if own is None else own[0],
    )
    return plan, dep


def _variants(o: SweepOptions, dep, embedded: bool) -> tuple[Any, list[str], list[str] | None, list[float] | None]:
    """The plan's variants (--variants, checked against the deployment), with an acceptance axis
    (--acceptance-lengths) the deployment widened by its synthetic variants; the axis's
    templates and lengths (None without one)."""
    variants = [
        v.strip()
        for v in (o.variants or (EMBEDDED.variants if embedded else ",".join(dep.variants))).split(",")
        if v.strip()
    ]
    unknown = [v for v in variants if v not in dep.variants]
    if unknown:
        raise LoadgenError(
            f"--variants: {', '.join(unknown)} not in deployment {dep.name!r} (it has {', '.join(dep.variants)})"
        )
    if len(set(variants)) != len(variants):
        raise LoadgenError("--variants lists a variant twice")
    templates, lengths = None, None
    if o.acceptance_lengths:
        lengths = _lengths(o.acceptance_lengths)
        templates = [v for v in variants if v != (o.baseline or "baseline")]
        if len(templates) == len(variants):
            raise LoadgenError("--acceptance-lengths compares against the baseline: include it in --variants")
        try:
            dep = with_acceptance_lengths(dep, templates, lengths)
        except DeploymentError as e:
            raise LoadgenError(str(e)) from None
        variants = [v for v in variants if v not in templates] + [
            acceptance_variant(t, length) for t in templates for length in lengths
        ]
    return dep, variants, templates, lengths


def _levels(o: SweepOptions, own, preset) -> tuple[str, list[float], list]:
    """The plan's mode (closed, open or trace), its levels and its workloads' specs."""
    if o.trace_speeds and (own is None or own[1].mode != "trace"):
        raise LoadgenError("--trace-speeds replays a trace at each speed: give --trace FORMAT:PATH")
    if o.concurrency and o.rates:
        raise LoadgenError("give one of --concurrency (closed loop) and --rates (open loop)")
    if o.concurrency and (o.arrival or o.burstiness is not None):
        raise LoadgenError("--arrival and --burstiness apply to --rates only")
    try:
        lv: list[float]
        if own is not None and own[1].mode == "trace":  # a trace at each speed (its own one by default)
            if o.trace_speeds and "trace_speed" in own[0]:
                raise LoadgenError("give one of --trace-speed and --trace-speeds")
            mode = "trace"
            own[0].pop("trace_speed", None)
            lv = (
                levels(o.trace_speeds, integer=False, flag="--trace-speeds")
                if o.trace_speeds
                else [getattr(own[1], "speed", 1.0)]
            )
        elif own is not None:  # one level: the shape's peak (users, or requests/s)
            mode = "closed" if own[1].closed else "open"
            lv = [own[1].concurrency or 0] if own[1].closed else [own[1].rate or 0.0]
        elif o.rates:
            mode, lv = "open", levels(o.rates, integer=False, flag="--rates")
        else:
            mode, lv = "closed", levels(o.concurrency or preset.concurrency, integer=True, flag="--concurrency")
        specs = split_workloads(list(o.workloads) or list(preset.workloads))
    except PlanError as e:
        raise LoadgenError(str(e)) from None
    return mode, lv, specs


def _own_shape(o: SweepOptions) -> tuple[dict, Shape] | None:
    """A load shape given by its own options (not the steady levels): its options as plain data
    for the plan, and the shape (checked now, as loadgen run checks it); None without one."""
    own = shape_options.flags(sweep=True)
    given = {f.name: getattr(o.shape, f.name, None) for f in own if getattr(o.shape, f.name, None) is not None}
    if not given:
        return None
    steady = [flag for flag, value in (("--concurrency", o.concurrency), ("--rates", o.rates)) if value]
    named = next(f.flag for f in own if f.name in given)
    if steady:
        raise LoadgenError(f"{named} is a load of its own: drop {' / '.join(steady)}")
    for name, value in (("arrival", o.arrival), ("burstiness", o.burstiness)):
        if value is not None:
            given[name] = value
    shape = shape_options.from_options(shape_options.options(**given), o)
    return given, shape


def _objectives(text: str | None) -> dict | None:
    from loadgen.measures import slo

    try:
        return slo.objectives([text]) if text else None
    except slo.SLOError as e:
        raise LoadgenError(f"--goodput: {e}") from None


def _lengths(text: str) -> list[float]:
    try:
        out = sorted({float(x) for x in text.split(",") if x.strip()})
    except ValueError:
        out = []
    if not out:
        raise LoadgenError(
            f"--acceptance-lengths {text!r}: give mean acceptance lengths separated by commas, like 1.5,2,2.5,3"
        )
    return out


def _check_virtual(o: SweepOptions, dep) -> None:
    """--virtual simulates the emulator's engine in this process: what in the plan only applies
    to servers, real time or load-generating processes is refused, each in one line (--ray and
    --metrics-port, options of the job, in sweep/job.py)."""
    if not engines.emulates(dep.engine):
        raise LoadgenError(
            f"--virtual simulates the emulator's engine; deployment {dep.name!r} runs on {dep.engine}: "
            "add --engine emulator (its variants' flags on the emulator's cost model)"
        )
    for key, given, why in (
        ("time-scale", o.time_scale is not None, "virtual time needs no dilation"),
        ("repeats", (o.repeats or 1) > 1, "a simulation has no run-to-run variation"),
        ("parallel", o.parallel, "no servers to run side by side"),
        ("workers", o.workers > 1, "no real-time load to split"),
        ("metrics-interval", o.metrics_interval is not None, "no server's /metrics to sample"),
        ("token-ids", o.token_ids, "the simulator's traces are exact: loadgen simulate --acceptance-traces"),
    ):
        if given:
            raise LoadgenError(f"--{key} does not apply to --virtual ({why}): drop one of them")


def _replay(o: SweepOptions) -> str | None:
    """--replay: a real sweep's directory, only with --virtual."""
    if o.replay is None:
        return None
    if not o.virtual:
        raise LoadgenError("--replay serves a real sweep's requests in virtual time: add --virtual")
    where = Path(o.replay).expanduser()
    if not (where / "manifest.json").is_file():
        raise LoadgenError(f"--replay {o.replay}: no sweep there (no manifest.json); give a sweep's output directory")
    return str(where.resolve())


def _profile(o: SweepOptions, dep) -> str | None:
    """--profile: a profile's name or a .toml file (made absolute), only on the emulator."""
    if o.profile is None:
        return None
    if not engines.emulates(dep.engine):
        raise LoadgenError(
            f"--profile prices the emulator; deployment {dep.name!r} runs on {dep.engine}: add --engine emulator"
        )
    from servers.emulator import profile as profiles

    name = str(Path(o.profile).expanduser().resolve()) if o.profile.endswith(".toml") else o.profile
    try:
        profiles.load(name)
    except (profiles.ProfileError, OSError, KeyError, ValueError) as e:
        raise LoadgenError(f"--profile {o.profile}: {e}") from None
    return name


def _traces_from(o: SweepOptions) -> list[str] | None:
    """--traces-from: real sweeps' directories, only with --virtual and not with --replay."""
    if o.traces_from is None:
        return None
    if not o.virtual:
        raise LoadgenError("--traces-from predicts cells in virtual time: add --virtual")
    if o.replay is not None:
        raise LoadgenError("--traces-from predicts from other cells, --replay re-prices the same cell: give one")
    out = []
    for given in (x.strip() for x in o.traces_from.split(",") if x.strip()):
        where = Path(given).expanduser()
        if not (where / "manifest.json").is_file():
            raise LoadgenError(
                f"--traces-from {given}: no sweep there (no manifest.json); give sweeps' output directories"
            )
        out.append(str(where.resolve()))
    if not out:
        raise LoadgenError("--traces-from: give one or more sweeps' output directories, separated by commas")
    return out


def _time_scale(given: str | None, dep) -> str | float | None:
    """The sweep's time scale: on the emulator, --time-scale (auto or a number), else the
    deployment's own emulator_args --time-scale, else auto; None for a real server."""
    try:
        value = parse_scale(given, auto=True)
    except TimeScaleError as e:
        raise LoadgenError(str(e)) from None
    if not engines.emulates(dep.engine):
        if value is not None:
            raise LoadgenError(
                f"--time-scale runs the emulated GPU slower; deployment {dep.name!r} runs on "
                f"{dep.engine}, whose hardware keeps its own time: drop --time-scale "
                "(or add --engine emulator)"
            )
        return None
    if value is None and "--time-scale" in dep.emulator_args:
        i = dep.emulator_args.index("--time-scale")
        try:
            value = parse_scale(dep.emulator_args[i + 1], flag=f"deployment {dep.name!r} emulator_args --time-scale")
        except (IndexError, TimeScaleError) as e:
            raise LoadgenError(
                str(e)
                if isinstance(e, TimeScaleError)
                else f"deployment {dep.name!r}: emulator_args ends with --time-scale and no value"
            ) from None
    return "auto" if value is None else value


def _command(given: str | None) -> str | None:
    """A command name as given (found on PATH), a path made absolute (the plan is resumable
    from any directory)."""
    if given is None or "/" not in given:
        return given
    return str(Path(given).expanduser().resolve())


def max_model_len(dep) -> int | None:
    """The context the deployment's servers are started with (vLLM's --max-model-len, the
    smallest over its variants), None where its flags do not say."""
    found = []
    for v in dep.variants.values():
        args = list(dep.args) + list(v.args)
        for i, a in enumerate(args):
            value = args[i + 1] if a == "--max-model-len" and i + 1 < len(args) else a.partition("=")[2]
            if a == "--max-model-len" or a.startswith("--max-model-len="):
                if value.isdigit():
                    found.append(int(value))
    return min(found) if found else None


def _fit_answers(specs: list[str], dep, data_dir: str | None) -> list[str]:
    """Each workload's answers as the deployment serves them: one that sets no output= takes the
    deployment's own `output` where it has one (a CPU deployment's short answers); one whose
    max_tokens cannot fit the served --max-model-len is refused now, in one line, rather than
    every request of the sweep answered 400."""
    limit, out = max_model_len(dep), []
    for spec in specs:
        if dep.output and not any(p.strip().startswith("output=") for p in spec.split(",")[1:]):
            spec = f"{spec},output={dep.output}"
        tokens = _open(spec, data_dir).policy.tokens
        if limit is not None and tokens is not None and tokens >= limit:
            name = spec.split(",")[0]
            raise LoadgenError(
                f"--workloads {spec}: max_tokens {tokens} does not fit deployment {dep.name!r}'s "
                f"--max-model-len {limit} (vLLM would refuse every request): give {name},output=cap:N "
                f"(or fixed:N) with N well under {limit}, to leave room for the prompt"
            )
        out.append(spec)
    return out


def _open(spec: str, data_dir: str | None):
    try:
        return open_workload(spec, data_dir=data_dir)
    except WorkloadError as e:
        raise LoadgenError(f"--workloads: {e}") from None


def describe(plan: Plan, dep) -> str:
    """The plan in words (`loadgen sweep --dry-run`)."""
    cells = plan.cells()
    rounds = f" x {plan.repeats} repeats" if plan.repeats > 1 else ""
    lines = [f"PROFILE MISMATCH (--profile-anyway): {m}" for m in plan.profile_mismatch or []]
    lines += [
        f"{len(plan.variants)} variants x {len(plan.workloads)} workloads x {len(plan.levels)} levels{rounds} "
        f"= {len(cells)} cells ({'closed loop, concurrency' if plan.mode == 'closed' else 'open loop, req/s'} "
        f"{', '.join(f'{lv:g}' for lv in plan.levels)}), {plan.warmup} warm-up request(s) per cell",
        f"deployment {dep.name} ({dep.description}) on engine {dep.engine}",
    ]
    if plan.virtual:
        lines.append(
            "virtual time: every cell simulated on the emulator's engine as its command line "
            "configures it; no server starts (warm-up requests are not sent)"
        )
    if plan.time_scale is not None:
        lines.append(
            "time scale: "
            + (
                "auto (probed when the sweep starts: per level, the smallest that this machine holds in real time)"
                if plan.time_scale == "auto"
                else f"{plan.time_scale:g}x (the emulated GPU that much slower than its model)"
            )
        )
    for v, srv in servers(dep, plan).items():
        lines.append(f"  {v}: {srv['command']}")
    for spec, label in zip(plan.workloads, plan.workload_labels):
        lines.append(f"  workload {label}: {spec}")
    per = {f"{c.level:g}": plan.requests_for(c) for c in cells}
    lines.append(
        "measured requests per cell: "
        + (
            f"{plan.duration_s:g} s of sending"
            if plan.duration_s and plan.num_requests is None
            else ", ".join(f"{k}: {v}" for k, v in per.items())
        )
    )
    return "\n".join(lines)
