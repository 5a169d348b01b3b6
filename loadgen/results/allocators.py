"""The allocators' settings that keep a run's memory flat with its length (issue 46; measured
in docs/performance.md, "A run's memory, flat with its length").

Two allocators, not loadgen's own data, made the end of a run grow with the run:
- Arrow's default pool (mimalloc) keeps what it frees for reuse: writing requests.parquet from
  the journal held some 100 MB more at a 60-second run's end than at a 15-second run's, all of
  it freed. Arrow's system pool returns it (ARROW_DEFAULT_MEMORY_POOL, read when Arrow first
  allocates: set in loadgen/__init__.py, where loadgen is imported, unless the user chose one).
- glibc raises its mmap threshold each time a large block is freed, up to 32 MiB; from then on
  the summary's per-batch arrays (megabytes each) come from the heap, where they fragment and
  stay. A fixed threshold (mallopt M_MMAP_THRESHOLD, 128 KiB: glibc's start) keeps them mapped
  and returned on free. Set for the end of a run (`end_of_run`), not for the load, whose
  allocations are small and many."""

from __future__ import annotations

import ctypes
import sys

_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
_done = False


def end_of_run() -> None:
    """Large blocks mapped and unmapped from now on (glibc only; elsewhere nothing to do)."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return
    _done = True
    try:
        ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):  # not glibc (musl has no mallopt of this kind)
        pass
