"""Our model code against transformers' on the same tiny checkpoints, in fp32."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from bulkinfer import LLM, SamplingParams
from probes import last_logits

ARCHS = ["llama", "llama3", "mistral", "qwen2", "qwen3"]
PROMPT_LENGTHS = [1, 2, 7, 8, 9, 31, 64, 100]


def hf_model(path):
    """The reference: transformers' eager attention, written out in plain PyTorch for every architecture."""
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()


def prompts(vocab: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(5, vocab, (n,), generator=generator).tolist() for n in PROMPT_LENGTHS]


def assert_greedy_matches(hf, prompt_ids, outputs):
    """Teacher-forced: each token we chose is transformers' argmax at that position, or a tie."""
    for prompt, output in zip(prompt_ids, outputs):
        tokens = output.outputs[0].token_ids
        with torch.no_grad():
            logits = hf(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1]
        chosen = logits.gather(1, torch.tensor(tokens)[:, None])[:, 0]
        assert torch.all(chosen >= logits.max(-1).values - 1e-5), (prompt, tokens)


def check_against_transformers(path, block_size: int, num_prompts: int, max_tokens: int, atol: float = 1e-4,
                               **options) -> LLM:
    """Last-position logits within ``atol``, then greedy generations token for token; ``options`` go to LLM."""
    options = {"dtype": "float32", **options}  # fp32 unless a caller asks otherwise: the reference is fp32
    hf, llm = hf_model(path), LLM(str(path), block_size=block_size, max_model_len=256, **options)
    prompt_ids = prompts(llm.tokenizer.vocab_size)[:num_prompts]
    for ids in prompt_ids:
        with torch.no_grad():
            expected = hf(torch.tensor([ids])).logits[0, -1]
        torch.testing.assert_close(last_logits(llm, ids), expected, atol=atol, rtol=0)
    outputs = llm.generate(prompt_ids, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True),
                           use_tqdm=False)
    assert all(len(o.outputs[0].token_ids) == max_tokens for o in outputs)
    assert_greedy_matches(hf, prompt_ids, outputs)
    return llm


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_and_greedy_match_transformers(checkpoint_factory, arch):
    check_against_transformers(checkpoint_factory(arch), block_size=8, num_prompts=len(PROMPT_LENGTHS),
                               max_tokens=16)


@pytest.mark.parametrize("overrides", [
    {"num_key_value_heads": 4},  # MHA
    {"num_key_value_heads": 1},  # MQA
    {"tie_word_embeddings": True},
    {"sharded": True},
], ids=["mha", "mqa", "tied", "sharded"])
def test_variants_match_transformers(checkpoint_factory, overrides):
    check_against_transformers(checkpoint_factory("llama", **overrides), block_size=4, num_prompts=5,
                               max_tokens=8)


def test_text_prompts_are_tokenized_like_transformers(tiny_llama):
    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=128)
    [output] = llm.generate("The quick brown fox", SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    assert output.prompt_token_ids == llm.tokenizer("The quick brown fox").input_ids
    assert output.prompt == "The quick brown fox"
