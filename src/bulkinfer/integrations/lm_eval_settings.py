"""lm-evaluation-harness's arguments in bulkinfer's terms: ``--model_args`` become ``LLM``
arguments, and each generation request's kwargs become ``SamplingParams``.

Kept apart from the backend class so that it needs no lm_eval to import or to test.
"""

from __future__ import annotations

import inspect
from typing import Any

from bulkinfer.engine.llm import LLM
from bulkinfer.sampling_params import SamplingParams

# The backend's own model_args, beside every LLM argument (see BulkinferLM).
BACKEND_ARGS = ("pretrained", "max_length", "add_bos_token", "prefix_token_id", "max_gen_toks")
# lm_eval passes these to every backend from --batch_size and --max_batch_size. The engine forms
# its own batches (max_num_seqs, max_num_batched_tokens), so they are accepted and unused.
IGNORED_ARGS = ("batch_size", "max_batch_size")
# The names lm_eval's tasks use for the number of new tokens, in the harness's order of priority.
MAX_TOKEN_ALIASES = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")
# Generation kwargs that mean the same in SamplingParams; any other is refused, not ignored.
PASSED_THROUGH = ("top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                  "frequency_penalty", "seed")


class ModelArgsError(ValueError):
    """A user's model_args that bulkinfer cannot honour; the message is one line."""


def llm_arguments(pretrained: str | None, max_length: int | None, engine_args: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``LLM``: pretrained is the model and max_length, lm_eval's name for
    the context size, is max_model_len."""
    if not pretrained:
        raise ModelArgsError("model_args needs pretrained=<model directory or hub id>")
    unknown = sorted(set(engine_args) - _llm_parameters())
    if unknown:
        accepted = ", ".join(sorted({*BACKEND_ARGS, *_llm_parameters()}))
        raise ModelArgsError(f"unknown model_args for bulkinfer: {', '.join(unknown)} (accepted: {accepted})")
    arguments = {"model": str(pretrained), **engine_args}
    if max_length is not None:
        if arguments.setdefault("max_model_len", max_length) != max_length:
            raise ModelArgsError("max_length and max_model_len name the same setting; give one of them")
    return arguments


def _llm_parameters() -> set[str]:
    # Read from the signature, so a new engine option is usable here without a change.
    return set(inspect.signature(LLM.__init__).parameters) - {"self", "model"}


def sampling_params(gen_kwargs: dict[str, Any], default_max_tokens: int, eos_text: str) -> SamplingParams:
    """One generate_until request's settings, read the way lm_eval's hf backend reads them: the
    stop strings plus the EOS text, greedy unless do_sample (temperature 0 is greedy too)."""
    kwargs = dict(gen_kwargs)
    stop = _stop_strings(kwargs.pop("until", None), eos_text)
    sizes = [kwargs.pop(name, None) for name in MAX_TOKEN_ALIASES]
    max_tokens = next((int(size) for size in sizes if size is not None), default_max_tokens)
    temperature = float(kwargs.pop("temperature", 0.0) or 0.0)
    do_sample = kwargs.pop("do_sample", None)
    if not (temperature > 0 if do_sample is None else do_sample):
        temperature = 0.0
    unsupported = sorted(set(kwargs) - set(PASSED_THROUGH))
    if unsupported:
        raise ValueError(f"generation arguments the bulkinfer backend cannot honour: {', '.join(unsupported)}")
    if kwargs.get("top_k") == 0:
        kwargs["top_k"] = -1  # transformers turns top-k off with 0, bulkinfer with -1
    return SamplingParams(max_tokens=max_tokens, temperature=temperature, stop=stop, **kwargs)


def _stop_strings(until: str | list[str] | None, eos_text: str) -> list[str]:
    stop = [until] if isinstance(until, str) else list(until or [])
    if eos_text and eos_text not in stop:
        stop.append(eos_text)
    return stop
