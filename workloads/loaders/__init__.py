"""Data-set formats, one module each, behind `Format` (base.py)."""

from workloads.loaders.base import Format
from workloads.loaders.fastchat import MT_BENCH, SPEC_BENCH
from workloads.loaders.generic import CSV, JSONL, PARQUET
from workloads.loaders.gpqa import GPQA
from workloads.loaders.instructcoder import INSTRUCTCODER
from workloads.loaders.sharegpt import SHAREGPT
from workloads.loaders.simple import AIME, CNN_DAILYMAIL, GSM8K, HUMANEVAL

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        SPEC_BENCH,
        MT_BENCH,
        SHAREGPT,
        INSTRUCTCODER,
        GSM8K,
        HUMANEVAL,
        CNN_DAILYMAIL,
        AIME,
        GPQA,
        JSONL,
        CSV,
        PARQUET,
    )
}

__all__ = ["FORMATS", "Format"]
