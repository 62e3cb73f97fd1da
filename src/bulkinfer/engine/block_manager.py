"""Owns the KV-cache blocks: who holds which, and the prefix cache that lets sequences share them.

A full block is identified by the hash of its parent block's hash and its own token ids, so two
sequences with the same prefix reach the same chain of hashes. A sequence's LoRA adapter starts its
chain, so the same prefix under another adapter (or none) never shares a block. Freed blocks keep their contents
and stay findable until they are reused, least recently freed first.

A block's hash is registered when the scheduler hands out the step that fills it. That is safe
even for a sequence admitted later in the same step: each layer stores the step's keys and values
for every token before any attention reads the cache.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from bulkinfer.engine.sequence import Sequence


@dataclass
class Block:
    id: int
    ref_count: int = 0
    hash: int | None = None
    token_ids: tuple[int, ...] = ()  # kept to rule out hash collisions


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_blocks: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[int, int] = {}  # block hash -> block id
        self.queried_tokens = 0
        self.hit_tokens = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_blocks)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def admit(self, seq: Sequence, max_new_tokens: int) -> int:
        """Give a waiting sequence its cached prefix and blocks for its next chunk.

        Returns how many tokens to compute this step (0: it does not fit now, nothing taken).
        """
        hits = self._cached_prefix(seq)
        num_cached = len(hits) * self.block_size
        num_new = min(seq.num_uncomputed_tokens - num_cached, max_new_tokens)
        idle_hits = sum(1 for block_id in hits if self.blocks[block_id].ref_count == 0)
        needed = self.blocks_for(num_cached + num_new) - len(hits)
        if needed > self.num_free_blocks - idle_hits:
            return 0
        for block_id in hits:
            self._reuse(block_id)
        seq.block_table = list(hits)
        seq.block_hashes = [self.blocks[b].hash for b in hits]
        seq.num_computed_tokens = seq.num_cached_tokens = num_cached
        self.queried_tokens += len(seq)
        self.hit_tokens += num_cached
        self.allocate_slots(seq, num_new)
        return num_new

    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        needed = self.blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        return needed <= self.num_free_blocks

    def allocate_slots(self, seq: Sequence, num_new_tokens: int) -> None:
        """Extend the block table to hold the next num_new_tokens; register blocks they fill."""
        end = seq.num_computed_tokens + num_new_tokens
        while len(seq.block_table) < self.blocks_for(end):
            seq.block_table.append(self._allocate())
        if self.enable_prefix_caching:
            self._register_full_blocks(seq, end)

    def free(self, seq: Sequence) -> None:
        # Tail blocks first, so that a later prefix reuses the head of the chain longest.
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_blocks[block_id] = None
                self.free_blocks.move_to_end(block_id, last=block.hash is not None)
        seq.block_table = []
        seq.block_hashes = []

    def _cached_prefix(self, seq: Sequence) -> list[int]:
        if not self.enable_prefix_caching:
            return []
        servable = seq.max_cached_tokens
        hits, parent = [], seq.cache_salt
        for start in range(0, servable - self.block_size + 1, self.block_size):
            tokens = tuple(seq.token_ids[start:start + self.block_size])
            parent = hash((parent, tokens))
            block_id = self.cached.get(parent)
            if block_id is None or self.blocks[block_id].token_ids != tokens:
                break
            hits.append(block_id)
        return hits

    def _register_full_blocks(self, seq: Sequence, num_tokens: int) -> None:
        hashes = seq.block_hashes
        for index in range(len(hashes), num_tokens // self.block_size):
            tokens = tuple(seq.token_ids[index * self.block_size:(index + 1) * self.block_size])
            block_hash = hash((hashes[-1] if hashes else seq.cache_salt, tokens))
            hashes.append(block_hash)
            block = self.blocks[seq.block_table[index]]
            if block_hash not in self.cached:
                block.hash, block.token_ids = block_hash, tokens
                self.cached[block_hash] = block.id

    def _reuse(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            del self.free_blocks[block_id]
        block.ref_count += 1

    def _allocate(self) -> int:
        block_id, _ = self.free_blocks.popitem(last=False)
        block = self.blocks[block_id]
        if block.hash is not None:  # evicted from the prefix cache
            if self.cached.get(block.hash) == block_id:
                del self.cached[block.hash]
            block.hash, block.token_ids = None, ()
        block.ref_count = 1
        return block_id
