"""generate_until scores a thinking model's answer, not its reasoning; model_arg keep_reasoning keeps both.

The engine fills CompletionOutput.reasoning through the model's reasoning parser; here a thin wrapper does
that with the gpt_oss parser on the real engine's outputs, so the backend is tested on what it reads."""

from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.registry import get_model  # noqa: E402

from bulkinfer.engine.harmony import HarmonyTokens  # noqa: E402
from bulkinfer.engine.reasoning.harmony import HarmonyReasoningParser  # noqa: E402
from bulkinfer.integrations.lm_eval import BulkinferLM  # noqa: E402
from bulkinfer.integrations.lm_eval_settings import ModelArgsError  # noqa: E402

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


class ReasoningLLM:
    """The engine, its outputs parted by the gpt_oss reasoning parser into .reasoning and .text."""

    def __init__(self, llm) -> None:
        self.llm, self.parser = llm, HarmonyReasoningParser(llm.tokenizer)

    def __getattr__(self, name: str):
        return getattr(self.llm, name)

    def generate(self, prompts, params, use_tqdm=True):
        outputs = self.llm.generate(prompts, params, use_tqdm=use_tqdm)
        for output in outputs:
            for completion in output.outputs:
                split = self.parser.split(output.prompt_token_ids, completion.token_ids)
                completion.reasoning = self.llm.tokenizer.decode(split.reasoning_ids, skip_special_tokens=True)
                completion.text = self.llm.tokenizer.decode(split.answer_ids, skip_special_tokens=True)
                completion.num_reasoning_tokens = len(split.reasoning_ids)
        return outputs


def _generate(lm: BulkinferLM, context: str) -> str:
    markers = HarmonyTokens.of(lm.tokenizer).markers  # kept out, so the model stays in the channel it was put in
    kwargs = {"until": [], "max_gen_toks": 8, "logit_bias": {token: -100.0 for token in markers}}
    [text] = lm.generate_until([Instance(request_type="generate_until", doc={}, idx=0, arguments=(context, kwargs))],
                               disable_tqdm=True)
    return text


@pytest.fixture(scope="module")
def plain(tiny_harmony):
    return BulkinferLM(pretrained=str(tiny_harmony), dtype="float32", device="cpu", max_length=512)


def test_generate_until_leaves_the_reasoning_out(plain, tiny_harmony):
    thinking = get_model("bulkinfer").create_from_arg_string(
        f"pretrained={tiny_harmony},dtype=float32,device=cpu,max_length=512")
    kept = get_model("bulkinfer").create_from_arg_string(
        f"pretrained={tiny_harmony},dtype=float32,device=cpu,max_length=512,keep_reasoning=true")
    thinking.llm, kept.llm = ReasoningLLM(thinking.llm), ReasoningLLM(kept.llm)
    in_analysis = plain.apply_chat_template(QUESTION) + "<|channel|>analysis<|message|>"
    written = _generate(plain, in_analysis)  # what the model writes: all of it in the analysis channel
    assert written.strip()
    assert _generate(thinking, in_analysis) == ""
    assert _generate(kept, in_analysis) == written
    in_final = plain.apply_chat_template(QUESTION) + "<|channel|>final<|message|>"
    assert _generate(thinking, in_final) == _generate(plain, in_final)


def test_keep_reasoning_must_be_a_boolean(tiny_harmony):
    with pytest.raises(ModelArgsError, match="keep_reasoning must be true or false, got 'maybe'"):
        get_model("bulkinfer").create_from_arg_string(f"pretrained={tiny_harmony},device=cpu,keep_reasoning=maybe")
