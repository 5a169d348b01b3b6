"""Reading acceptance trace files as they are found (docs/whatif.md, "Files from elsewhere").

Files others publish have quirks the study's own simulator accepts, so they are read, not
refused: each is repaired the way that simulator reads it, and every repair is counted (in the
notes `whatif` prints and in whatif.json):
- `acc_len[i]` counting drafts past the request's last token: clipped to n - i;
- an `acc_<method>.acc_len` longer or shorter than `generated_token_ids`: the method's own
  array length is the request's output length (as the study's simulator takes it); drafters
  whose arrays disagree are cut to the shortest; token ids past the known ones are unknown;
- no `proposed` for the n-gram drafter: derived by replaying prompt lookup (`ngram_lookup`,
  vLLM's 3..7 by default, as the study ran it) over the prompt and the generated tokens;
- `acc` without a method (read as `acc_as`), an `acc_<method>` given as a bare array, no `id`.
A line that cannot be a trace (broken JSON, wrong types, NaN, values below 1, no tokens) is
skipped and counted by reason, with the first line of each; a file with nothing readable, or
none at all, is one TraceError line.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from loadgen.whatif.acceptance_traces import PREFIX, Acceptance, Trace, TraceError, ngram

NGRAM_LOOKUP = (3, 7)  # vLLM's prompt_lookup_min/max as the study ran it


class _Skip(ValueError):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass
class Reading:
    """What reading one trace file took."""

    path: str
    lines: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> lines
    first: dict = field(default_factory=dict)  # reason -> "line N: detail"
    repairs: Counter = field(default_factory=Counter)  # repair -> requests (or values, where said)

    def skip(self, no: int, e: _Skip) -> None:
        self.skipped[e.reason] += 1
        self.first.setdefault(e.reason, f"line {no}: {e}")

    def notes(self) -> list[str]:
        out = [f"{self.path}: {r}: {n}" for r, n in self.repairs.items()]
        out += [f"{self.path}: skipped {n} line(s), {r} (first: {self.first[r]})" for r, n in self.skipped.items()]
        return out

    def to_json(self) -> dict:
        return {
            "lines": self.lines,
            "read": self.lines - sum(self.skipped.values()),
            "skipped": {r: {"lines": n, "first": self.first[r]} for r, n in self.skipped.items()},
            "repairs": dict(self.repairs),
        }


def _whole(values, what: str, lo: int | None = None) -> list[int]:
    """A list of whole numbers (floats that are whole count too), each >= lo when given."""
    if not isinstance(values, list):
        raise _Skip("wrong types", f"{what} is {type(values).__name__}, not a list")
    out = []
    for v in values:
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or (isinstance(v, float) and not (math.isfinite(v) and v.is_integer()))
        ):
            raise _Skip("wrong types", f"{what} holds {v!r}, not a whole number")
        v = int(v)
        if lo is not None and v < lo:
            raise _Skip("values out of range", f"{what} holds {v}, below {lo}")
        out.append(v)
    return out


def _drafters(d: dict, acc_as: str, fixes: Counter) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for key, value in d.items():
        if key == "acc":
            method = acc_as
            fixes[f"'acc' without a method read as {PREFIX}{acc_as}"] += 1
        elif key.startswith(PREFIX) and len(key) > len(PREFIX):
            method = key[len(PREFIX) :]
        else:
            continue
        if isinstance(value, list):
            value = {"acc_len": value}
            fixes[f"{PREFIX}<method> given as a bare array: read as its acc_len"] += 1
        if not isinstance(value, dict) or "acc_len" not in value:
            raise _Skip("wrong types", f'{key} must be an object with "acc_len"')
        acc = _whole(value["acc_len"], f"{key}.acc_len", lo=1)
        proposed = value.get("proposed")
        found[method] = {
            "acc_len": acc,
            "proposed": None if proposed is None else _whole(proposed, f"{key}.proposed", 0),
            "censored_at": value.get("censored_at"),
            "source": value.get("source"),
        }
    if not found:
        raise _Skip("no acceptance", f"no {PREFIX}<method> object")
    return found


def _trace(d, no: int, acc_as: str, lookup: tuple[int, int], fixes: Counter) -> Trace:
    """One line's trace; its repairs counted in `fixes` (kept only if the line is read)."""
    if not isinstance(d, dict):
        raise _Skip("not a JSON object", f"a {type(d).__name__}")
    if "id" not in d:
        fixes["no id: named by its line"] += 1
    if "prompt_token_ids" not in d:
        raise _Skip("no prompt_token_ids", "no prompt_token_ids (the prompt's length prices its prefill)")
    prompt = _whole(d["prompt_token_ids"], "prompt_token_ids")
    known = _whole(d.get("generated_token_ids", []), "generated_token_ids")
    drafters = _drafters(d, acc_as, fixes)
    lengths = {len(a["acc_len"]) for a in drafters.values()}
    n = min(lengths)
    if len(lengths) > 1:
        fixes["drafters' acc_len arrays of different lengths: cut to the shortest"] += 1
    if n != len(known):
        fixes["output length taken from acc_len (generated_token_ids of another length)"] += 1
    if n == 0:
        raise _Skip("no generated tokens", "empty acc_len")
    output = known[:n] + [0] * max(0, n - len(known))  # past the known ids: unknown tokens
    out: dict[str, Acceptance] = {}
    clipped = 0
    for method, a in drafters.items():
        accepted = [min(v, n - i) for i, v in enumerate(a["acc_len"][:n])]
        clipped += sum(v > c for v, c in zip(a["acc_len"], accepted))
        acc = np.array(accepted, dtype=np.int64)
        proposed = a["proposed"]
        if proposed is not None and len(proposed) < n:
            fixes[f"{PREFIX}{method}.proposed shorter than the output: dropped"] += 1
            proposed = None
        if proposed is None and method == "ngram" and len(known) >= n:
            found = ngram(prompt, output, min_n=lookup[0], max_n=lookup[1]).proposed
            proposed = None if found is None else found.tolist()
            fixes[f"n-gram proposed derived by prompt lookup {lookup[0]}..{lookup[1]} over the token ids"] += 1
        drafts: np.ndarray | None = None
        if proposed is not None:
            p = np.array([min(v, n) for v in proposed[:n]], dtype=np.int64)  # more than n: as good as n
            if (p < acc - 1).any():
                fixes[
                    f"{PREFIX}{method}.proposed raised to acc_len - 1 where fewer drafts were offered than accepted"
                ] += 1
                p = np.maximum(p, acc - 1)
            drafts = p
        censored = a["censored_at"]
        if censored is not None and (isinstance(censored, bool) or not isinstance(censored, int) or censored < 1):
            fixes[f"{PREFIX}{method}.censored_at not a positive whole number: dropped"] += 1
            censored = None
        source = a["source"] if isinstance(a["source"], str) else None
        out[method] = Acceptance(acc, drafts, censored, source)
    if clipped:
        fixes["requests with acc_len values past their end, clipped to n - i"] += 1
        fixes["acc_len values clipped"] += clipped
    end = d.get("reasoning_end", 0)
    if isinstance(end, bool) or not isinstance(end, int) or end < 0:
        fixes["reasoning_end not a whole number >= 0: dropped (no thinking)"] += 1
        end = 0
    elif end > n:
        fixes["reasoning_end past the output: cut to its length"] += 1
        end = n
    return Trace(str(d.get("id", f"line-{no}")), prompt, output, out, end)


def read(
    path: str | Path, *, acc_as: str = "eagle", ngram_lookup: tuple[int, int] = NGRAM_LOOKUP
) -> tuple[list[Trace], Reading]:
    """Every readable trace in a JSONL file and what reading it took; TraceError (one line) for
    a file that cannot be read or holds no trace at all."""
    reading = Reading(str(path))
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise TraceError(f"cannot read traces {str(path)!r}: {e.strerror or e}") from None
    if not data.strip():
        raise TraceError(f"{path} is empty; give a JSONL file of acceptance traces (docs/whatif.md)")
    out, undecodable = [], 0
    for no, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        reading.lines += 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            undecodable += 1
            reading.skip(no, _Skip("not UTF-8 text", "bytes that are not UTF-8"))
            continue
        fixes: Counter = Counter()
        try:
            out.append(_trace(json.loads(line), no, acc_as, ngram_lookup, fixes))
            reading.repairs.update(fixes)
        except _Skip as e:
            reading.skip(no, e)
        except ValueError as e:  # json's: a truncated or broken line
            reading.skip(no, _Skip("not valid JSON", str(e)))
        except RecursionError:
            reading.skip(no, _Skip("not valid JSON", "nested too deep"))
    if not out:
        if undecodable == reading.lines:
            raise TraceError(f"{path} is not a text file of JSON lines (acceptance traces, docs/whatif.md)")
        first = next(iter(reading.first.items()))
        raise TraceError(f"{path}: no readable trace in {reading.lines} line(s); first: {first[1]} ({first[0]})")
    return out, reading
