"""Prefix caching, as vLLM's (on by default; `--no-enable-prefix-caching` turns it off): the KV
of full blocks of `block_size` tokens is kept after the request that computed it, keyed by a
hash chained over every token before it, and a new request whose prompt starts with cached
blocks skips computing them.

What vLLM does and this keeps: only full blocks are cached and matched, from the prompt's start,
stopping at the first block missing; a prompt wholly cached still computes its last token (the
hit is at most prompt length - 1, rounded down to a block); blocks are cached as they are
computed (a prompt's when its prefill ends, the output's when the request finishes), so a
later turn of a conversation, whose prompt repeats the earlier prompt and reply, hits both;
the least recently used block is evicted first (of one chain, its tail first); `vllm:prefix_cache_queries` /
`_hits` count
prompt tokens asked and found.

What is approximated: the cache holds at most as many blocks as the KV cache has
(`kv_capacity // block_size`), as if every free block still held its content, and a request's
cached prefix counts in full against its KV use (vLLM shares one copy between running
requests). Blocks are keyed by the emulated words, not token ids: the emulated model's output
words, sent back as text in a later turn, read as the same words (servers/emulator/content.py).
"""

from __future__ import annotations

from collections import OrderedDict

BLOCK_SIZE = 16  # vLLM's default block size on GPUs


class PrefixCache:
    def __init__(self, capacity_tokens: int, block_size: int = BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self.capacity = max(1, capacity_tokens // block_size)
        self._blocks: OrderedDict[int, None] = OrderedDict()  # chained block hash -> (LRU order)

    def _hashes(self, words: list[str], limit: int):
        """The chained hash of each full block among the first `limit` words."""
        h = 0
        bs = self.block_size
        for start in range(0, limit - bs + 1, bs):
            h = hash((h, tuple(words[start : start + bs])))
            yield h

    def lookup(self, words: list[str]) -> int:
        """Tokens of `words` (a prompt) found cached from its start: whole blocks, at most
        len(words) - 1. Marks the blocks found as just used."""
        found = []
        blocks = self._blocks
        for h in self._hashes(words, len(words) - 1):
            if h not in blocks:
                break
            found.append(h)
        for h in reversed(found):  # a chain's first blocks are the last to go, as in vLLM
            blocks.move_to_end(h)
        return len(found) * self.block_size

    def insert(self, words: list[str]) -> None:
        """Cache every full block of `words`, evicting the least recently used beyond capacity."""
        blocks = self._blocks
        for h in reversed(list(self._hashes(words, len(words)))):  # the tail is evicted first
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)

    def reset(self) -> None:
        self._blocks.clear()

    def __len__(self) -> int:
        return len(self._blocks)
