"""The engine's public face: ``LLM.generate`` and ``LLM.chat`` for lists, ``add_request``/``step`` for streams,
and the pooling tasks (``embed``, ``classify``, ``reward``, ``score``, ``add_pooling_request``)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Hashable, Sequence as SequenceOf

import torch
from tqdm.auto import tqdm

from bulkinfer.engine.block_manager import BlockManager
from bulkinfer.engine.chat import Message, conversations_of, render_conversations
from bulkinfer.engine.chat_template import ChatTemplate
from bulkinfer.engine.config import EngineConfig
from bulkinfer.engine.detokenizer import Detokenizer
from bulkinfer.engine.grammar import GrammarCache
from bulkinfer.engine.grammar_masks import GrammarMasks
from bulkinfer.engine.logit_rules import bad_word_ids
from bulkinfer.engine.lora.request import LoRARequest
from bulkinfer.engine.lora.slots import LoRASlots
from bulkinfer.engine.model_runner import ModelRunner
from bulkinfer.engine.pooling import batch as pooling_batch
from bulkinfer.engine.pooling.pair_prompt import pair_prompt_ids
from bulkinfer.engine.pooling.request import PoolingRequest
from bulkinfer.engine.pooling.tasks import POOLING_TASKS, PoolingModel
from bulkinfer.engine.reasoning.registry import reasoning_parser
from bulkinfer.engine.reasoning.tracker import ReasoningTracker
from bulkinfer.engine.request import Request, StopChecker, params_refusal
from bulkinfer.engine.resolve import resolve
from bulkinfer.engine import scoring
from bulkinfer.engine.sampler import Sampler
from bulkinfer.engine.scheduler import Scheduler
from bulkinfer.engine.scoring import Loglikelihood
from bulkinfer.engine.sequence import Sequence
from bulkinfer.engine.state_pool import prefix_caching_off, state_slots
from bulkinfer.engine.stats import EngineStats
from bulkinfer.engine.step_outputs import StepOutputs
from bulkinfer.engine.tools.calls import ToolCalls
from bulkinfer.engine.step_plan import sampled_rows
from bulkinfer.engine.tokenizer import eos_token_ids, load_tokenizer, tokenizer_path
from bulkinfer.models.checkpoint import resolve_model_path
from bulkinfer.models.loader import read_config
from bulkinfer.outputs import (
    ClassificationRequestOutput, EmbeddingRequestOutput, PoolingRequestOutput, RequestOutput, ScoringRequestOutput,
)
from bulkinfer.pooling_params import PoolingParams
from bulkinfer.sampling_params import SamplingParams
from bulkinfer.settings import construct

# Text, token ids, or vLLM's TextPrompt / TokensPrompt: {"prompt": text} or {"prompt_token_ids": ids}.
Prompt = str | list[int] | dict[str, Any]


class LLM:
    """The engine. ``options`` are EngineConfig's fields (dtype, device, max_num_seqs, ...)."""

    def __init__(self, model: str, **options: Any):
        engine_options = construct(EngineConfig, options, "LLM option")
        path = resolve_model_path(str(model), engine_options.revision)
        model_config, hf_config = read_config(path, engine_options.model_impl)
        self.config = resolve(engine_options, model_config)
        self.model_config = model_config
        self.tokenizer = load_tokenizer(tokenizer_path(path, engine_options.tokenizer))
        self.pooling = PoolingModel.of(engine_options, model_config, path, self.tokenizer)
        self.runner = ModelRunner(self.config, model_config, path)
        # A cached prefix's blocks hold its keys and values, not the recurrent state after it.
        self.block_manager = BlockManager(self.runner.num_blocks, engine_options.block_size,
                                          engine_options.enable_prefix_caching and self.runner.state_pool is None)
        self.loras = None if self.runner.lora is None else LoRASlots(
            self.runner.lora, engine_options.max_lora_rank, engine_options.max_cpu_loras or engine_options.max_loras)
        self.scheduler = Scheduler(self.block_manager, engine_options.max_num_seqs, self.config.max_num_batched_tokens,
                                   self.loras, state_slots(self.runner.state_pool))
        self.detokenizer = Detokenizer(self.tokenizer)
        eos_ids = eos_token_ids(path, hf_config, self.tokenizer)
        self.sampler = Sampler(engine_options.seed, self.config.device, eos_ids)
        self.stop_checker = StopChecker(eos_ids, self.detokenizer)
        parser = reasoning_parser(engine_options.reasoning_parser, self.tokenizer)
        self.reasoning = None if parser is None else ReasoningTracker(parser)
        self.grammars = GrammarCache(self.tokenizer, model_config.vocab_size, eos_ids)
        self.tool_calls = ToolCalls(engine_options.tool_call_parser, self.tokenizer)
        self.masks = GrammarMasks(model_config.vocab_size, engine_options.max_num_seqs, self.config.device)
        self._generate_ids = itertools.count()
        self._stats = EngineStats(kv_blocks_total=self.runner.num_blocks, model_impl=model_config.implementation,
                                  dtype=str(self.config.dtype).removeprefix("torch."),
                                  dtype_reason=self.config.dtype_reason,
                                  kv_cache_dtype=str(self.config.kv_cache_dtype).removeprefix("torch."),
                                  kv_bytes_per_token=self.runner.kv_bytes_per_token,
                                  state_bytes_per_seq=self.runner.state_bytes_per_seq,
                                  prefix_caching_off=prefix_caching_off(engine_options, self.runner.state_pool))
        self.step_outputs = StepOutputs(self.scheduler, self.sampler, self.tokenizer, self.detokenizer,
                                        self.stop_checker, self.reasoning, self.tool_calls, self._stats)
        self.requests = self.step_outputs.requests  # the requests in the engine, by id

    @property
    def max_model_len(self) -> int:
        return self.config.max_model_len

    @property
    def supported_tasks(self) -> tuple[str, ...]:
        """What one request can ask of this model: ``generate`` (with an LM head), and the pooling tasks
        ``embed``, ``classify``, ``reward`` and ``score`` (a rendered pair; see ``score_prompt_ids``)."""
        return (("generate",) if self.model_config.head == "lm" else ()) + self.pooling.tasks

    def close(self) -> None:
        """Stop the tensor-parallel worker processes, if there are any. Garbage collection and
        interpreter exit do it too; call it to free their memory sooner."""
        self.runner.close()
        self.grammars.close()
        self.masks.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # ---- streaming interface -------------------------------------------------------------

    def add_request(self, request_id: Hashable, prompt: Prompt, params: SamplingParams | None = None,
                    lora_request: LoRARequest | None = None) -> None:
        """Queue a request; its output comes back from a later step() once all its samples finish. With
        ``lora_request``, through that LoRA adapter (the engine needs ``enable_lora=True``)."""
        self._add(request_id, *self._encoded(prompt), params or SamplingParams(), lora=lora_request)

    def add_scoring_request(self, request_id: Hashable, token_ids: list[int], score_from: int,
                            lora_request: LoRARequest | None = None) -> None:
        """Queue a prefill-only request that records the log-probability of every token from
        position ``score_from`` on (in ``prompt_logprobs``) and generates nothing. The last token
        is only predicted, never fed in: a text of max_model_len + 1 tokens fits."""
        if not 1 <= score_from < len(token_ids):
            raise ValueError(f"score_from must be in [1, {len(token_ids) - 1}], got {score_from}")
        self._add(request_id, None, list(token_ids), SamplingParams(max_tokens=1, prompt_logprobs=0),
                  lora=lora_request, score_from=score_from, scored_ids=list(token_ids))

    def add_pooling_request(self, request_id: Hashable, prompt_token_ids: list[int], task: str,
                            params: PoolingParams | None = None) -> None:
        """Queue a prefill-only request that pools the prompt's hidden states for ``task`` (embed, classify,
        reward or score); its PoolingRequestOutput comes back from a later step(). A task or params this model
        cannot serve is that request's error."""
        if task not in POOLING_TASKS:
            raise ValueError(f"task must be one of {', '.join(POOLING_TASKS)}, got {task!r}")
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in the engine")
        params = params or PoolingParams()
        token_ids = list(prompt_token_ids)
        request = PoolingRequest(request_id, token_ids, task, params, self.model_config.labels)
        request.error = self.pooling.refusal(task, params) or self._refusal(token_ids, len(token_ids), 0)
        if request.error:
            self.step_outputs.refuse(request)
            return
        pooler = self.pooling.pooler(task, self.runner.model)
        request.seqs = [Sequence(request_id, 0, token_ids, SamplingParams(max_tokens=1), None, pooler=pooler)]
        self.step_outputs.admit(request, None)

    def _add(self, request_id: Hashable, text: str | None, token_ids: list[int], params: SamplingParams,
             lora: LoRARequest | None = None, **scoring) -> None:
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in the engine")
        token_ids = params.kept_prompt(token_ids, self.max_model_len)
        request = Request(request_id, text, token_ids, params, [])
        prompt_ids = token_ids[:-1] if "scored_ids" in scoring else token_ids
        max_tokens = 0 if "scored_ids" in scoring else params.max_tokens
        request.error = (self._generation_refusal()
                         or params_refusal(params, self.model_config.vocab_size, self.config.options.max_n,
                                           reasons=self.reasoning is not None)
                         or self._refusal(token_ids, len(prompt_ids), max_tokens) or self._constrain(request)
                         or self._lora_refusal(lora))
        if request.error:
            self.step_outputs.refuse(request)
            return
        request.seqs = [self._new_sequence(request, prompt_ids, index, lora=lora, **scoring)
                        for index in range(params.n)]
        banned_spellings = bad_word_ids(self.tokenizer, params.bad_words)  # tokenized once for the n samples
        for seq in request.seqs:
            seq.bad_word_ids = banned_spellings
        self.step_outputs.admit(request, None if request.constraint is None else self.grammars.get(request.constraint))

    def step(self) -> list[RequestOutput]:
        """Run one batch; return the requests that finished (or were refused) since the last step."""
        finished = self.step_outputs.take_refused()
        batch = self.scheduler.schedule()
        if batch:
            masks = self.masks.start([batch.seqs[row] for row in sampled_rows(batch)])
            output = self.runner.execute(batch)
            self.masks.apply(masks, output.logits)
            finished += self.step_outputs.process(batch, output)
        self._stats.steps += 1
        return finished

    def has_unfinished_requests(self) -> bool:
        return len(self.step_outputs) > 0

    @property
    def num_unfinished_requests(self) -> int:
        return len(self.step_outputs)

    @property
    def stats(self) -> EngineStats:
        stats = self._stats
        stats.num_running = len(self.scheduler.running)
        stats.num_waiting = len(self.scheduler.waiting)
        stats.kv_blocks_used = self.block_manager.num_blocks - self.block_manager.num_free_blocks
        stats.preemptions = self.scheduler.num_preemptions
        stats.prefix_cache_queried_tokens = self.block_manager.queried_tokens
        stats.prefix_cache_hit_tokens = self.block_manager.hit_tokens
        stats.grammar_mask_seconds = self.masks.seconds
        stats.grammar_mask_steps = self.masks.steps_masked
        stats.grammar_mask_rows = self.masks.rows_masked
        return stats

    # ---- batch interface -----------------------------------------------------------------

    def get_tokenizer(self) -> Any:
        """The checkpoint's Hugging Face tokenizer, the one the engine encodes and decodes with."""
        return self.tokenizer

    def generate(self, prompts: Prompt | SequenceOf[Prompt],
                 sampling_params: SamplingParams | SequenceOf[SamplingParams] | None = None,
                 use_tqdm: bool = True,
                 lora_request: LoRARequest | SequenceOf[LoRARequest | None] | None = None) -> list[RequestOutput]:
        """Outputs in input order. A prompt that cannot run gets an output with ``error`` set. ``lora_request``:
        one LoRA adapter for every prompt, or one per prompt (None: the base model)."""
        return self._run_all([self._encoded(prompt) for prompt in _prompt_list(prompts)], sampling_params, use_tqdm,
                             lora_request)

    def chat(self, messages: SequenceOf[Message] | SequenceOf[SequenceOf[Message]],
             sampling_params: SamplingParams | SequenceOf[SamplingParams] | None = None,
             use_tqdm: bool = True, chat_template: str | None = None, chat_template_content_format: str = "auto",
             add_generation_prompt: bool = True, continue_final_message: bool = False,
             tools: list[dict[str, Any]] | None = None,
             chat_template_kwargs: dict[str, Any] | None = None,
             lora_request: LoRARequest | SequenceOf[LoRARequest | None] | None = None) -> list[RequestOutput]:
        """vLLM's ``LLM.chat``: one conversation (a list of {role, content} messages) or a list of them, each
        rendered with the model's chat template (or ``chat_template``, a template's text) and generated from
        as ``generate`` does. ``tools`` (OpenAI tool definitions) are rendered by the template and the calls
        read into each output's ``tool_calls``, as when the sampling params carry them; ``chat_template_kwargs``
        are more variables for the template ({"enable_thinking": False}). ``lora_request`` as in ``generate``.
        A conversation the template cannot render raises ValueError."""
        conversations = conversations_of(messages)
        params = _with_tools(sampling_params or SamplingParams(), tools, len(conversations))
        template = ChatTemplate(self.tokenizer, chat_template)
        if isinstance(sampling_params, SamplingParams):  # gpt-oss's reasoning_effort is the template's to write
            chat_template_kwargs = {**sampling_params.template_variables, **(chat_template_kwargs or {})}
        prompts = render_conversations(template, conversations, chat_template_content_format,
                                       add_generation_prompt=add_generation_prompt,
                                       continue_final_message=continue_final_message, tools=tools,
                                       template_kwargs=chat_template_kwargs)
        # The template writes the special tokens (BOS) itself.
        encoded = [self._encoded(prompt, add_special_tokens=False) for prompt in prompts]
        return self._run_all(encoded, params, use_tqdm, lora_request)

    def _encoded(self, prompt: Prompt, add_special_tokens: bool = True) -> tuple[str | None, list[int]]:
        if isinstance(prompt, dict):
            if not {"prompt", "prompt_token_ids"} & prompt.keys():
                raise ValueError("a prompt dict needs a 'prompt' or a 'prompt_token_ids' key")
            prompt = prompt["prompt_token_ids"] if "prompt_token_ids" in prompt else prompt["prompt"]
        if isinstance(prompt, str):
            return prompt, self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens)
        return None, list(prompt)

    def _run_all(self, prompts: list[tuple[str | None, list[int]]],
                 sampling_params: SamplingParams | SequenceOf[SamplingParams] | None,
                 use_tqdm: bool, lora_request: LoRARequest | SequenceOf[LoRARequest | None] | None = None,
                 ) -> list[RequestOutput]:
        """Each (text, token ids) run to the end; outputs in input order."""
        params = sampling_params or SamplingParams()
        params = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        if len(params) != len(prompts):
            raise ValueError(f"got {len(params)} sampling params for {len(prompts)} prompts")
        loras = _per_prompt(lora_request, len(prompts))
        positions = {}
        for index, ((text, token_ids), p, lora) in enumerate(zip(prompts, params, loras)):
            request_id = f"generate-{next(self._generate_ids)}"
            positions[request_id] = index
            self._add(request_id, text, token_ids, p, lora=lora)
        results: list[RequestOutput | None] = [None] * len(prompts)
        remaining = len(prompts)
        with tqdm(total=len(prompts), desc="requests", disable=not use_tqdm) as bar:
            while remaining:
                for output in self.step():
                    results[positions.pop(output.request_id)] = output
                    remaining -= 1
                    bar.update(1)
        return results

    # ---- scoring -------------------------------------------------------------------------

    def loglikelihood(self, requests: list[tuple[str, str]], use_tqdm: bool = False,
                      lora_request: LoRARequest | None = None) -> list[Loglikelihood]:
        """For each (context, continuation): the continuation's summed log-probability and whether
        it is the greedy continuation, tokenized as lm-evaluation-harness's hf backend does; with
        ``lora_request``, under that adapter."""
        return scoring.loglikelihood(self, requests, use_tqdm, lora_request)

    def loglikelihood_tokens(self, requests: list[tuple[list[int], list[int]]], use_tqdm: bool = False,
                             lora_request: LoRARequest | None = None) -> list[Loglikelihood]:
        return scoring.score_tokens(self, requests, use_tqdm, lora_request)

    def loglikelihood_rolling(self, texts: list[str], use_tqdm: bool = False,
                              lora_request: LoRARequest | None = None) -> list[float]:
        """Each text's total log-likelihood over windows of max_model_len, every token scored once."""
        return scoring.loglikelihood_rolling(self, texts, use_tqdm, lora_request)

    # ---- pooling -------------------------------------------------------------------------

    def embed(self, prompts: Prompt | SequenceOf[Prompt], pooling_params: PoolingParams | None = None,
              use_tqdm: bool = True) -> list[EmbeddingRequestOutput]:
        """Each prompt's embedding (``.outputs.embedding``), pooled as the ``pooling`` setting says."""
        return self._pool_all(prompts, "embed", pooling_params, use_tqdm)

    def classify(self, prompts: Prompt | SequenceOf[Prompt],
                 use_tqdm: bool = True) -> list[ClassificationRequestOutput]:
        """Each prompt's class probabilities (``.outputs.probs``) and likeliest label, from a classifier."""
        return self._pool_all(prompts, "classify", None, use_tqdm)

    def reward(self, prompts: Prompt | SequenceOf[Prompt], use_tqdm: bool = True) -> list[PoolingRequestOutput]:
        """Each prompt's raw head output (``.outputs.data``): a reward model's score."""
        return self._pool_all(prompts, "reward", None, use_tqdm)

    def score(self, query: str | SequenceOf[str], documents: str | SequenceOf[str],
              use_tqdm: bool = True) -> list[ScoringRequestOutput]:
        """Each (query, document) pair's ``.outputs.score``: a reranker's yes probability, a one-label
        classifier's (cross-encoder's) sigmoid, or an embedding model's cosine similarity. One query is
        scored against every document; two lists pair one to one."""
        queries, documents = pooling_batch.pairs(query, documents)
        return pooling_batch.score(self, queries, documents, lambda text: self._encoded(text)[1], use_tqdm)

    def score_prompt_ids(self, query: str, document: str) -> list[int]:
        """The token ids one ``score`` request reads for a pair: a reranker's ``rerank_template`` filled in, or
        the tokenizer's own pair encoding for a cross-encoder."""
        return pair_prompt_ids(self.tokenizer, self.model_config.head, self.config.options.rerank_template,
                               query, document)

    def _pool_all(self, prompts: Prompt | SequenceOf[Prompt], task: str, params: PoolingParams | None,
                  use_tqdm: bool) -> list[PoolingRequestOutput]:
        encoded = [self._encoded(prompt)[1] for prompt in _prompt_list(prompts)]
        return pooling_batch.run_pooling(self, encoded, task, params, use_tqdm)

    # ---- internals -----------------------------------------------------------------------

    def _generation_refusal(self) -> str | None:
        if "generate" in self.supported_tasks:
            return None
        return ("this model has no LM head to generate or score text with; "
                f"it serves {', '.join(self.supported_tasks)}")

    def _refusal(self, token_ids: list[int], prompt_len: int, max_tokens: int) -> str | None:
        if not token_ids:
            return "the prompt is empty"
        if prompt_len + max_tokens > self.max_model_len:
            return (f"prompt ({prompt_len} tokens) plus max_tokens ({max_tokens}) exceeds "
                    f"max_model_len ({self.max_model_len})")
        if min(token_ids) < 0 or max(token_ids) >= self.model_config.vocab_size:
            return f"prompt has token ids outside the vocabulary (0..{self.model_config.vocab_size - 1})"
        needed = self.block_manager.blocks_for(prompt_len + max_tokens)
        if needed > self.block_manager.num_blocks:
            return (f"prompt plus max_tokens needs {needed} KV blocks but the whole pool has "
                    f"{self.block_manager.num_blocks}; raise num_kv_blocks or the memory budget")
        return None

    def _lora_refusal(self, lora: LoRARequest | None) -> str | None:
        if lora is None:
            return None
        if self.loras is None:
            return f"LoRA adapter {lora.lora_name!r} asked for, but the engine was started without enable_lora=True"
        return self.loras.refusal(lora)

    def _constrain(self, request: Request) -> str | None:
        """Sets the grammar the request's output must follow; returns why it cannot have one, if it cannot."""
        try:
            request.constraint = request.params.constraint or self.tool_calls.constraint(request.params)
        except ValueError as exc:
            return str(exc)
        return None

    def _new_sequence(self, request: Request, prompt_ids: list[int], index: int, **extra) -> Sequence:
        generator = None
        if request.params.seed is not None:
            # Each of the n samples gets its own stream, fixed by the seed and its index.
            generator = torch.Generator(device=self.config.device)
            generator.manual_seed(hash((request.params.seed, index)) if index else request.params.seed)
        return Sequence(request.request_id, index, prompt_ids, request.params, generator, **extra)



def _prompt_list(prompts: Prompt | SequenceOf[Prompt]) -> SequenceOf[Prompt]:
    """One prompt (text, token ids or a prompt dict) as a list of one; a list as it is."""
    if isinstance(prompts, (str, dict)) or (prompts and isinstance(prompts[0], int)):
        return [prompts]
    return prompts


def _per_prompt(lora_request: LoRARequest | SequenceOf[LoRARequest | None] | None,
                count: int) -> list[LoRARequest | None]:
    """One adapter (or None) per prompt, from one for all or a list of them."""
    if lora_request is None or isinstance(lora_request, LoRARequest):
        return [lora_request] * count
    if len(lora_request) != count:
        raise ValueError(f"got {len(lora_request)} LoRA requests for {count} prompts")
    return list(lora_request)


def _with_tools(params: SamplingParams | SequenceOf[SamplingParams], tools: list[dict[str, Any]] | None,
                count: int) -> list[SamplingParams]:
    """One SamplingParams per conversation, carrying `tools` where it carries none of its own."""
    params = [params] * count if isinstance(params, SamplingParams) else list(params)
    if tools is None:
        return params
    return [p if p.tools is not None else dataclasses.replace(p, tools=tools) for p in params]
