"""generate_until scores a thinking model's answer, not its reasoning; model_arg keep_reasoning keeps both.
The tiny gpt-oss checkpoint's tokenizer has harmony's markers, so the engine picks the gpt_oss parser."""

from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.registry import get_model  # noqa: E402

from bulkinfer.engine.harmony import HarmonyTokens  # noqa: E402
from bulkinfer.integrations.lm_eval import BulkinferLM  # noqa: E402
from bulkinfer.integrations.lm_eval_settings import ModelArgsError  # noqa: E402

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


def _generate(lm: BulkinferLM, context: str) -> str:
    markers = HarmonyTokens.of(lm.tokenizer).markers  # kept out, so the model stays in the channel it was put in
    kwargs = {"until": [], "max_gen_toks": 8, "logit_bias": {token: -100.0 for token in markers}}
    [text] = lm.generate_until([Instance(request_type="generate_until", doc={}, idx=0, arguments=(context, kwargs))],
                               disable_tqdm=True)
    return text


@pytest.fixture(scope="module")
def plain(tiny_harmony):
    """No reasoning parser: the model's whole output is the text."""
    return BulkinferLM(pretrained=str(tiny_harmony), dtype="float32", device="cpu", max_length=512,
                       reasoning_parser="none")


def test_generate_until_leaves_the_reasoning_out(plain, tiny_harmony):
    thinking = get_model("bulkinfer").create_from_arg_string(
        f"pretrained={tiny_harmony},dtype=float32,device=cpu,max_length=512")
    kept = get_model("bulkinfer").create_from_arg_string(
        f"pretrained={tiny_harmony},dtype=float32,device=cpu,max_length=512,keep_reasoning=true")
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
