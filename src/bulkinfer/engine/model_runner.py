"""Owns the device, the model and the KV-cache pool; turns a scheduled batch into logits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bulkinfer.engine.config import EngineConfig
from bulkinfer.engine.decode_graphs import DecodeGraphs
from bulkinfer.engine.scheduler import ScheduledBatch
from bulkinfer.engine.sequence import Sequence
from bulkinfer.layers.attention_metadata import AttentionMetadata
from bulkinfer.layers.ops import resolve_ops
from bulkinfer.models.config import ModelConfig
from bulkinfer.models.loader import load_model

_GIB = 1 << 30


@dataclass
class ModelOutput:
    sample_seqs: list[Sequence]  # sequences whose every token is now computed: they get a new one
    logits: torch.Tensor  # [len(sample_seqs), vocab] fp32
    prompt_logits: list[tuple[Sequence, int, torch.Tensor]]  # (seq, first position, [n, vocab] fp32)


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # [num_tokens]
    positions: torch.Tensor  # [num_tokens]
    attn: AttentionMetadata
    logit_rows: torch.Tensor  # rows of the hidden states that need logits


class ModelRunner:
    def __init__(self, config: EngineConfig, model_config: ModelConfig, path: Path):
        self.config = config
        self.device = config.device
        self.block_size = config.block_size
        self.ops = resolve_ops(config.attention_backend, config.device)
        self.model = load_model(path, model_config, config.dtype, config.device, self.ops, config.max_model_len)
        self.num_blocks = config.num_kv_blocks or self._blocks_that_fit(model_config)
        if self.num_blocks < 1:
            raise ValueError("no memory is left for the KV cache; lower max_model_len or raise the budget")
        shape = (2, model_config.num_layers, self.num_blocks, self.block_size,
                 model_config.num_kv_heads, model_config.head_dim)
        self.kv_cache = torch.zeros(shape, dtype=config.dtype, device=config.device)
        for index, layer in enumerate(self.model.attention_layers()):
            layer.k_cache, layer.v_cache = self.kv_cache[0, index], self.kv_cache[1, index]
        self.decode_graphs = None
        if self.device.type == "cuda" and self.ops.name == "triton" and not config.enforce_eager:
            max_blocks = -(-config.max_model_len // self.block_size)
            self.decode_graphs = DecodeGraphs(self.model, min(config.max_num_seqs, 256), max_blocks,
                                              config.max_model_len, self.device, capture=True)

    def _blocks_that_fit(self, model: ModelConfig) -> int:
        bytes_per_block = (2 * model.num_layers * self.block_size * model.num_kv_heads * model.head_dim
                           * torch.tensor([], dtype=self.config.dtype).element_size())
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            # Leave room for activations of the largest step besides the fraction not ours to use.
            reserve = total * (1 - self.config.gpu_memory_utilization) + 2 * _GIB
            budget = free - reserve
        else:
            budget = self.config.kv_cache_memory_gb * _GIB
        useful = self.config.max_num_seqs * -(-self.config.max_model_len // self.block_size) + 1
        return min(int(budget // bytes_per_block), useful)

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> ModelOutput:
        inputs, sample_seqs, prompt_slices = self._prepare(batch)
        if self.decode_graphs is not None and self.decode_graphs.fits(inputs.attn):
            hidden = self.decode_graphs.run(inputs.input_ids, inputs.positions, inputs.attn)
        else:
            hidden = self.model(inputs.input_ids, inputs.positions, inputs.attn)
        logits = self.model.compute_logits(hidden[inputs.logit_rows])
        num_sampled = len(sample_seqs)
        prompt_logits = [(seq, first, logits[num_sampled + start:num_sampled + end])
                         for seq, first, start, end in prompt_slices]
        return ModelOutput(sample_seqs, logits[:num_sampled], prompt_logits)

    def _prepare(self, batch: ScheduledBatch):
        bs = self.block_size
        chunks = [(seq.num_computed_tokens, seq.num_computed_tokens + n) for seq, n in zip(batch.seqs, batch.num_new_tokens)]
        starts = np.cumsum([0] + batch.num_new_tokens)
        tables = np.zeros((len(batch.seqs), max(len(s.block_table) for s in batch.seqs)), dtype=np.int32)
        input_ids, positions, slots = [], [], []
        for i, (seq, (begin, end)) in enumerate(zip(batch.seqs, chunks)):
            pos = np.arange(begin, end)
            tables[i, :len(seq.block_table)] = seq.block_table
            input_ids.extend(seq.token_ids[begin:end])
            positions.append(pos)
            slots.append(tables[i, pos // bs].astype(np.int64) * bs + pos % bs)
        sampled = [i for i, (seq, (_, end)) in enumerate(zip(batch.seqs, chunks))
                   if end == len(seq) and not seq.prefill_only]
        sample_seqs = [batch.seqs[i] for i in sampled]
        sample_rows = [int(starts[i + 1]) - 1 for i in sampled]
        prompt_rows, prompt_slices = self._prompt_logprob_rows(batch.seqs, chunks, starts)
        device = self.device
        seq_lens = [end for _, end in chunks]
        attn = AttentionMetadata(
            slot_mapping=torch.from_numpy(np.concatenate(slots)).to(device),
            query_start_loc=torch.from_numpy(starts.astype(np.int32)).to(device),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
            block_tables=torch.from_numpy(tables).to(device),
            max_query_len=max(batch.num_new_tokens),
            max_seq_len=max(seq_lens),
        )
        inputs = StepInputs(
            input_ids=torch.tensor(input_ids, dtype=torch.long, device=device),
            positions=torch.from_numpy(np.concatenate(positions)).to(device),
            attn=attn,
            logit_rows=torch.tensor(sample_rows + prompt_rows, dtype=torch.long, device=device),
        )
        return inputs, sample_seqs, prompt_slices

    @staticmethod
    def _prompt_logprob_rows(seqs: list[Sequence], chunks: list[tuple[int, int]], starts: np.ndarray):
        """Rows whose logits score the next prompt token, for sequences that want those scores."""
        rows, slices = [], []
        for i, (seq, (begin, end)) in enumerate(zip(seqs, chunks)):
            if seq.score_from is None:
                continue
            # Row p predicts scored token p + 1 (a generating sequence samples from its last row).
            first, last = max(begin, seq.score_from - 1), min(end, len(seq.scored_ids) - 1)
            if first >= last:
                continue
            slices.append((seq, first + 1, len(rows), len(rows) + last - first))
            offset = int(starts[i]) - begin
            rows.extend(range(offset + first, offset + last))
        return rows, slices
