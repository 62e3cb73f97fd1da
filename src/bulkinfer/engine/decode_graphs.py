"""CUDA graphs for decode steps: one captured forward per padded batch size.

A decode step launches a few kernels per layer on tiny inputs, so on a GPU its time is mostly
launch overhead; replaying a captured graph removes it. A graph replays fixed buffers, so each
step's inputs are copied into static tensors and the batch is padded up to the next captured
size. Padding rows store nothing (slot -1) and attend to one cached position of block 0; their
outputs are dropped. Capture runs under inference_mode, so the graphs' memory pool keeps no
autograd state. If any capture fails, no graph is kept (``captured`` is False) and the model
runner runs decode steps eagerly, unpadded.

Without capture (``capture=False``) the same padded buffers run eagerly: that is how the CPU
tests check the padding.
"""

from __future__ import annotations

import logging

import torch

from bulkinfer.layers.attention_metadata import AttentionMetadata

logger = logging.getLogger(__name__)


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then every 16 up to max_batch (and max_batch itself)."""
    sizes = [size for size in (1, 2, 4, 8) if size < max_batch] + list(range(16, max_batch, 16))
    return sizes + [max_batch]


class DecodeGraphs:
    def __init__(self, model, max_batch: int, max_blocks_per_seq: int, max_seq_len: int,
                 device: torch.device, capture: bool):
        self.model = model
        self.buckets = batch_buckets(max_batch)
        self.max_seq_len = max_seq_len  # the attention kernel's split count is fixed at capture
        new = lambda *shape, dtype=torch.int32: torch.zeros(shape, dtype=dtype, device=device)  # noqa: E731
        self.input_ids = new(max_batch, dtype=torch.long)
        self.positions = new(max_batch, dtype=torch.long)
        self.slot_mapping = new(max_batch, dtype=torch.long)
        self.query_start_loc = torch.arange(max_batch + 1, dtype=torch.int32, device=device)
        self.seq_lens = new(max_batch)
        self.block_tables = new(max_batch, max_blocks_per_seq)
        self.hidden: dict[int, torch.Tensor] = {}  # bucket -> its graph's output buffer
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.captured = capture and self._capture_all()

    def fits(self, attn: AttentionMetadata) -> bool:
        return attn.max_query_len == 1 and attn.seq_lens.shape[0] <= self.buckets[-1]

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata) -> torch.Tensor:
        """Hidden states [num_seqs, hidden] of a decode-only step."""
        num_seqs = attn.seq_lens.shape[0]
        bucket = next(size for size in self.buckets if size >= num_seqs)
        self._load(input_ids, positions, attn, num_seqs, bucket)
        if bucket in self.graphs:
            self.graphs[bucket].replay()
            return self.hidden[bucket][:num_seqs]
        return self._forward(bucket)[:num_seqs]

    def _load(self, input_ids, positions, attn, num_seqs: int, bucket: int) -> None:
        self.input_ids[:num_seqs] = input_ids
        self.positions[:num_seqs] = positions
        self.slot_mapping[:num_seqs] = attn.slot_mapping
        self.seq_lens[:num_seqs] = attn.seq_lens
        width = attn.block_tables.shape[1]
        self.block_tables[:num_seqs, :width] = attn.block_tables
        self.block_tables[:num_seqs, width:] = 0
        self.slot_mapping[num_seqs:bucket] = -1  # padding rows: nothing stored, one position read
        self.seq_lens[num_seqs:bucket] = 1
        self.block_tables[num_seqs:bucket] = 0

    def _forward(self, bucket: int) -> torch.Tensor:
        attn = AttentionMetadata(self.slot_mapping[:bucket], self.query_start_loc[:bucket + 1],
                                 self.seq_lens[:bucket], self.block_tables[:bucket], 1, self.max_seq_len)
        return self.model(self.input_ids[:bucket], self.positions[:bucket], attn)

    @torch.inference_mode()
    def _capture_all(self) -> bool:
        pool = None
        try:
            for bucket in reversed(self.buckets):  # largest first, so smaller graphs reuse its pool
                self.slot_mapping[:bucket] = -1  # the warm-up and capture store nothing in the cache
                self.seq_lens[:bucket] = 1
                self._forward(bucket)  # warm-up: compiles the kernels outside the capture
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    self.hidden[bucket] = self._forward(bucket)
                pool = graph.pool()
                self.graphs[bucket] = graph
        # Capture fails in many ways: CUDA errors (RuntimeError), Triton's compile errors and
        # OutOfResources (Exception subclasses), a tensor on the wrong device (ValueError).
        except Exception as exc:  # noqa: BLE001  (a failed capture costs speed, never results)
            logger.warning("CUDA graph capture failed, decode steps run eagerly: %s",
                           str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            self.graphs.clear()
            self.hidden.clear()
            return False
        return True
