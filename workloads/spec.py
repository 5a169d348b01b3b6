"""One workload syntax everywhere:

    NAME[,key=value...]         a catalog entry (`loadgen workloads list`)
    FORMAT:PATH[,key=value...]  a file, e.g. spec_bench:question.jsonl,category=coding
    hf:DATASET_ID[,key=value]   the Hugging Face hub (optional `datasets` extra)
    synthetic:KIND[,key=value]  a generator, e.g. synthetic:random,input_len=512,output_len=128

Options every kind takes: `output=cap:N|fixed:N|reference` (max_tokens: N with the model
stopping on its own; exactly N with ignore_eos; the data's reference answer length) and
`category=NAME` where records have categories. Paths cannot contain commas.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workloads.errors import WorkloadError

COMMON_OPTIONS = frozenset({"output", "category"})


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
