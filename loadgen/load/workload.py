"""How another process opens the run's workload: its recipe rather than the object (a workload
holds generators, which do not cross processes). Worker processes and Ray actors open it
themselves with the run's seed, so every worker holds the same request sequence."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkloadRef:
    """How a worker opens the run's workload itself (workload objects hold generators, which
    do not cross processes)."""

    spec: str
    data_dir: str | None = None
    skip_bad: bool = False
    category: str | None = None
    tokenizer: str | None = None  # a tokenizer.json path (exact synthetic prompt lengths)

    def open(self):
        from workloads import open_workload

        tok = None
        if self.tokenizer:
            from loadgen.measures.tokens import load_tokenizer

            tok = load_tokenizer(self.tokenizer)
        return open_workload(
            self.spec, data_dir=self.data_dir, skip_bad=self.skip_bad, category=self.category, tokenizer=tok
        )
