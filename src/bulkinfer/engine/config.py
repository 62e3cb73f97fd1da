"""Engine options, declared once: `LLM(model, **options)` takes these fields, and job files, flags,
lm-eval model_args and bench take them from here (see bulkinfer.settings).

Only what can be checked without the model or the machine is checked here; engine/resolve.py makes
the options concrete (device, dtype, lengths) for one model on this machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from bulkinfer.engine.tools.registry import TOOL_CALL_PARSERS
from bulkinfer.settings import check_choices, check_finite, check_seed, setting

DTYPES = ("auto", "float32", "fp32", "float16", "fp16", "half", "bfloat16", "bf16")
ATTENTION_BACKENDS = ("auto", "torch", "triton")
MODEL_IMPLS = ("auto", "native", "transformers")
# gpt_oss: harmony's analysis channel; the others are engine/reasoning/'s parsers.
REASONING_PARSERS = ("auto", "deepseek_r1", "qwen3", "gpt_oss", "none")
KV_CACHE_DTYPES = ("auto", "fp8_e4m3")
POOLING_METHODS = ("auto", "last", "mean", "cls")
# Qwen3-Reranker's prompt, from its model card: its system prompt, its default instruction, and the empty
# thinking block its answer follows.
QWEN3_RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
    "<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
    "<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
# A step's token budget when max_num_batched_tokens is not given: GPUs want wide steps, the CPU short ones.
BATCHED_TOKENS = {"cuda": 8192, "cpu": 2048}
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


@dataclass(frozen=True)
class EngineConfig:
    HELP_PANEL: ClassVar[str] = "Performance"

    tokenizer: str | None = setting(None, "Tokenizer: a local directory or a hub id, when it is not the model's "
                                          "(default: the model's).", path=True, panel="Model")
    revision: str | None = setting(None, "Hub revision (branch, tag or commit) of a model given as a hub id; "
                                         "refused with a local directory (default: the hub's main).", panel="Model")
    dtype: str = setting("auto", "Weights and activations: auto (on the CPU bfloat16 where it has "
                                 "AVX512-BF16 or AMX and the checkpoint is not float16, else float32; on a GPU the "
                                 "checkpoint's half type), float32, float16 or bfloat16.", choices=DTYPES,
                         panel="Model")
    device: str = setting("auto", "auto, cpu, cuda or cuda:N.", panel="Model")
    max_model_len: int | None = setting(None, "Longest prompt + output in tokens (default: the model's).",
                                        panel="Model")
    max_num_seqs: int = setting(256, "Most sequences in the engine's running batch.")
    max_n: int = setting(128, "Most samples one request may ask for (n); a request above it is refused, as each "
                              "sample costs its own KV cache and decoding. 128 is OpenAI's limit.")
    max_num_batched_tokens: int | None = setting(
        None, f"Most tokens per engine step (default: {BATCHED_TOKENS['cuda']} on a GPU, "
              f"{BATCHED_TOKENS['cpu']} on the CPU).")
    num_kv_blocks: int | None = setting(None, "KV-cache blocks (default: sized from memory).")
    block_size: int = setting(16, "Tokens per KV-cache block.")
    enable_prefix_caching: bool = setting(True, "Reuse the KV cache of shared prompt prefixes.",
                                          flag="prefix-caching")
    attention_backend: str = setting("auto", "auto (Triton on a GPU, the CPU path on the CPU), triton or torch "
                                             "(the PyTorch references).", choices=ATTENTION_BACKENDS)
    model_impl: str = setting("auto", "Whose model code runs: native (bulkinfer's, for the architectures it has), "
                                      "transformers (any causal LM transformers can build, on bulkinfer's paged "
                                      "attention) or auto (native where it exists, else transformers).",
                              choices=MODEL_IMPLS, panel="Model")
    reasoning_parser: str = setting("auto", "How a thinking model's reasoning is told from its answer: deepseek_r1, "
                                            "qwen3, gpt_oss, none (reasoning stays in the text), or auto (the "
                                            "family the tokenizer and chat template show, else none). See "
                                            "docs/reasoning.md.", choices=REASONING_PARSERS, panel="Model")
    kv_cache_dtype: str = setting("auto", "KV-cache storage: auto (the compute dtype) or fp8_e4m3 (one byte per "
                                          "element, with the checkpoint's k_scale/v_scale where it has them, else "
                                          "1.0): twice the blocks of 16-bit in the same memory, attention slightly "
                                          "less exact (see docs/gpu.md).", choices=KV_CACHE_DTYPES)
    kv_cache_memory_gb: float = setting(4.0, "KV-cache size on the CPU, in GB.")
    gpu_memory_utilization: float = setting(0.9, "Share of GPU memory the model and KV cache may use.")
    enforce_eager: bool = setting(False, "Run decode steps without CUDA graphs.")
    tensor_parallel_size: int = setting(1, "Split the model's heads and MLP columns across this many "
                                           "processes (one GPU each).")
    deterministic: bool = setting(False, "Batch-invariant results: a greedy or seeded request's tokens and "
                                         "logprobs are bitwise the same whatever shares its batch and however its "
                                         "prompt is chunked or preempted (slower; see docs/gpu.md).")
    tool_call_parser: str = setting("auto", "How the model writes tool calls, read out of the output of requests "
                                            "with tools: hermes (Qwen), llama3_json, mistral, gpt_oss, none, or "
                                            "auto (the format the chat template writes, else none).",
                                    choices=TOOL_CALL_PARSERS, panel="Model")
    pooling: str = setting("auto", "How an embedding pools the token hidden states: last, mean, cls (the first "
                                   "token), or auto (the sentence-transformers Pooling config the model ships, "
                                   "else last). See docs/models.md.", choices=POOLING_METHODS, panel="Model")
    classifier_from_token: list[str] | None = setting(
        None, "Make a causal LM a reranker that scores a (query, document) pair with the probability of the second "
              "of these two tokens against the first at the prompt's end: [\"no\", \"yes\"] for Qwen3-Reranker "
              "(vLLM's name; default: none, and score compares embeddings).", panel="Model")
    rerank_template: str = setting(QWEN3_RERANK_TEMPLATE, "A reranker's prompt, with {query} and {document} in "
                                   "it (default: Qwen3-Reranker's, from its model card).", panel="Model")
    enable_lora: bool = setting(False, "Serve LoRA adapters chosen per request (a job's lora setting turns it on). "
                                       "See docs/lora.md.", panel="Model")
    max_loras: int = setting(4, "LoRA adapters held on the device at once (slots); a request whose adapter "
                                "finds no free slot waits for one.", panel="Model")
    max_lora_rank: int = setting(64, "Highest LoRA rank an adapter may have (every slot is this wide).",
                                 panel="Model")
    max_cpu_loras: int | None = setting(None, "LoRA adapters kept in host memory once read, for refilling slots "
                                              "(default: max_loras).", panel="Model")
    seed: int = setting(0, "Seed of the sampler's stream for requests without a seed of their own.",
                        name="engine_seed", panel="Sampling")

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, str):  # a torch.dtype, as the Python API also takes
            object.__setattr__(self, "dtype", str(self.dtype).removeprefix("torch."))
        check_choices(self)
        check_finite(self)
        check_seed("engine_seed", self.seed)
        if not _DEVICE.fullmatch(str(self.device)):
            raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")
        for name in ("max_model_len", "max_num_seqs", "max_n", "max_num_batched_tokens", "num_kv_blocks", "block_size",
                     "tensor_parallel_size", "max_loras", "max_lora_rank", "max_cpu_loras"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        # A flag given no value reads as an empty list: no reranker.
        object.__setattr__(self, "classifier_from_token", list(self.classifier_from_token or ()) or None)
        if self.classifier_from_token is not None and len(self.classifier_from_token) != 2:
            raise ValueError(f"classifier_from_token must name two tokens (false, true), "
                             f"got {self.classifier_from_token!r}")
        if "{query}" not in self.rerank_template or "{document}" not in self.rerank_template:
            raise ValueError("rerank_template must contain {query} and {document}")
        if self.enable_lora and self.tensor_parallel_size > 1:
            raise ValueError("LoRA adapters run without tensor parallelism: use tensor_parallel_size 1 with "
                             "enable_lora (or a job's lora setting)")
        if self.kv_cache_memory_gb <= 0:
            raise ValueError(f"kv_cache_memory_gb must be > 0, got {self.kv_cache_memory_gb}")
