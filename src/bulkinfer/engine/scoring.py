"""Log-likelihood scoring, as evaluation harnesses define it, run as prefill-only requests.

Scoring shares the scheduler with generation: requests are batched, chunked and served from the
prefix cache (contexts that share a few-shot prefix compute it once); only the positions being
scored must be computed. Text is tokenized and split into context and continuation the way
lm-evaluation-harness's ``hf`` backend does (0.4.10 and later), so scores are comparable.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Hashable, Protocol

from tqdm.auto import tqdm

from bulkinfer.outputs import RequestOutput

_scoring_ids = itertools.count()


@dataclass(frozen=True)
class Loglikelihood:
    logprob: float  # summed over the continuation's tokens
    is_greedy: bool  # every continuation token was the model's top choice
    token_logprobs: list[float]


class Engine(Protocol):
    """What scoring needs of the engine (LLM is one)."""

    tokenizer: Any

    @property
    def max_model_len(self) -> int: ...

    def add_scoring_request(self, request_id: Hashable, token_ids: list[int], score_from: int,
                            lora_request: Any = None) -> None: ...

    def step(self) -> list[RequestOutput]: ...


def score_tokens(llm: Engine, pairs: list[tuple[list[int], list[int]]], use_tqdm: bool = False,
                 lora_request: Any = None) -> list[Loglikelihood]:
    """Each (context, continuation) of token ids; a context that does not fit loses its oldest tokens.
    ``lora_request``: the LoRA adapter every pair is scored under (None: the base model)."""
    positions = {}
    # Longest first, as the harness orders them: the batch is widest at the start, and a shared
    # context is computed once by whichever request reaches it first, wherever the others stand.
    for index in sorted(range(len(pairs)), key=lambda i: -len(pairs[i][0]) - len(pairs[i][1])):
        context, continuation = pairs[index]
        if not context or not continuation:
            raise ValueError("scoring needs a non-empty context and continuation")
        tokens = (context + continuation)[-(llm.max_model_len + 1):]
        request_id = ("score", next(_scoring_ids))
        positions[request_id] = (index, len(tokens) - len(continuation))
        llm.add_scoring_request(request_id, tokens, len(tokens) - len(continuation), lora_request)
    results: list[Loglikelihood | None] = [None] * len(pairs)
    with tqdm(total=len(pairs), desc="scoring", disable=not use_tqdm) as bar:
        while positions:
            for output in llm.step():
                index, score_from = positions.pop(output.request_id)
                if output.error:
                    raise ValueError(f"request {index} cannot be scored: {output.error}")
                results[index] = loglikelihood_of(output.prompt_token_ids[score_from:],
                                                output.prompt_logprobs[score_from:])
                bar.update(1)
    return results


def loglikelihood_of(targets: list[int], records) -> Loglikelihood:
    """The score of `targets` from their prompt-logprob records (one dict per position)."""
    logprobs = [record[token].logprob for token, record in zip(targets, records)]
    greedy = all(record[token].rank == 1 for token, record in zip(targets, records))
    return Loglikelihood(sum(logprobs), greedy, logprobs)


def prefix_token_id(tokenizer) -> int:
    """What an empty context stands on: BOS, or EOS for tokenizers without one."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def encode_text(tokenizer, text: str) -> list[int]:
    """The tokenizer's own special tokens (a Llama tokenizer's BOS), unless the text has its BOS."""
    has_bos = tokenizer.bos_token is not None and text.startswith(tokenizer.bos_token)
    return tokenizer.encode(text, add_special_tokens=not has_bos)


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Context and continuation ids; trailing spaces of the context move to the continuation, and
    the continuation is what encoding the whole text adds after the context's own tokens. An
    empty context stands on the prefix token (or on the continuation's first token, if it is one)."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    if not context:
        continuation_ids = tokenizer.encode(continuation, add_special_tokens=False)
        prefix = prefix_token_id(tokenizer)
        if continuation_ids[:1] == [prefix]:
            return continuation_ids[:1], continuation_ids[1:]
        return [prefix], continuation_ids
    whole = encode_text(tokenizer, context + continuation)
    context_ids = encode_text(tokenizer, context)
    return context_ids, whole[len(context_ids):]


def rolling_windows(tokens: list[int], prefix: int, max_len: int) -> list[tuple[list[int], list[int]]]:
    """(context, continuation) windows that score every token exactly once, each feeding the model
    at most max_len tokens; the first window's context is the prefix token alone."""
    full = [prefix] + tokens  # tokens[i] is full[i + 1]
    windows = []
    for start in range(0, len(tokens), max_len):
        end = min(start + max_len, len(tokens))
        windows.append((full[max(0, end - max_len):start + 1], full[start + 1:end + 1]))
    return windows


def loglikelihood(llm: Engine, pairs: list[tuple[str, str]], use_tqdm: bool = False,
                  lora_request: Any = None) -> list[Loglikelihood]:
    return score_tokens(llm, [encode_pair(llm.tokenizer, c, x) for c, x in pairs], use_tqdm, lora_request)


def loglikelihood_rolling(llm: Engine, texts: list[str], use_tqdm: bool = False,
                          lora_request: Any = None) -> list[float]:
    prefix = prefix_token_id(llm.tokenizer)
    windows = [rolling_windows(encode_text(llm.tokenizer, text), prefix, llm.max_model_len)
               for text in texts]
    scores = iter(score_tokens(llm, [w for text_windows in windows for w in text_windows], use_tqdm, lora_request))
    return [sum(next(scores).logprob for _ in text_windows) for text_windows in windows]
