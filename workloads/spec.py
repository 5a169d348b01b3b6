"""One workload syntax everywhere:

    NAME[,key=value...]         a catalog entry (`loadgen workloads list`)
    FORMAT:PATH[,key=value...]  a file, e.g. spec_bench:question.jsonl,category=coding
    hf:DATASET_ID[,key=value]   the Hugging Face hub (optional `datasets` extra)
    synthetic:KIND[,key=value]  a generator, e.g. synthetic:random,input_len=512,output_len=128

Options every kind takes: `output=cap:N|fixed:N|reference` (max_tokens: N with the model
stopping on its own; exactly N with ignore_eos; the data's reference answer length),
`category=NAME` where records have categories, and the sampling every request asks for:
`temperature=T`, `top_p=P`, `top_k=K`, `seed=N` (Sampling). Paths cannot contain commas.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from workloads.errors import WorkloadError

SAMPLING_KEYS = ("temperature", "top_p", "top_k", "seed")
COMMON_OPTIONS = frozenset({"output", "category", *SAMPLING_KEYS})


@dataclass(frozen=True)
class WorkloadSpec:
    kind: str  # catalog | file | hub | synthetic
    name: str  # catalog name, format name, hub id, or synthetic kind
    path: str | None = None
    options: dict = field(default_factory=dict)
    text: str = ""


def _options(parts: list[str], text: str) -> dict[str, str]:
    out = {}
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise WorkloadError(f"workload {text!r}: option {part!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def parse(text: str) -> WorkloadSpec:
    text = text.strip()
    if not text:
        raise WorkloadError("empty workload; give a catalog name, FORMAT:PATH, hf:ID or synthetic:KIND")
    if text == "synthetic":  # the default before this syntax: random lengths
        return WorkloadSpec("synthetic", "random", text=text)
    first, _, options = text.partition(",")
    if ":" not in first:  # NAME[,key=value...]: a catalog entry
        opts = _options(options.split(","), text) if options else {}
        return WorkloadSpec("catalog", first.strip(), options=opts, text=text)
    head, _, rest = text.partition(":")
    parts = [p for p in rest.split(",")]
    target, opts = parts[0].strip(), _options(parts[1:], text)
    if not target:
        raise WorkloadError(f"workload {text!r}: nothing after {head}:")
    if head == "hf":
        return WorkloadSpec("hub", target, options=opts, text=text)
    if head == "synthetic":
        return WorkloadSpec("synthetic", target, options=opts, text=text)
    return WorkloadSpec("file", head, path=target, options=opts, text=text)


@dataclass(frozen=True)
class OutputPolicy:
    """How max_tokens is set: `cap` (N, the model stops on its own), `fixed` (exactly N with
    ignore_eos), `reference` (the data's answer length in words, with ignore_eos), or `data`
    (as the loader set it: the study's caps)."""

    mode: str = "data"
    tokens: int | None = None

    @classmethod
    def parse(cls, value: str | None) -> OutputPolicy:
        if value is None:
            return cls()
        if value == "reference":
            return cls("reference")
        mode, _, n = value.partition(":")
        if mode in ("cap", "fixed") and n.isdigit() and int(n) > 0:
            return cls(mode, int(n))
        raise WorkloadError(f"output={value!r}: use cap:N (model stops), fixed:N (ignore_eos) or reference")


@dataclass(frozen=True)
class Sampling:
    """What every request of a workload asks of the server's sampler, where the workload (or the
    command line) says it; None: not said here. A request's own (a generator's) comes next, and
    a temperature that nobody gives is 0, greedy, as the study and `vllm bench serve` decode:
    the server's default (vLLM's is 1, or the model's generation_config) never decides it."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None

    @classmethod
    def parse(cls, options: dict, where: str) -> Sampling:
        """From a workload's key=value options (strings) or the command line's values."""
        got: dict = {}
        for key, kind, ok, rule in (
            ("temperature", float, lambda v: v >= 0, "a number >= 0 (0: greedy)"),
            ("top_p", float, lambda v: 0 < v <= 1, "a number in (0, 1]"),
            ("top_k", int, lambda v: v >= -1, "an integer: -1 or 0 (every token) or >= 1"),
            ("seed", int, lambda v: True, "an integer"),
        ):
            raw = options.get(key)
            if raw is None:
                continue
            try:
                value = kind(raw)
            except (TypeError, ValueError):
                value = None
            if value is None or value != value or not ok(value) or isinstance(raw, bool):
                said = f"{where} {raw}" if where.startswith("--") else f"{where}: {key}={raw}"
                raise WorkloadError(f"{said}: give {rule}")
            got[key] = value
        return cls(**got)

    def given(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def with_sampling(text: str, sampling: dict, flag_names: dict[str, str]) -> str:
    """The workload `text` with the command line's sampling (`--temperature` ...) as its options;
    a workload that already says otherwise is refused, naming both (WorkloadError)."""
    given = {k: v for k, v in sampling.items() if v is not None}
    if not given:
        return text
    text = text.strip()
    if text == "synthetic":
        text = "synthetic:random"
    spec = parse(text)
    own = Sampling.parse(spec.options, f"workload {text!r}").given()
    for key, value in given.items():
        if key in own and own[key] != value:
            raise WorkloadError(
                f"{flag_names[key]} {value} and workload {text!r} ({key}={own[key]}) disagree: give one of them"
            )
    extra = "".join(f",{k}={v}" for k, v in given.items() if k not in own)
    return text + extra
