"""lm-eval through the bulkinfer backend with a LoRA adapter, against lm_eval's own hf backend with peft."""

from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")
pytest.importorskip("accelerate")  # lm_eval's hf backend needs it

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.registry import get_model  # noqa: E402

import bulkinfer.integrations.lm_eval  # noqa: E402,F401 - registers the backend
from bulkinfer.integrations.lm_eval_settings import ModelArgsError  # noqa: E402
from lora_adapters import make_adapter  # noqa: E402

PAIRS = [("The cat", " sat on the mat"), ("Hello", " world"), ("one two", " three four")]


def test_loglikelihood_with_an_adapter_is_hfs_with_the_peft_adapter(tiny_llama, tmp_path):
    adapter = make_adapter(tiny_llama, tmp_path / "sql", rank=8, seed=7, use_rslora=True)
    hf = get_model("hf")(pretrained=str(tiny_llama), peft=str(adapter), dtype="float32", device="cpu")
    ours = get_model("bulkinfer").create_from_arg_string(f"pretrained={tiny_llama},lora=sql={adapter},device=cpu,dtype=float32")
    base = get_model("bulkinfer").create_from_arg_string(f"pretrained={tiny_llama},device=cpu,dtype=float32")
    requests = [Instance(request_type="loglikelihood", doc={}, idx=i, arguments=pair) for i, pair in enumerate(PAIRS)]
    expected = hf.loglikelihood(requests, disable_tqdm=True)
    for (hf_logprob, hf_greedy), (our_logprob, our_greedy), (base_logprob, _) in zip(
            expected, ours.loglikelihood(requests, disable_tqdm=True), base.loglikelihood(requests, disable_tqdm=True)):
        # Sums of a few large fp32 log-probabilities (the random adapter sharpens the logits): relative tolerance.
        assert our_logprob == pytest.approx(hf_logprob, rel=1e-4, abs=1e-3) and our_greedy == hf_greedy
        assert base_logprob != pytest.approx(hf_logprob, abs=1e-2)  # the adapter does change the scores


@pytest.mark.parametrize("args, message", [
    ("lora=sql", "lora must be NAME=PATH"),
    ("lora_path=/no/such/adapter", "no adapter_config.json"),
])
def test_a_bad_lora_model_arg_is_one_line(tiny_llama, args, message):
    with pytest.raises(ModelArgsError, match=message):
        get_model("bulkinfer").create_from_arg_string(f"pretrained={tiny_llama},{args},device=cpu")
