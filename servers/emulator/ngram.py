"""Prompt-lookup (n-gram) drafting, exactly as vLLM's NgramProposer decides it.

Find the longest n-gram, `prompt_lookup_min <= n <= prompt_lookup_max`, that ends the context
and also occurs earlier in it; among equally long ones take the earliest; propose the up-to-k
tokens that followed it. The context is the request's own prompt plus its output so far.

`NgramIndex` keeps, for every `prompt_lookup_min`-gram seen, the starts of its occurrences in
order, updated incrementally as tokens are appended. A lookup takes the occurrences of the
context's last `min` tokens and extends each match backwards (up to `max`): the first that
reaches `max`, else the longest, earliest among equals. One dictionary probe per token appended
and per lookup, plus a scan of that n-gram's occurrences, usually a handful. This is the
engine's drafter; `loadgen` (what-if analysis) and tests import it from here.
"""

from __future__ import annotations


class NgramIndex:
    __slots__ = ("min_n", "max_n", "_tokens", "_starts", "_indexed")

    def __init__(self, min_n: int, max_n: int, tokens=()) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= prompt_lookup_min <= prompt_lookup_max, got {min_n}, {max_n}")
        self.min_n, self.max_n = min_n, max_n
        self._tokens: list[int] = list(tokens)
        self._starts: dict[tuple, list[int]] = {}  # min-gram -> starts of its occurrences, ascending
        self._indexed = 0  # min-grams starting before this position are indexed

    @property
    def tokens(self) -> list[int]:
        return self._tokens

    def extend(self, tokens) -> None:
        self._tokens.extend(tokens)

    def prepare(self) -> NgramIndex:
        """Index what is there now (a request's prompt, when it arrives), so that the first
        lookup, which comes for many requests at once when a prefill step ends, is cheap."""
        self._index_upto(len(self._tokens) - 1)
        return self

    def _index_upto(self, end: int) -> None:
        """Index every min-gram that ends before position `end`."""
        toks, starts, lo = self._tokens, self._starts, self.min_n
        for s in range(self._indexed, end - lo + 1):
            key = tuple(toks[s : s + lo])
            found = starts.get(key)
            if found is None:
                starts[key] = [s]
            else:
                found.append(s)
        self._indexed = max(self._indexed, end - lo + 1)

    def match(self) -> int | None:
        """Where the drafts for the next position would start in the context (the token after
        the matched n-gram's earliest occurrence), or None when nothing matches."""
        toks = self._tokens
        total = len(toks)
        lo = self.min_n
        if total < lo:
            return None
        self._index_upto(total - 1)  # occurrences must end before the suffix's last token
        found = self._starts.get(tuple(toks[total - lo :]))
        if not found:
            return None
        longest = min(self.max_n, total - 1) - lo  # how far a match may extend backwards
        best_ext, best_start = -1, found[0]
        for s in found:  # ascending: the first to reach `longest` is the earliest of the longest
            ext, i, j = 0, s - 1, total - lo - 1
            while ext < longest and i >= 0 and toks[i] == toks[j]:
                ext += 1
                i -= 1
                j -= 1
            if ext > best_ext:
                best_ext, best_start = ext, s
                if ext == longest:
                    break
        return best_start + lo

    def propose(self, k: int) -> list[int]:
        """The drafts for the next position: up to k tokens, or [] when nothing matches."""
        begin = self.match() if k > 0 else None
        return [] if begin is None else self._tokens[begin : begin + k]


def acceptance_lengths(prompt, output, *, min_n: int, max_n: int, k: int, with_matches: bool = False):
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
        while (
            begin is not None
            and accepted < offered
            and i + accepted < n_out
            and toks[begin + accepted] == output[i + accepted]
        ):
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
