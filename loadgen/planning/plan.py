"""What a sweep runs: every variant x workload x load level, as cells, from the options.

Plain data: a Plan can be written into the manifest and read back, so `--resume` continues
exactly the sweep that was started."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

from servers.deployments import Deployment, default_port, render


class PlanError(ValueError):
    pass


def levels(text: str, *, integer: bool, flag: str) -> list[float]:
    """`1..256` (doubling from the low end: 1, 2, 4, ... 256), lists `1,4,16`, or both
    (`1..8,12`); sorted, without repeats."""
    out: set[float] = set()
    for part in (p.strip() for p in text.split(",")):
        lo, dots, hi = part.partition("..")
        try:
            a = float(lo)
            b = float(hi) if dots else a
        except ValueError:
            raise PlanError(f"{flag} {text!r}: {part!r} is not a number or a range like 1..256") from None
        if not (0 < a <= b < math.inf) or (integer and (a != int(a) or b != int(b))):
            kind = "whole numbers >= 1" if integer else "numbers > 0"
            raise PlanError(f"{flag} {text!r}: levels are {kind}, low..high with low <= high")
        x = a
        while x < b:
            out.add(x)
            x *= 2
        out.add(b)
    if integer:
        return sorted(int(x) for x in out)
    return sorted(out)


def split_workloads(texts: list[str]) -> list[str]:
    """`chat,code-edit,output=fixed:128` -> ['chat', 'code-edit,output=fixed:128']: a piece with
    '=' is an option of the workload before it (a workload itself never starts with key=)."""
    out: list[str] = []
    for text in texts:
        for piece in (p.strip() for p in text.split(",")):
            if not piece:
                continue
            if "=" in piece.split(":")[0]:
                if not out:
                    raise PlanError(f"--workloads {text!r}: option {piece!r} comes before any workload")
                out[-1] += "," + piece
            else:
                out.append(piece)
    if len(set(out)) != len(out):
        raise PlanError(f"--workloads lists a workload twice: {', '.join(out)}")
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "workload"


def labels(specs: list[str], names: list[str]) -> list[str]:
    """Short, file-safe labels: the workload's name where that is unique, else its spec."""
    out = []
    for spec, name in zip(specs, names):
        unique = sum(n == name for n in names) == 1
        out.append(_slug(name if unique else spec))
    if len(set(out)) != len(out):
        out = [f"{i}-{label}" for i, label in enumerate(out)]
    return out


def with_profile(dep, profile: str | None):
    """The deployment on the emulator pricing with `profile` (--profile), over its own emulator_args."""
    from dataclasses import replace

    return dep if profile is None else replace(dep, emulator_args=(*dep.emulator_args, "--profile", profile))


@dataclass(frozen=True)
class Cell:
    variant: str
    workload: str  # label
    level: float  # concurrency (closed loop), rate in req/s (open loop) or a trace's speed
    mode: str  # closed | open | trace
    repeat: int = 1  # which measurement of the cell (sweep --repeats); 1: the first

    @property
    def level_label(self) -> str:
        if self.mode == "trace":
            return f"x{self.level:g}"
        return f"c{int(self.level)}" if self.mode == "closed" else f"r{self.level:g}"

    @property
    def base_key(self) -> str:
        """The cell, whichever repeat: VARIANT/WORKLOAD/LEVEL."""
        return f"{self.variant}/{self.workload}/{self.level_label}"

    @property
    def key(self) -> str:
        """This measurement: the base key, and `.rN` for repeat N > 1 (its directory's name)."""
        return self.base_key + (f".r{self.repeat}" if self.repeat > 1 else "")


@dataclass
class Plan:
    deployment: str  # catalog name or TOML path
    engine: str | None  # override of the deployment's engine
    variants: list[str]
    workloads: list[str]  # specs
    workload_labels: list[str]
    mode: str  # closed | open
    levels: list[float]
    num_requests: int | None  # per cell; None: by level (requests_for)
    duration_s: float | None
    warmup: int
    seed: int = 0
    endpoint: str = "completions"
    arrival: str = "poisson"
    burstiness: float = 1.0
    request_timeout_s: float = 600.0
    extra_body: dict | None = None  # merged into every request's body (sweep --extra-body)
    token_ids: bool = False  # vLLM's return_token_ids asked for and kept (sweep --token-ids)
    goodput: dict | None = None  # per-request objectives in ms (sweep --goodput), judged in every cell
    data_dir: str | None = None
    gpus: list[int] = field(default_factory=lambda: [0])
    parallel: bool = False
    port: int | None = None  # None: 8000 for vLLM, a free port for the emulator
    executable: str | None = None  # the engine's server command (None: the deployment's, else its engine's own)
    baseline: str = "baseline"
    min_requests: int = 50  # with num_requests None: max(min_requests, per_user * C)
    per_user: int = 4
    workers: int = 1  # load-generating processes per cell (loadgen.backends.worker_processes)
    metrics_interval_s: float = 1.0  # seconds between /metrics samples in a cell (its timeline)
    # the emulated GPU's time scale (loadgen.load.timescale): None on a real server; "auto" or a number
    # on the emulator; with "auto", the scale the probe chose per level (level label -> scale)
    time_scale: str | float | None = None
    time_scales: dict[str, float] | None = None
    # the acceptance axis: these SD variants also run at each synthetic acceptance length
    # (servers.deployments.with_acceptance_lengths); None: no axis
    acceptance_templates: list[str] | None = None
    acceptance_lengths: list[float] | None = None
    repeats: int = 1  # each cell measured this many times (rounds, each on a fresh server)
    virtual: bool = False  # every cell simulated in virtual time, no server (loadgen.sweep.simulated)
    replay: str | None = None  # virtual: a real sweep (--token-ids) whose cells' requests each cell serves as served
    # virtual: real sweeps (--token-ids) whose other cells give each predicted cell its requests'
    # tokens and acceptance, never the cell itself (loadgen.sweep.predicted)
    traces_from: list[str] | None = None
    # the emulator's profiles fitted on another machine, used with --profile-anyway: one sentence each
    profile_mismatch: list[str] | None = None
    profile: str | None = None  # engine emulator: --profile, the cost profile every variant prices with
    # a load shape of its own instead of steady levels (--ramp, or any member of loadgen.shapes
    # that is not the closed or open loop): its options as given, one level (its peak)
    shape: dict | None = None

    def deployment_object(self):
        """The deployment the cells run on: loaded, on the plan's engine, with the acceptance
        axis's variants (DeploymentError for a bad one)."""
        from servers.deployments import load, on_engine, with_acceptance_lengths

        dep = with_profile(on_engine(load(self.deployment), self.engine), self.profile)
        if self.acceptance_lengths:
            dep = with_acceptance_lengths(dep, self.acceptance_templates or [], self.acceptance_lengths)
        return dep

    def cells(self) -> list[Cell]:
        """Round by round (--repeats; one round without), then variant by variant (one server
        each), workload, level (low to high)."""
        return [
            Cell(v, w, lv, self.mode, r)
            for r in range(1, self.repeats + 1)
            for v in self.variants
            for w in self.workload_labels
            for lv in self.levels
        ]

    def workload_spec(self, label: str) -> str:
        return self.workloads[self.workload_labels.index(label)]

    def requests_for(self, cell: Cell) -> int | None:
        """Measured requests in a cell: --num-requests; else, when no --duration bounds it,
        enough for every user to send several (closed loop) or min_requests (open loop)."""
        if self.num_requests is not None or self.duration_s is not None or cell.mode == "trace":
            return self.num_requests  # a trace: its window's requests (--num-requests caps them)
        if cell.mode == "closed":
            return max(self.min_requests, self.per_user * int(cell.level))
        return self.min_requests

    def workers_for(self, cell: Cell) -> int:
        """Worker processes for a cell's measurement: --workers, at most one per user."""
        if cell.mode == "trace":
            return 1  # a replay runs in one process (loadgen.shapes.trace)
        return min(self.workers, int(cell.level)) if cell.mode == "closed" else self.workers

    def scale_for(self, cell: Cell) -> float | None:
        """The time scale the cell runs at (None: a real server, not dilated)."""
        if self.time_scale is None:
            return None
        if self.time_scales:
            return self.time_scales.get(cell.level_label, max(self.time_scales.values()))
        return 1.0 if self.time_scale == "auto" else float(self.time_scale)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        d = dict(d)
        if "llama_server" in d:  # a plan written before engines were a family
            d["executable"] = d.pop("llama_server")
        return cls(**d)


def servers(dep: Deployment, plan: Plan) -> dict:
    """Each variant's server command as planned (the emulator's port is chosen at start; each
    cell's summary has the exact command it ran against)."""
    out = {}
    port = plan.port if plan.port is not None else (default_port(dep.engine) or 0)  # 0: chosen at start
    for v in plan.variants:
        la = render(dep, v, port=port, gpus=tuple(plan.gpus[: dep.tensor_parallel_size]), executable=plan.executable)
        out[v] = {
            "engine": la.engine,
            "command": la.shell(),
            "argv": list(la.argv),
            "env": la.env,
            "served_model_name": la.served_model_name,
        }
    return out
