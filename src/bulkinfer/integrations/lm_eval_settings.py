"""lm-evaluation-harness's arguments in bulkinfer's terms: ``--model_args`` become ``LLM`` options
and generation defaults, and each generation request's kwargs become ``SamplingParams``.

model_args take every engine option and every sampling option, by the names job files use (see
bulkinfer.settings): ``engine_seed`` is the engine's seed, ``seed`` a request's. Kept apart from
the backend class so that it needs no lm_eval to import or to test.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bulkinfer.engine.config import EngineConfig
from bulkinfer.engine.lora.request import LoRARequest
from bulkinfer.sampling_params import SamplingParams
from bulkinfer.settings import Setting, coerce, settings_of

# The backend's own model_args, beside the engine and sampling options (see BulkinferLM).
BACKEND_ARGS = ("pretrained", "max_length", "add_bos_token", "prefix_token_id", "max_gen_toks", "keep_reasoning",
                "lora", "lora_path")
# The names lm_eval's tasks use for the number of new tokens, in the harness's order of priority.
MAX_TOKEN_ALIASES = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")
# Generation kwargs read by their own rules rather than passed to SamplingParams as they are.
_READ_APART = ("until", "do_sample", "temperature", *MAX_TOKEN_ALIASES)


class ModelArgsError(ValueError):
    """A user's model_args that bulkinfer cannot honour; the message is one line."""


def _named(cls: type) -> dict[str, Setting]:
    return {setting.name: setting for setting in settings_of(cls)}


def llm_arguments(pretrained: str | None, max_length: int | None, model_args: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``LLM``: pretrained is the model and max_length, lm_eval's name for
    the context size, is max_model_len. Sampling options in model_args are left for
    `generation_defaults`; any other name is refused."""
    if not pretrained:
        raise ModelArgsError("model_args needs pretrained=<model directory or hub id>")
    engine, sampling = _named(EngineConfig), _named(SamplingParams)
    unknown = sorted(set(model_args) - set(engine) - set(sampling))
    if unknown:
        accepted = ", ".join(sorted({*BACKEND_ARGS, *engine, *sampling}))
        raise ModelArgsError(f"unknown model_args for bulkinfer: {', '.join(unknown)} (accepted: {accepted})")
    arguments = {"model": str(pretrained),
                 **{engine[name].field: value for name, value in model_args.items() if name in engine}}
    if max_length is not None:
        if arguments.setdefault("max_model_len", max_length) != max_length:
            raise ModelArgsError("max_length and max_model_len name the same setting; give one of them")
    return arguments


def generation_defaults(model_args: dict[str, Any], max_gen_toks: int | None) -> dict[str, Any]:
    """The sampling options model_args give, as defaults for every generate_until request.
    max_tokens is hf's max_gen_toks under the job files' name."""
    sampling = _named(SamplingParams)
    defaults = {}
    for name, value in model_args.items():
        if name in sampling:
            try:
                defaults[sampling[name].field] = coerce(sampling[name], value)
            except ValueError as exc:
                raise ModelArgsError(f"model_args {name} {exc}") from None
    if max_gen_toks is not None:
        if defaults.setdefault("max_tokens", max_gen_toks) != max_gen_toks:
            raise ModelArgsError("max_gen_toks and max_tokens name the same setting; give one of them")
    return defaults


def sampling_params(gen_kwargs: dict[str, Any], defaults: dict[str, Any], eos_text: str) -> SamplingParams:
    """One generate_until request's settings, read the way lm_eval's hf backend reads them: the
    stop strings plus the EOS text, greedy unless do_sample (temperature 0 is greedy too). The
    request's kwargs win over the model_args defaults."""
    kwargs = dict(gen_kwargs)
    stop = _stop_strings(kwargs.pop("until", defaults.get("stop")), eos_text)
    sizes = [kwargs.pop(name, None) for name in MAX_TOKEN_ALIASES]
    max_tokens = next((int(size) for size in sizes if size is not None), defaults.get("max_tokens"))
    temperature = float(kwargs.pop("temperature", defaults.get("temperature", 0.0)) or 0.0)
    do_sample = kwargs.pop("do_sample", None)
    if not (temperature > 0 if do_sample is None else do_sample):
        temperature = 0.0
    passed = {spec.name for spec in dataclasses.fields(SamplingParams)} - set(_READ_APART) - {"stop"}
    unsupported = sorted(set(kwargs) - passed)
    if unsupported:
        raise ValueError(f"generation arguments the bulkinfer backend cannot honour: {', '.join(unsupported)}")
    if kwargs.get("top_k") == 0:
        kwargs["top_k"] = -1  # transformers turns top-k off with 0, bulkinfer with -1
    settings = {**defaults, **kwargs, "max_tokens": max_tokens, "temperature": temperature, "stop": stop}
    if settings.get("n", 1) != 1:
        raise ValueError("generate_until wants one text per request: n must be 1")
    return SamplingParams(**{name: value for name, value in settings.items() if value is not None})


def _stop_strings(until: str | list[str] | None, eos_text: str) -> list[str]:
    stop = [until] if isinstance(until, str) else list(until or [])
    if eos_text and eos_text not in stop:
        stop.append(eos_text)
    return stop


def lora_request(lora: str | None, lora_path: str | None) -> LoRARequest | None:
    """The adapter every request of the run goes through: ``lora=NAME=PATH``, or ``lora_path=PATH`` (named
    ``adapter``); None when neither is given."""
    if lora is not None and lora_path is not None:
        raise ModelArgsError("model_args: give lora=NAME=PATH or lora_path=PATH, not both")
    if lora_path is not None:
        return LoRARequest("adapter", 1, str(lora_path))
    if lora is None:
        return None
    name, sep, path = str(lora).partition("=")
    if not sep or not name or not path:
        raise ModelArgsError(f"model_args lora must be NAME=PATH, got {lora!r}")
    return LoRARequest(name, 1, path)
