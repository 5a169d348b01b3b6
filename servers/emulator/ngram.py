"""Prompt-lookup (n-gram) drafting, exactly as vLLM's NgramProposer decides it.

Find the longest n-gram, `prompt_lookup_min <= n <= prompt_lookup_max`, that ends the context
and also occurs earlier in it; among equally long ones take the earliest; propose the up-to-k
tokens that followed it. The context is the request's own prompt plus its output so far.

`NgramIndex` keeps, per n, the earliest start of every n-gram seen, updated incrementally as
tokens are appended, so a lookup costs a few dictionary probes, not a scan. This is the
engine's drafter; `loadgen` (what-if analysis) and tests import it from here.
"""
from __future__ import annotations


class NgramIndex:
    __slots__ = ("min_n", "max_n", "_tokens", "_first", "_indexed")

    def __init__(self, min_n: int, max_n: int, tokens=()) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= prompt_lookup_min <= prompt_lookup_max, got {min_n}, {max_n}")
        self.min_n, self.max_n = min_n, max_n
        self._tokens: list[int] = list(tokens)
        self._first: dict[tuple, int] = {}  # n-gram -> earliest start
        self._indexed = 0  # n-grams ending before this position are indexed

    @property
    def tokens(self) -> list[int]:
        return self._tokens

    def extend(self, tokens) -> None:
        self._tokens.extend(tokens)

    def _index_upto(self, end: int) -> None:
        """Index every n-gram that ends before position `end`."""
        toks, first = self._tokens, self._first
        lo, hi = self.min_n, self.max_n
        for e in range(self._indexed, end):  # n-grams ending at e (inclusive)
            for n in range(lo, min(hi, e + 1) + 1):
                key = tuple(toks[e - n + 1:e + 1])
                if key not in first:
                    first[key] = e - n + 1
        self._indexed = max(self._indexed, end)

    def match(self) -> int | None:
        """Where the drafts for the next position would start in the context (the token after
        the matched n-gram's earliest occurrence), or None when nothing matches."""
        toks = self._tokens
        total = len(toks)
        if total < self.min_n:
            return None
        self._index_upto(total - 1)  # occurrences must end before the suffix's last token
        first = self._first
        for n in range(min(self.max_n, total - 1), self.min_n - 1, -1):
            start = first.get(tuple(toks[total - n:]))
            if start is not None:
                return start + n
        return None

    def propose(self, k: int) -> list[int]:
        """The drafts for the next position: up to k tokens, or [] when nothing matches."""
        begin = self.match() if k > 0 else None
        return [] if begin is None else self._tokens[begin:begin + k]


def acceptance_lengths(prompt, output, *, min_n: int, max_n: int, k: int,
                       with_matches: bool = False):
    """For every output position i: the tokens one n-gram step starting there would emit
    (accepted drafts + the bonus token), proposing up to k drafts. With `with_matches`, also
    how many drafts were proposed there (0: no match; a draft then rejected still costs)."""
    index = NgramIndex(min_n, max_n, prompt)
    toks = index.tokens
    out, matched = [], []
    n_out = len(output)
    for i in range(n_out):
        begin = index.match() if k > 0 else None
        offered = 0 if begin is None else min(k, len(toks) - begin)
        accepted = 0  # compared in place: the drafts are toks[begin:begin + offered]
        while accepted < offered and i + accepted < n_out and toks[begin + accepted] == output[i + accepted]:
            accepted += 1
        out.append(accepted + 1)
        matched.append(offered)
        index.extend((output[i],))
    return (out, matched) if with_matches else out


def matched_share_of_rejections(traces, k: int) -> float:
    """Stepping with k drafts through (acceptance lengths, matched) traces: of the steps that
    accepted nothing, the share that had proposed drafts (the study's p)."""
    zero = matched = 0
    for acc, m in traces:
        i, n = 0, len(acc)
        while i < n:
            e = min(acc[i], k + 1, n - i)
            if e == 1:
                zero += 1
                matched += bool(m[i])
            i += e
    return matched / zero if zero else float("nan")
