"""Suffix decoding (vLLM's `"method": "suffix"`, Arctic Inference's SuffixDecodingCache), as
the emulator's drafter: real matching over the tokens the engine has seen.

Two kinds of tree, as in Arctic Inference: one per running request over its prompt and its
output so far, and one global tree over the outputs of earlier requests (at most
`max_cached_requests` of them, the oldest evicted first; 0: no global tree). A lookup takes the
longest suffix of the request's context that occurs in a tree, then walks down from it, each
time to the most frequent next token, while the path's probability (the product of each
step's count over its parent's) stays at or above `min_token_prob`; at most
min(k, spec_factor x match length) tokens, and match + drafts at most `max_tree_depth`. Of the
two trees' drafts the one with the higher score (the sum of its tokens' path probabilities)
is proposed.

Approximation (documented in docs/emulator.md): a tree node is the string from the root, here
the key of a dictionary of next-token counts. Strings longer than `INDEXED` tokens are not
indexed: matches are at most INDEXED tokens long and a walk past that depth continues from the
last INDEXED tokens (an order-INDEXED Markov walk, where the real tree walks the whole path).
That bounds the cost of a token to INDEXED dictionary updates.
"""

from __future__ import annotations

from collections import OrderedDict

INDEXED = 12


class SuffixTree:
    """Next-token counts after every string of 1..depth tokens in the sequences added."""

    __slots__ = ("depth", "nodes")

    def __init__(self, depth: int) -> None:
        self.depth = min(depth, INDEXED)
        self.nodes: dict[tuple, dict[int, int]] = {}  # string -> {next token: count}

    def add(self, tokens, start: int = 0, sign: int = 1) -> None:
        """Count each token of tokens[start:] after the strings that end just before it
        (sign -1: forget them again)."""
        nodes, depth = self.nodes, self.depth
        for i in range(max(start, 1), len(tokens)):
            tok = tokens[i]
            for m in range(1, min(depth, i) + 1):
                key = tuple(tokens[i - m : i])
                counts = nodes.get(key)
                if counts is None:
                    if sign < 0:
                        break
                    nodes[key] = {tok: 1}
                    continue
                c = counts.get(tok, 0) + sign
                if c > 0:
                    counts[tok] = c
                else:
                    counts.pop(tok, None)
                    if not counts:
                        del nodes[key]

    def match(self, context) -> int:
        """The length of the longest suffix of `context` that occurs (followed by a token)."""
        nodes = self.nodes
        for m in range(min(self.depth, len(context)), 0, -1):
            if tuple(context[-m:]) in nodes:
                return m
        return 0

    def speculate(
        self, context, max_tokens: int, spec_factor: float, min_prob: float, max_depth: int
    ) -> tuple[list[int], float]:
        """Drafts from the longest match, and their score."""
        m = self.match(context)
        if m == 0:
            return [], 0.0
        limit = min(max_tokens, int(spec_factor * m), max_depth - m)
        path = list(context[-m:])
        draft: list[int] = []
        prob, score = 1.0, 0.0
        nodes, depth = self.nodes, self.depth
        while len(draft) < limit:
            counts = nodes.get(tuple(path[-depth:]))
            if not counts:
                break
            tok, c = max(counts.items(), key=lambda kv: kv[1])
            prob *= c / sum(counts.values())
            if prob < min_prob:
                break
            draft.append(tok)
            score += prob
            path.append(tok)
        return draft, score


class SuffixCache:
    """The engine's suffix-decoding state: a tree per running request, the global tree of
    earlier outputs."""

    def __init__(self, depth: int, max_cached_requests: int, spec_factor: float, min_prob: float) -> None:
        self.depth, self.max_cached = depth, max_cached_requests
        self.spec_factor, self.min_prob = spec_factor, min_prob
        self.global_tree = SuffixTree(depth)
        self.cached: OrderedDict[str, list[int]] = OrderedDict()  # request id -> its output
        self.active: dict[str, tuple[SuffixTree, list[int], list[int]]] = {}  # tree, context, output

    def start(self, request_id: str, prompt: list[int]) -> None:
        tree = SuffixTree(self.depth)
        tree.add(prompt)
        self.active[request_id] = (tree, list(prompt), [])

    def extend(self, request_id: str, tokens: list[int]) -> None:
        """The request wrote `tokens`: into its own tree, and (as Arctic does with active
        responses) into the global one."""
        tree, context, output = self.active[request_id]
        at = len(context)
        context.extend(tokens)
        tree.add(context, at)
        if self.max_cached > 0:
            o = len(output)
            output.extend(tokens)
            self.global_tree.add(output, o)

    def propose(self, request_id: str, k: int) -> list[int]:
        tree, context, _ = self.active[request_id]
        pattern = context[-self.depth :]
        local, s_local = tree.speculate(pattern, k, self.spec_factor, self.min_prob, self.depth)
        if self.max_cached <= 0:
            return local
        shared, s_shared = self.global_tree.speculate(pattern, k, self.spec_factor, self.min_prob, self.depth)
        return shared if s_shared > s_local else local

    def finish(self, request_id: str) -> None:
        """The request ended: its tree goes; its output stays in the global tree, the oldest
        cached output leaving when more than max_cached_requests are kept."""
        entry = self.active.pop(request_id, None)
        if entry is None or self.max_cached <= 0:
            return
        self.cached[request_id] = entry[2]
        while len(self.cached) > self.max_cached:
            _, old = self.cached.popitem(last=False)
            self.global_tree.add(old, 0, sign=-1)
