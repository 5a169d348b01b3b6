"""Records from a file or the hub, converted by their format, bad ones raised or skipped."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from workloads import readers
from workloads.errors import BadRecord, WorkloadError
from workloads.loaders import FORMATS, Format
from workloads.request import Request


@dataclass
class Loaded:
    requests: list[Request]
    skipped: int = 0
    bad: list[str] = field(default_factory=list)  # where the first skipped records were


def convert(rows: Iterable[tuple[str, object]], fmt: Format, opts: dict, skip_bad: bool) -> Loaded:
    out = Loaded([])
    for index, (where, row) in enumerate(rows):
        try:
            if isinstance(row, BadRecord):
                raise row
            assert isinstance(row, dict)  # the readers yield records or BadRecords
            out.requests.extend(fmt.convert(where, row, index, opts))
        except BadRecord as e:
            if not skip_bad:
                raise WorkloadError(f"{e}; fix the record or pass --skip-bad to skip bad records") from None
            out.skipped += 1
            if len(out.bad) < 5:
                out.bad.append(str(e))
    if not out.requests:
        raise WorkloadError(f"no usable records ({out.skipped} bad)" if out.skipped else "no records")
    return out


def file_rows(fmt: Format, path: str) -> Iterator[tuple[str, object]]:
    if fmt.file_kind == "jsonl":
        return readers.jsonl(path)
    if fmt.file_kind == "json":
        return readers.json_list(path)
    return readers.records(path)


def hub_rows(hub_id: str, config: str | None, split: str) -> Iterator[tuple[str, dict]]:
    """Rows of a hub data set through the optional `datasets` package."""
    try:
        import datasets
    except ImportError:
        raise WorkloadError(
            f"hf:{hub_id} needs the 'datasets' package: pip install 'loadgen[hf]'; "
            "or download the data and pass FORMAT:PATH"
        ) from None
    try:
        ds = datasets.load_dataset(hub_id, config, split=split)
    except Exception as e:  # network, access and naming errors all land here
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise WorkloadError(
            f"cannot load hf:{hub_id} ({first}); check the network and access "
            "(gated data sets need `huggingface-cli login`), or pass FORMAT:PATH"
        ) from None
    for i, row in enumerate(ds):
        yield f"hf:{hub_id}[{i}]", dict(row)


def hub_format(hub_id: str, opts: dict) -> tuple[Format, str | None, str]:
    if "format" in opts:
        fmt = FORMATS.get(opts["format"])
        if fmt is None:
            raise WorkloadError(f"hf:{hub_id}: unknown format {opts['format']!r}; valid: {', '.join(FORMATS)}")
        return fmt, opts.get("config"), opts.get("split", "train")
    for fmt in FORMATS.values():
        if hub_id in fmt.hub:
            config, split = fmt.hub[hub_id]
            return fmt, opts.get("config", config), opts.get("split", split)
    known = sorted(k for f in FORMATS.values() for k in f.hub)
    raise WorkloadError(
        f"hf:{hub_id}: not a data set loadgen knows ({', '.join(known)}); "
        "add format=NAME (and a field mapping for jsonl)"
    )
