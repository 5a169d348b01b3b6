"""`loadgen fit` as a job: a cost profile from the user's own real sweeps.

One pipeline: the engine's steps read off every cell's chunk times (loadgen.measures.enginesteps),
the target's roofline forward on the baseline cells' steps (servers/emulator/costfit.py's
fit_forward: memory-bound below the knee, compute-bound above; every cell weighs alike, whatever
its step count, so the lightest load does not price every other), each drafter on its own cells'
residuals over it (fit_drafter, non-negative), a draft model's own forward on it served alone
(`alone`: a sweep of the drafter model; without one, its terms come from the SD cells and the
record says they cannot be told from SD mode's); each model drafter's acceptance per kind of
request fitted from its cells' own traces (servers/emulator/acceptfit.py); the machine from
the sweeps' manifests (servers/emulator/fingerprint.py). One writer: costfit.profile_text.
bench/qwen_predict.py calls this."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from loadgen.errors import LoadgenError
from loadgen.fit.cells import FitCell, Sweep, read_sweep


@dataclass
class FitJob:
    sweeps: list[Path]
    output: Path  # the profile file written (.toml)
    alone: list[Path] = field(default_factory=list)  # sweeps of the draft model served alone
    description: str | None = None
    force: bool = False  # overwrite an existing output
    acceptance: bool = True  # fit each model drafter's acceptance from its traces (needs --token-ids)


@dataclass
class Fitted:
    output: Path
    text: str
    record: list[str]
    forward: tuple
    drafters: dict
    machine: dict


def _check(job: FitJob, sweeps: list[Sweep]) -> None:
    if job.output.suffix != ".toml":
        raise LoadgenError(f"--output {job.output}: a profile is a .toml file; give a name ending in .toml")
    if job.output.exists() and not job.force:
        raise LoadgenError(f"--output {job.output} exists: give a new name, or --force to replace it")
    cells = [c for s in sweeps for c in s.cells]
    base = {c.level for c in cells if c.method is None}
    sd = defaultdict(set)
    for c in cells:
        if c.method is not None:
            sd[c.method].add(c.level)
    if len(base) < 2 or not any(len(v) >= 2 for v in sd.values()):
        have = f"baseline at {len(base)} level(s), " + (
            ", ".join(f"{m} at {len(v)}" for m, v in sd.items()) or "no SD variant"
        )
        raise LoadgenError(
            f"loadgen fit needs a baseline and at least one SD variant, each at two or more levels; "
            f"the sweeps hold {have}: sweep more levels (e.g. --concurrency 1,4)"
        )
    models = {s.model for s in sweeps}
    if len(models) > 1:
        raise LoadgenError(f"the sweeps serve different models ({', '.join(sorted(models))}): fit one model at a time")


def _balanced(cells: list[FitCell]) -> np.ndarray:
    """Each step's weight in the fit: 1 / its cell's steps, so every cell counts alike (a 1-user
    cell takes four times the steps of a 4-user one for the same tokens: by steps alone the
    lightest load would price every other)."""
    return np.concatenate([np.full(len(c.steps), 1.0 / max(len(c.steps), 1)) for c in cells])


def _argv(manifest: dict) -> list[str]:
    """The first server's command line the sweep recorded (its flags: --dtype, --max-model-len)."""
    servers: dict = manifest.get("servers") or {}
    first: dict = next(iter(servers.values()), {})
    return list(first.get("argv") or [])


def machine_of(sweep: Sweep) -> dict:
    """The machine and deployment a sweep ran on, as a profile's [machine] names them."""
    m = sweep.manifest
    host, dep, versions = m.get("host") or {}, m.get("deployment") or {}, m.get("versions") or {}
    engine = dep.get("engine")
    argv = _argv(m)
    dtype = argv[argv.index("--dtype") + 1] if "--dtype" in argv else None
    served = argv[argv.index("--served-model-name") + 1] if "--served-model-name" in argv else dep.get("model")
    from servers import engines

    try:
        family = engines.get(engine or "")
        package, on_gpu = next(iter(family.packages), None), family.resource == "GPU"
    except engines.UnknownEngine:
        package, on_gpu = None, False
    out = {
        "accelerator": (host.get("gpu") or "a GPU not named") if on_gpu else "cpu",
        "cpu_model": host.get("cpu_model"),
        "cpu_kind": host.get("cpu_kind"),
        "cores": host.get("cores", host.get("cpus")),
        "engine": engine,
        "engine_version": versions.get(package) if package else None,
        "dtype": dtype,
        "model": served,
    }
    return {k: v for k, v in out.items() if v is not None}


def _acceptance(cells: list[FitCell]) -> tuple[dict, list[str]]:
    """method -> kind -> (RegimeParams, k), fitted from the cells' own traces; and what was fitted
    or could not be, in words."""
    from loadgen.whatif.acceptance_traces import TraceError
    from loadgen.whatif.fromrun import MODEL_DRAFTERS, from_results
    from servers.emulator.acceptfit import fit_regime

    groups: dict[tuple[str, str, int], list] = defaultdict(list)
    said = []
    for c in cells:
        if c.method not in MODEL_DRAFTERS:
            continue
        if not c.kind:
            said.append(f"acceptance: {c.key} not fitted: its workload {c.workload!r} cannot be opened here")
            continue
        try:
            traces, _ = from_results(c.path, drafter=(c.method, c.k))
        except TraceError as e:
            said.append(f"acceptance: {c.key} not read ({e})")
            continue
        groups[(c.method, c.kind, c.k)] += [t.drafters[c.method].acc_len for t in traces if c.method in t.drafters]
    out: dict[str, dict] = defaultdict(dict)
    for (method, kind, k), arrays in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        if kind in out[method] or not arrays:
            continue  # the kind's most traced k only
        params, fig = fit_regime(arrays, k)
        out[method][kind] = (params, k)
        m, f = fig["measured"]["tokens_per_step"], fig["fitted"]["tokens_per_step"]
        said.append(
            f"acceptance {method} on {kind} from {len(arrays)} traced requests at k {k}: tokens per step "
            + ", ".join(f"k {j} {f[j]:.2f} ({m[j]:.2f} measured)" for j in sorted(m))
        )
    return dict(out), said


def fit(job: FitJob) -> Fitted:
    """Fit, write the profile, and return it with its record (LoadgenError, one line, for input
    that cannot make one)."""
    from loadgen.fit.record import record
    from servers.emulator import costfit

    try:
        import scipy.optimize  # noqa: F401  (the fits' non-negative least squares)
    except ImportError:
        raise LoadgenError("loadgen fit needs scipy: pip install 'loadgen[fit]'") from None
    sweeps = [read_sweep(Path(p)) for p in job.sweeps]
    _check(job, sweeps)
    cells = [c for s in sweeps for c in s.cells]
    base = [c for c in cells if c.method is None]
    forward = costfit.fit_forward(np.concatenate([c.steps for c in base]), _balanced(base))
    alone_cells = [c for p in job.alone for c in read_sweep(Path(p)).cells if c.method is None]
    alone = (
        costfit.fit_forward(np.concatenate([c.steps for c in alone_cells]), _balanced(alone_cells))
        if alone_cells
        else None
    )
    drafters = {}
    for method in dict.fromkeys(c.method for c in cells if c.method is not None):
        mine = [c for c in cells if c.method == method]
        steps = np.concatenate([c.steps for c in mine])
        ks = np.concatenate([np.full(len(c.steps), c.k) for c in mine])
        own = alone[0] if alone is not None and method == "draft_model" else None
        drafters[method] = costfit.fit_drafter(method, ks, steps, forward[0], own, _balanced(mine))
    accepted, acc_said = _acceptance(cells) if job.acceptance else ({}, [])
    machine = machine_of(next(s for s in sweeps if any(c.method is None for c in s.cells)))
    lines = record(cells, alone_cells, forward, drafters, alone, machine) + acc_said
    argv = _argv(sweeps[0].manifest)
    text = costfit.profile_text(
        description=job.description or f"{machine.get('model', sweeps[0].model)}, fitted by loadgen fit",
        models=[machine.get("model", sweeps[0].model)],
        max_model_len=int(argv[argv.index("--max-model-len") + 1]) if "--max-model-len" in argv else 131072,
        forward=forward,
        drafters=drafters,
        source=f"loadgen fit on {', '.join(str(p) for p in job.sweeps)}",
        machine=machine,
        acceptance=accepted,
        record=lines,
    )
    job.output.parent.mkdir(parents=True, exist_ok=True)
    job.output.write_text(text)
    return Fitted(job.output, text, lines, forward, drafters, machine)
