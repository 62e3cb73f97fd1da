"""The lm-evaluation-harness backend ``bulkinfer``, registered when this module is imported.

Text becomes token ids here, exactly as lm_eval's own ``hf`` backend makes them (BOS as the
tokenizer adds it unless add_bos_token says otherwise, none when the text already starts with it;
the context/continuation split and empty contexts from lm_eval's TemplateLM; rolling windows from
lm_eval's own helpers), and the engine only scores or generates from ids: so bulkinfer's scores
are comparable with ``hf``'s. Every call hands the engine all its requests at once; the engine
batches, orders and shares few-shot prefixes itself.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import torch

from bulkinfer.integrations import LM_EVAL_INSTALL_HINT

try:
    import lm_eval  # noqa: F401
except ModuleNotFoundError as exc:
    if exc.name != "lm_eval":  # installed, but something it needs is missing: say that instead
        raise
    raise ImportError(LM_EVAL_INSTALL_HINT) from None

# lm_eval fills its model registry with its built-in backends only while the registry is empty,
# so they must be in before "bulkinfer" is, or "hf" would no longer be found.
import lm_eval.models  # noqa: E402,F401
from lm_eval.api.model import TemplateLM  # noqa: E402
from lm_eval.api.registry import register_model  # noqa: E402
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window, simple_parse_args_string  # noqa: E402

from bulkinfer.engine.chat_template import ChatTemplate, ChatTemplateError  # noqa: E402
from bulkinfer.engine.llm import LLM  # noqa: E402
from bulkinfer.engine.tokenizer import load_tokenizer  # noqa: E402
from bulkinfer.integrations.lm_eval_settings import (  # noqa: E402
    ModelArgsError, generation_defaults, llm_arguments, lora_request, sampling_params)
from bulkinfer.outputs import RequestOutput  # noqa: E402

logger = logging.getLogger(__name__)

DEFAULT_MAX_GEN_TOKS = 256  # what lm_eval's hf backend allows when a task does not say


@register_model("bulkinfer")
class BulkinferLM(TemplateLM):
    """model_args: ``pretrained`` (a model directory or hub id), any engine option (dtype, device,
    max_num_seqs, max_model_len, ...) and any sampling option, as a default for generation requests;
    from lm_eval's hf backend, ``max_length`` (= max_model_len), ``add_bos_token`` and
    ``prefix_token_id``; ``max_gen_toks``, the default generation length; ``keep_reasoning``: a
    thinking model's generate_until answers are its reasoning and answer together, as it wrote them
    (default: the answer alone, which is what a task scores); ``lora=NAME=PATH`` (or ``lora_path=PATH``):
    a LoRA adapter (a PEFT directory) that every request goes through. ``batch_size`` and ``max_batch_size``,
    which lm_eval passes to every backend, are taken and not used: the engine forms its own batches."""

    def __init__(self, pretrained: str | None = None, max_length: int | None = None,
                 add_bos_token: bool | None = None, prefix_token_id: int | None = None,
                 max_gen_toks: int | None = None, keep_reasoning: bool = False, lora: str | None = None,
                 lora_path: str | None = None, batch_size: Any = None, max_batch_size: Any = None, **model_args: Any):
        super().__init__()
        if not isinstance(keep_reasoning, bool):
            raise ModelArgsError(f"model_args keep_reasoning must be true or false, got {keep_reasoning!r}")
        self.keep_reasoning = keep_reasoning
        if "device" in model_args:
            model_args["device"] = _available_device(model_args["device"])
        arguments = llm_arguments(pretrained, max_length, model_args)
        self.generation_defaults = generation_defaults(model_args, max_gen_toks)
        self.generation_defaults.setdefault("max_tokens", DEFAULT_MAX_GEN_TOKS)
        self.lora = lora_request(lora, lora_path)
        try:
            self.llm = LLM(**arguments, **({"enable_lora": True} if self.lora else {}))
        except ValueError as exc:  # the engine's one-line refusals of a setting or a model
            raise ModelArgsError(str(exc)) from None
        refusal = self.lora and self.llm.loras.refusal(self.lora)
        if refusal:
            raise ModelArgsError(f"model_args lora: {refusal}")
        self.tokenizer = _harness_tokenizer(self.llm, add_bos_token)
        self.add_bos_token = add_bos_token
        self.custom_prefix_token_id = prefix_token_id

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict[str, Any], additional_config: dict[str, Any] | None = None):
        """As lm_eval's, but a setting given both in model_args and by lm_eval's own options (its
        --device, above all) is one line, not a TypeError."""
        extra = {key: value for key, value in (additional_config or {}).items() if value is not None}
        twice = sorted(set(arg_dict) & set(extra))
        if twice:
            raise ModelArgsError(f"{', '.join(twice)} given both in --model_args and by lm_eval's own options; "
                                 f"give each once (the device with lm_eval's --device)")
        return cls(**arg_dict, **extra)

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict[str, Any] | None = None):
        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    # ---- what lm_eval's TemplateLM needs -------------------------------------------------

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        """What an empty context and the first rolling window stand on: BOS, else EOS."""
        if self.custom_prefix_token_id is not None:
            return self.custom_prefix_token_id
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.tokenizer.eos_token_id

    @property
    def max_length(self) -> int:
        return self.llm.max_model_len

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """Special tokens as asked; if unsaid, as add_bos_token says, except that a text already
        starting with the prefix token's text gets none (a chat template may write BOS itself)."""
        if add_special_tokens is None:
            starts_with_prefix = string.startswith(self.tokenizer.decode(self.prefix_token_id))
            add_special_tokens = False if starts_with_prefix else self.add_bos_token
        return self.tokenizer.encode(string, **_special_tokens(add_special_tokens))

    def _loglikelihood_tokens(self, requests: list[tuple[Any, list[int], list[int]]],
                              disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        """Each request is (cache key, context ids, continuation ids); too long a context loses
        its oldest tokens, as in hf."""
        scores = self.llm.loglikelihood_tokens([(context, continuation) for _, context, continuation in requests],
                                               use_tqdm=not disable_tqdm, lora_request=self.lora)
        answers = [(score.logprob, score.is_greedy) for score in scores]
        for (key, _, _), answer in zip(requests, answers):
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, answer)
        return answers

    # ---- the three request types ---------------------------------------------------------

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Each text's total log-likelihood, every token scored once over windows of max_length."""
        texts = [request.args[0] for request in requests]
        windows = [self._rolling_windows(text) for text in texts]
        flat = [(None, context, continuation) for text_windows in windows for context, continuation in text_windows]
        scores = iter(self._loglikelihood_tokens(flat, disable_tqdm=disable_tqdm))
        totals = [sum(next(scores)[0] for _ in text_windows) for text_windows in windows]
        for text, total in zip(texts, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), total)
        return totals

    def _rolling_windows(self, text: str) -> list[tuple[list[int], list[int]]]:
        windows = get_rolling_token_windows(token_list=self.tok_encode(text), prefix_token=self.prefix_token_id,
                                            max_seq_len=self.max_length, context_len=1)
        return [make_disjoint_window(window) for window in windows]

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Greedy (unless the task samples) until a stop string, EOS or max_gen_toks."""
        eos_text = self.tokenizer.decode(self.eot_token_id, skip_special_tokens=False)
        contexts, all_kwargs = zip(*(request.args for request in requests)) if requests else ((), ())
        params = [sampling_params(kwargs, self.generation_defaults, eos_text) for kwargs in all_kwargs]
        prompts = [self._prompt_ids(context, p.max_tokens) for context, p in zip(contexts, params)]
        outputs = self.llm.generate(prompts, params, use_tqdm=not disable_tqdm, lora_request=self.lora)
        texts = [_completion(output, p.stop, self.keep_reasoning) for output, p in zip(outputs, params)]
        for context, kwargs, text in zip(contexts, all_kwargs, texts):
            self.cache_hook.add_partial("generate_until", (context, kwargs), text)
        return texts

    def _prompt_ids(self, context: str, max_gen_toks: int) -> list[int]:
        """The context as hf encodes a generation prompt, cut from the left to leave room for
        max_gen_toks new tokens."""
        room = self.max_length - max_gen_toks
        if room < 1:
            raise ValueError(f"max_gen_toks ({max_gen_toks}) must be below the model's max_length ({self.max_length})")
        bos = self.tokenizer.bos_token
        add_special_tokens = False if bos and context.startswith(bos) else self.add_bos_token
        return self.tokenizer.encode(context, **_special_tokens(add_special_tokens))[-room:]

    # ---- chat templates ------------------------------------------------------------------

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        def render(history: list[dict[str, str]]) -> str:
            return self._chat_template.render(history, add_generation_prompt=add_generation_prompt,
                                              continue_final_message=not add_generation_prompt)
        try:
            return render(chat_history)
        except ChatTemplateError:  # as hf: some templates (Gemma's, Mistral's) refuse a system turn
            return render([message for message in chat_history if message["role"] != "system"])

    @functools.cached_property
    def _chat_template(self) -> ChatTemplate:
        return ChatTemplate(self.tokenizer)


def _available_device(device: str | None) -> str:
    """lm_eval's command line asks every backend for "cuda:0" unless told --device; like its hf
    backend, take that as "wherever it can run" on a machine without CUDA."""
    if device is None:
        return "auto"
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        logger.warning("device %r was asked for, but CUDA is not available: running on the CPU", device)
        return "cpu"
    return device


def _harness_tokenizer(llm: LLM, add_bos_token: bool | None):
    """The engine's tokenizer, unless add_bos_token is set: hf then builds its tokenizer with it,
    which some tokenizers (GPT-NeoX's) need before they add BOS at all."""
    if add_bos_token is None:
        return llm.tokenizer
    return load_tokenizer(Path(llm.tokenizer.name_or_path), add_bos_token=add_bos_token)


def _special_tokens(add_special_tokens: bool | None) -> dict[str, bool]:
    # Nothing said leaves the choice to the tokenizer's own configuration.
    return {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}


def _completion(output: RequestOutput, stop: list[str], keep_reasoning: bool) -> str:
    """The text a task scores: the answer, without a thinking model's reasoning unless it is kept."""
    if output.error:
        raise ValueError(f"a generate_until request could not run: {output.error}")
    completion = output.outputs[0]
    text = completion.text
    if keep_reasoning and completion.reasoning is not None:
        text = completion.reasoning + text
    for stop_string in stop:  # as hf: cut at the first stop string, whichever the engine saw
        text = text.split(stop_string)[0]
    return text
