"""Owns the device, the model and the KV-cache pool; turns a scheduled batch into logits.

Under tensor parallelism every rank has a ModelRunner holding its shard. Rank 0's, the engine's,
also starts the other ranks and sends each of them the plan of every step it runs.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Protocol

import torch
import torch.distributed as dist

from bulkinfer.engine.resolve import ResolvedConfig
from bulkinfer.engine.compile_cache import use_persistent_compile_cache
from bulkinfer.engine.cpu_memory import keep_freed_memory
from bulkinfer.engine.decode_graphs import DecodeGraphs
from bulkinfer.engine.kv_budget import kv_blocks_that_fit, kv_bytes_per_token
from bulkinfer.engine.logprobs import TopLogprobs
from bulkinfer.engine.pooling.pooler import chunk_reader
from bulkinfer.engine.scheduler import ScheduledBatch
from bulkinfer.engine.sequence import Sequence
from bulkinfer.engine.state_pool import StatePool
from bulkinfer.engine.step_logits import StepLogits, logit_slices
from bulkinfer.engine.step_plan import HostStaging, StepPlan, plan_step
from bulkinfer.engine.tensor_parallel import Leader, Workers, join_process_group, rank_device
from bulkinfer.layers.linear import pack_linear_weights, set_batch_invariant
from bulkinfer.layers.moe_cpu import pack_expert_weights
from bulkinfer.layers.ops import resolve_ops
from bulkinfer.layers.parallel import TensorParallel
from bulkinfer.models.config import ModelConfig
from bulkinfer.models.llama import check_splits
from bulkinfer.models.loader import load_model
from bulkinfer.models.lora.stacks import LoRAStacks

@dataclass
class ModelOutput:
    sample_seqs: list[Sequence]  # sequences whose every token is now computed: they get a new one
    logits: torch.Tensor  # [len(sample_seqs), vocab] fp32
    prompt_scores: list[tuple[Sequence, int, TopLogprobs]]  # (seq, first scored position, its positions)


class Peers(Protocol):
    def agree_on_blocks(self, blocks_that_fit: int) -> int: ...


class ModelRunner:
    def __init__(self, config: ResolvedConfig, model_config: ModelConfig, path: Path, rank: int = 0,
                 peers: Peers | None = None):
        self.config = config
        self.device = rank_device(config.device, rank)
        if self.device.type == "cuda":  # Triton launches on the current device, whatever the pointers
            torch.cuda.set_device(self.device)
        self.block_size = config.options.block_size
        self.tp = TensorParallel(rank, config.options.tensor_parallel_size)
        self.workers = None
        if rank == 0 and self.tp.size > 1:
            check_splits(model_config, self.tp)  # before any process starts
            self.workers = Workers.start(config, model_config, path, run_worker)
        try:
            self._load(model_config, path, peers or self.workers)
        except BaseException:
            self.close()
            raise

    def _load(self, model_config: ModelConfig, path: Path, peers: Peers | None) -> None:
        config = self.config
        if self.device.type == "cpu":
            keep_freed_memory()
            use_persistent_compile_cache()  # before the first step compiles the decode attention
        self.ops = resolve_ops(config.options.attention_backend, self.device, config.options.deterministic)
        self.staging = HostStaging(self.device) if self.device.type == "cuda" else None
        self.model = load_model(path, model_config, config.dtype, self.device, self.ops, config.max_model_len, self.tp)
        if config.options.deterministic:
            set_batch_invariant(self.model)
        pack_linear_weights(self.model)
        pack_expert_weights(self.model)
        options = config.options
        self.lora = LoRAStacks(self.model, options.max_loras, options.max_lora_rank) if options.enable_lora else None
        kv_shapes = self.model.kv_shapes()
        # A hybrid model's recurrent layers get max_num_seqs state slots, taken from the budget before KV blocks.
        recurrent = self.model.recurrent_layers() if hasattr(self.model, "recurrent_layers") else []
        self.state_bytes_per_seq = StatePool.bytes_per_sequence(recurrent)
        self.state_pool = StatePool(recurrent, options.max_num_seqs, self.device) if recurrent else None
        # Every rank holds its share of the heads: a token costs this much over all of them.
        self.kv_bytes_per_token = kv_bytes_per_token(kv_shapes, config.kv_cache_dtype) * self.tp.size
        state_bytes = self.state_bytes_per_seq * options.max_num_seqs
        step_tokens = config.max_num_batched_tokens
        scratch_bytes = StatePool.prefill_scratch_bytes(recurrent, step_tokens, min(options.max_num_seqs, step_tokens))
        blocks = config.options.num_kv_blocks or kv_blocks_that_fit(config, model_config, kv_shapes, self.block_size,
                                                                    self.device, self.tp.size, state_bytes,
                                                                    scratch_bytes)
        self.num_blocks = peers.agree_on_blocks(blocks) if peers else blocks
        if self.num_blocks < 1:
            raise ValueError("no memory is left for the KV cache; lower max_model_len or raise the budget")
        # One [planes, blocks, block_size, kv_heads, head_dim] tensor per layer: keys, then values; a latent
        # cache's single plane is bound as both.
        self.kv_caches = [torch.zeros((shape.planes, self.num_blocks, self.block_size, shape.heads, shape.head_dim),
                                      dtype=config.kv_cache_dtype, device=self.device)
                          for shape in kv_shapes]
        for layer, cache in zip(self.model.attention_layers(), self.kv_caches):
            layer.k_cache, layer.v_cache = cache[0], cache[-1]
        self.decode_graphs = None
        # Graphs would capture the ranks' collectives too; that is not tried without a GPU to test it. A
        # transformers model's Python code is not known to be capturable.
        # A step's adapter slots and recurrent state slots are not part of a captured graph's inputs.
        if (self.device.type == "cuda" and self.ops.name == "triton" and not config.options.enforce_eager
                and self.tp.size == 1 and model_config.implementation == "native" and self.lora is None
                and self.state_pool is None):
            max_blocks = -(-config.max_model_len // self.block_size)
            graphs = DecodeGraphs(self.model, min(config.options.max_num_seqs, 256), max_blocks,
                                  config.max_model_len, self.device, capture=True)
            self.decode_graphs = graphs if graphs.captured else None

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> ModelOutput:
        """Rank 0: run one scheduled batch on every rank; the logits it needs come back here."""
        plan, rows = plan_step(batch, self.block_size)
        logits = StepLogits(rows, self.device)
        pool = chunk_reader(batch)
        if self.workers is None:
            self.forward(plan, logits.consume, pool)
        else:
            with self.workers.watch():
                self.workers.send(plan)
                self.forward(plan, logits.consume, pool)
        return ModelOutput(rows.sample_seqs, logits.sampled_logits(), logits.prompt_scores())

    @torch.inference_mode()
    def forward(self, plan: StepPlan, consume: Callable[[int, torch.Tensor], None] | None = None,
                pool: Callable[[torch.Tensor], None] | None = None) -> None:
        """Run the model; its logits go to ``consume(first_row, logits)`` on rank 0, in slices of
        at most LOGIT_SLICE_ROWS rows (every rank slices alike: the LM head gathers across ranks), and
        its hidden states to ``pool`` on rank 0 when pooling requests run."""
        inputs = plan.to(self.device, self.staging)
        if self.lora is not None:
            self.lora.batch.begin_step(inputs.lora_slots)
        if self.decode_graphs is not None and self.decode_graphs.fits(inputs.attn):
            hidden = self.decode_graphs.run(inputs.input_ids, inputs.positions, inputs.attn)
        else:
            hidden = self.model(inputs.input_ids, inputs.positions, inputs.attn)
        if pool is not None:
            pool(hidden)
        for rows in logit_slices(inputs.logit_rows.shape[0]):
            logits = self.model.compute_logits(hidden[inputs.logit_rows[rows]])
            if consume is not None and logits is not None:
                consume(rows.start, logits)

    def close(self) -> None:
        """Stop the other ranks' processes (rank 0 with tensor parallelism; otherwise nothing)."""
        if self.workers is not None:
            self.workers.close()



def run_worker(rank: int, config: ResolvedConfig, model_config: ModelConfig, path: Path, address: str,
               conn: Connection) -> None:
    """A tensor-parallel rank above 0: load its shard, then run every step plan rank 0 sends."""
    # Ctrl-C and a scheduler's SIGTERM reach the whole process group; rank 0 alone decides how
    # to stop (finish the step, commit) and then closes this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn.send("started")  # see Workers.wait_until_started
    join_process_group(config, rank, address)
    try:
        runner = ModelRunner(config, model_config, path, rank, Leader(conn))
        while (plan := conn.recv()) is not None:
            runner.forward(plan)
    except (EOFError, BrokenPipeError, ConnectionResetError):  # rank 0 has gone
        pass
    except Exception as exc:  # rank 0 reports a load failure as its own; after one, a step fails there too
        with suppress(OSError):  # rank 0 may be gone as well
            conn.send(("error", f"tensor-parallel rank {rank}: {exc}"))
    finally:
        dist.destroy_process_group()
