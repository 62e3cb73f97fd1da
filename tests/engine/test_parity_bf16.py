"""bfloat16 on the CPU: our model code against transformers', both in bfloat16, on the same bfloat16 checkpoints.

Two implementations in bfloat16 round at different places (a fused QKV projection, attention in float32 or in
bfloat16, the residual added before or after a cast), so their logits differ by some of bfloat16's units in the
last place, not by float32's. bfloat16 keeps 8 significant bits: at the logits' scale one unit is at most
max |logit| * 2**-7, and each layer's roundings add up to a few of them. On these checkpoints transformers' own
bfloat16 logits differ from its float32 ones by up to 5.4 units, and ours from its bfloat16 ones by up to 5.3
(2026-12-03), so the bound is LOGIT_ULPS = 8 units. A greedy token may differ from transformers' argmax only
where transformers' own top two logits are within that bound (a near-tie); such tokens are counted, and only a
few may be. In a dense model our token must then be within the bound of transformers' best too; in a mixture of
experts a near-tie of the router can send a token to another expert in one layer, which moves the logits further.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from bulkinfer import LLM, SamplingParams
from probes import last_logits
from test_parity import prompts

ARCHS = ["llama", "qwen3", "qwen3_moe"]  # dense Llama, Qwen3 (q/k norms), and a mixture of experts
ROUTED = {"qwen3_moe"}
LOGIT_ULPS = 8
MAX_TOKENS = 12


def logit_tolerance(logits: torch.Tensor) -> float:
    return LOGIT_ULPS * logits.abs().max().item() * 2 ** -7


@pytest.fixture(scope="module", params=ARCHS)
def models(request, checkpoint_factory):
    path = checkpoint_factory(request.param, dtype="bfloat16")
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="eager").eval()
    return hf, LLM(str(path), dtype="bfloat16", block_size=8, max_model_len=256), request.param


def hf_logits(hf, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].float()


def test_last_logits_are_within_bfloat16_tolerance(models):
    hf, llm, _ = models
    for ids in prompts(llm.tokenizer.vocab_size):
        expected = hf_logits(hf, ids)[-1]
        torch.testing.assert_close(last_logits(llm, ids), expected, atol=logit_tolerance(expected), rtol=0)


def test_greedy_tokens_equal_transformers_except_at_near_ties(models):
    """Teacher-forced: at each step our token is transformers' argmax, or transformers' top two are a near-tie."""
    hf, llm, arch = models
    prompt_ids = prompts(llm.tokenizer.vocab_size)
    outputs = llm.generate(prompt_ids, SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True),
                           use_tqdm=False)
    near_ties = 0
    for prompt, output in zip(prompt_ids, outputs):
        tokens = output.outputs[0].token_ids
        logits = hf_logits(hf, prompt + tokens)[len(prompt) - 1:-1]
        for position, (token, row) in enumerate(zip(tokens, logits)):
            if token != row.argmax().item():
                best, runner_up = row.topk(2).values.tolist()
                assert best - runner_up <= logit_tolerance(row), (prompt, tokens, position)  # a near-tie
                if arch not in ROUTED:
                    assert row[token] >= best - logit_tolerance(row), (prompt, tokens, position)  # of our token
                near_ties += 1
    assert near_ties <= len(prompt_ids) * MAX_TOKENS // 10, near_ties
