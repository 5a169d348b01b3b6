"""A workload ready to send: its requests (or a generator), the output-length policy, and a
deterministic sample for a seed. `open_workload` turns any workload spec into one."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workloads import catalog, synthetic
from workloads.errors import WorkloadError
from workloads.loaders import FORMATS
from workloads.request import Request
from workloads.source import convert, file_rows, hub_format, hub_rows
from workloads.spec import COMMON_OPTIONS, OutputPolicy, Sampling, parse


@dataclass
class Workload:
    spec: str
    name: str
    source: str
    records: list[Request] | None = None  # a data set
    make: Callable[[int], Iterator[Request]] | None = None  # a generator: seed -> requests
    policy: OutputPolicy = field(default_factory=OutputPolicy)
    sampling: Sampling = field(default_factory=Sampling)  # the workload's own (spec options)
    skipped: int = 0
    bad: list[str] = field(default_factory=list)
    notice: str | None = None
    exact: Any = None  # workloads.lengths.ExactLengths when prompts are built to exact tokens
    # records read although optional metadata was absent or empty, by what was missing
    repairs: dict[str, int] = field(default_factory=dict)

    @property
    def sensitive(self) -> bool:
        return any(r.sensitive for r in self.records or ())

    @property
    def conversations(self) -> bool:
        """Whether its requests are conversations (later turns, sent after each reply): a data
        set's records, or a generator's first request."""
        if self.records is not None:
            return any(r.followups for r in self.records)
        first = next(iter(self.make(0)), None) if self.make is not None else None
        return bool(first is not None and first.followups)

    def categories(self) -> dict[str, int]:
        return dict(Counter(r.category for r in self.records or ()))

    def _apply(self, req: Request) -> Request:
        req = self._sampled(req)
        pol = self.policy
        if pol.mode == "cap" and pol.tokens is not None:
            return dataclasses.replace(req, max_tokens=pol.tokens, ignore_eos=False)
        if pol.mode == "fixed" and pol.tokens is not None:
            return dataclasses.replace(req, max_tokens=pol.tokens, ignore_eos=True)
        if pol.mode == "reference" and req.reference:
            return dataclasses.replace(req, max_tokens=max(1, len(req.reference.split())), ignore_eos=True)
        return req

    def _sampled(self, req: Request) -> Request:
        """Every request says its temperature: the workload's options first, then the request's
        own (a generator's), then 0 (greedy), never the server's default."""
        asked = {**req.sampling, **self.sampling.given()}
        asked.setdefault("temperature", 0.0)
        return req if asked == req.sampling else dataclasses.replace(req, sampling=asked)

    def sampling_record(self) -> dict:
        """The sampling its requests ask for, and what decided it (the summary's `sampling`)."""
        given = self.sampling.given()
        first = next(iter(self.records or ()), None) if self.make is None else next(iter(self.make(0)), None)
        own = dict(first.sampling) if first is not None else {}
        out: dict = {k: None for k in ("temperature", "top_p", "top_k", "seed")}
        out.update({**own, **given})
        if "temperature" in given:
            decided = "the workload (temperature= or --temperature)"
        elif "temperature" in own:
            decided = "the workload's requests"
        else:
            out["temperature"] = 0.0
            decided = "loadgen's default: greedy (the data sets no temperature)"
        out["temperature_from"] = decided
        unset = [k for k in ("top_p", "top_k", "seed") if out[k] is None]
        if unset and out["temperature"]:
            out["server_decides"] = unset  # sampled: what the server's defaults then decide
        return out

    def requests(self, num: int | None, seed: int) -> Iterator[Request]:
        """`num` requests (None: without end), the same for the same seed. A data set is sent
        in a seeded random order; asking for more than it holds repeats it in new orders, the
        repeats' ids marked `#2`, `#3`..."""
        if self.make is not None:
            gen = self.make(seed)
            return map(self._apply, gen if num is None else itertools.islice(gen, num))
        return itertools.islice(self._epochs(seed), num)

    def _epochs(self, seed: int) -> Iterator[Request]:
        rng = np.random.default_rng(seed)
        records = self.records or []
        for epoch in itertools.count(1):
            for i in rng.permutation(len(records)).tolist():
                req = self._apply(records[i])
                yield req if epoch == 1 else dataclasses.replace(req, id=f"{req.id}#{epoch}")

    def describe(self) -> dict:
        return {
            "spec": self.spec,
            "name": self.name,
            "source": self.source,
            "records": None if self.records is None else len(self.records),
            "skipped_bad_records": self.skipped,
            "output_policy": dataclasses.asdict(self.policy),
            "sampling": self.sampling_record(),
            "notice": self.notice,
            "token_lengths": self.token_lengths,
        }

    @property
    def token_lengths(self) -> str:
        if self.exact is not None:
            return "exact (tokenizer)" if self.exact.exact else "approximate (the tokenizer merges across words)"
        if self.make is not None:
            return "approximate (1 token per word)"
        return "as in the data"


def _check_options(spec, allowed: frozenset) -> None:
    unknown = set(spec.options) - allowed - COMMON_OPTIONS
    if unknown:
        raise WorkloadError(
            f"workload {spec.text!r}: unknown option {sorted(unknown)[0]!r}; valid: "
            f"{', '.join(sorted(allowed | COMMON_OPTIONS))}"
        )
    if spec.options.get("turns", "first") not in ("first", "all", "session"):
        raise WorkloadError(
            f"workload {spec.text!r}: turns={spec.options['turns']!r}; use turns=first (the first "
            "turn), all (every turn, earlier answers from the data) or session (conversations)"
        )


def _filter(w: Workload, category: str | None, has_categories: bool) -> None:
    if category is None:
        return
    if w.records is None or not has_categories:
        raise WorkloadError(f"workload {w.spec!r} has no categories to filter by; drop --category")
    kept = [r for r in w.records if r.category == category]
    if not kept:
        raise WorkloadError(
            f"workload {w.spec!r} has no records in category {category!r}; "
            f"categories: {', '.join(sorted(w.categories()))}"
        )
    w.records = kept


def open_workload(
    text: str, *, data_dir: str | None = None, skip_bad: bool = False, category: str | None = None, tokenizer=None
) -> Workload:
    spec = parse(text)
    policy = OutputPolicy.parse(spec.options.get("output"))
    category = spec.options.get("category", category)
    sampling = Sampling.parse(spec.options, f"workload {text!r}")
    w = _open(spec, text, policy, data_dir, skip_bad, category, tokenizer)
    w.sampling = sampling
    return w


def _open(spec, text: str, policy: OutputPolicy, data_dir, skip_bad: bool, category, tokenizer) -> Workload:
    if spec.kind == "catalog":
        return _from_catalog(spec, data_dir, skip_bad, category)
    if spec.kind == "synthetic":
        opts = {k: v for k, v in spec.options.items() if k not in COMMON_OPTIONS}
        try:
            make = synthetic.generator(spec.name, opts, 0, tokenizer)
        except ValueError as e:
            raise WorkloadError(str(e)) from None
        if category is not None:
            raise WorkloadError(f"workload {text!r} has no categories to filter by; drop --category")
        exact = None
        if tokenizer is not None and spec.name == "random":
            from workloads.lengths import for_tokenizer

            exact = for_tokenizer(tokenizer, synthetic._WORDS_TUPLE)
        return Workload(text, f"synthetic:{spec.name}", text, make=make, policy=policy, exact=exact)
    if spec.kind == "hub":
        fmt, config, split = hub_format(spec.name, spec.options)
        _check_options(spec, fmt.options | {"format", "config", "split"})
        loaded = convert(hub_rows(spec.name, config, split), fmt, spec.options, skip_bad)
    else:
        found = FORMATS.get(spec.name)
        if found is None:
            raise WorkloadError(
                f"unknown workload format {spec.name!r} in {text!r}; formats: "
                f"{', '.join(FORMATS)} (or hf:ID, synthetic:KIND, a catalog name)"
            )
        fmt = found
        _check_options(spec, fmt.options)
        try:
            loaded = convert(file_rows(fmt, spec.path or ""), fmt, spec.options, skip_bad)
        except WorkloadError as e:
            raise WorkloadError(f"{e} (workload {text!r})" if str(e).startswith("no ") else str(e)) from None
    w = Workload(text, fmt.name, text, records=loaded.requests, policy=policy, skipped=loaded.skipped, bad=loaded.bad)
    if fmt.categories:
        missing = sum(1 for r in loaded.requests if not r.category)
        if missing:
            w.repairs["no category"] = missing
    _filter(w, category, fmt.categories)
    return w


def _from_catalog(spec, data_dir: str | None, skip_bad: bool, category: str | None) -> Workload:
    e = catalog.entry(spec.name)
    _check_options(spec, frozenset())
    output = spec.options.get("output", e.output)
    reasons = []
    for src, reason in catalog.candidates(e, catalog.data_dir(data_dir)):
        if reason is not None:
            reasons.append(reason)
            continue
        try:
            w = open_workload(src, skip_bad=skip_bad, category=category)
        except WorkloadError as err:
            if src.startswith("hf:"):  # offline or refused: fall through to the stand-in
                reasons.append(str(err))
                continue
            raise
        break
    else:
        w = open_workload(e.standin, category=category)
        w.notice = f"{e.name}: using the offline stand-in {e.standin} (" + "; ".join(dict.fromkeys(reasons)) + ")"
    if w.records is not None and len(w.records) > e.sample:  # the catalog's sample, fixed
        keep = np.random.default_rng(0).permutation(len(w.records))[: e.sample]
        w.records = [w.records[i] for i in sorted(keep.tolist())]
    w.spec, w.name = spec.text, e.name
    w.policy = OutputPolicy.parse(output)
    return w
