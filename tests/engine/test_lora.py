"""LoRA adapters chosen per request, against transformers with each adapter merged in by peft."""

from __future__ import annotations

import pytest
import torch
from lora_adapters import make_adapter, merged_model

from bulkinfer import LLM, LoRARequest, SamplingParams

MAX_TOKENS = 6


@pytest.fixture(scope="module")
def adapters(tiny_llama, tmp_path_factory):
    """Three adapters of different ranks on all seven projections, one with rsLoRA scaling."""
    root = tmp_path_factory.mktemp("adapters")
    made = [make_adapter(tiny_llama, root / "a", rank=4, seed=1),
            make_adapter(tiny_llama, root / "b", rank=8, seed=2, lora_alpha=4),
            make_adapter(tiny_llama, root / "c", rank=16, seed=3, use_rslora=True)]
    return [LoRARequest(path.name, index + 1, str(path)) for index, path in enumerate(made)]


@pytest.fixture(scope="module")
def references(tiny_llama, adapters):
    """The merged reference model per adapter name, and the base model under None."""
    return {None: merged_model(tiny_llama, None),
            **{lora.lora_name: merged_model(tiny_llama, lora.lora_path) for lora in adapters}}


def prompts(count: int, length: int, seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(5, 600, (length + i,), generator=generator).tolist() for i in range(count)]


def check_outputs(references, prompt_ids, loras, outputs):
    """Each greedy token is the merged model's argmax (or a tie), and its logprob is the merged model's."""
    for prompt, lora, output in zip(prompt_ids, loras, outputs):
        assert output.error is None, output.error
        completion = output.outputs[0]
        with torch.no_grad():
            logits = references[lora and lora.lora_name](torch.tensor([prompt + completion.token_ids])).logits[0]
        logprobs = logits[len(prompt) - 1:-1].log_softmax(-1)
        chosen = logprobs.gather(1, torch.tensor(completion.token_ids)[:, None])[:, 0]
        assert torch.all(chosen >= logprobs.max(-1).values - 1e-5), (lora, prompt)
        ours = torch.tensor([position[token].logprob for token, position in
                             zip(completion.token_ids, completion.logprobs)])
        torch.testing.assert_close(ours, chosen, atol=1e-4, rtol=0)


def generate(llm, prompt_ids, loras):
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, logprobs=0)
    return llm.generate(prompt_ids, params, use_tqdm=False, lora_request=loras)


@pytest.mark.parametrize("options", [
    {},
    {"max_num_batched_tokens": 16},  # prompts prefilled in chunks
    {"num_kv_blocks": 12},  # too few blocks for the batch: sequences are preempted and recomputed
    {"max_loras": 2, "max_cpu_loras": 1},  # three adapters over two slots: evicted and read again
], ids=["plain", "chunked", "preempted", "evicted"])
def test_a_batch_mixing_adapters_and_base_rows_matches_the_merged_models(tiny_llama, adapters, references,
                                                                          options):
    llm = LLM(str(tiny_llama), dtype="float32", enable_lora=True, block_size=4, max_model_len=128,
              enable_prefix_caching=False, **options)
    prompt_ids = prompts(8, 11)
    loras = [[*adapters, None][i % 4] for i in range(len(prompt_ids))]
    check_outputs(references, prompt_ids, loras, generate(llm, prompt_ids, loras))
    if "num_kv_blocks" in options:
        assert llm.stats.preemptions > 0


def test_adapters_change_the_output(tiny_llama, adapters):
    """The check above would pass for an engine that ignored adapters if they did not change the tokens."""
    llm = LLM(str(tiny_llama), dtype="float32", enable_lora=True, max_model_len=128)
    prompt = prompts(1, 12)[0]
    outputs = generate(llm, [prompt] * 4, [*adapters, None])
    assert len({tuple(o.outputs[0].token_ids) for o in outputs}) == 4


def test_the_prefix_cache_never_serves_one_adapter_the_blocks_of_another(tiny_llama, adapters, references):
    llm = LLM(str(tiny_llama), dtype="float32", enable_lora=True, block_size=4, max_model_len=128)
    prompt = prompts(1, 21)[0]
    order = [adapters[0], adapters[1], None, adapters[0]]
    outputs = [generate(llm, [prompt], [lora])[0] for lora in order]
    check_outputs(references, [prompt] * 4, order, outputs)
    assert [o.num_cached_tokens for o in outputs] == [0, 0, 0, 20]  # only the same adapter again hits


def test_an_adapter_that_cannot_run_is_that_requests_error(tiny_llama, adapters, tmp_path):
    llm = LLM(str(tiny_llama), dtype="float32", enable_lora=True, max_lora_rank=8, max_model_len=128)
    refused = {
        "missing": (tmp_path / "nowhere", "no adapter_config.json"),
        "dora": (make_adapter(tiny_llama, tmp_path / "dora", 4, 0, use_dora=True), "DoRA"),
        "embed": (make_adapter(tiny_llama, tmp_path / "embed", 4, 0, targets=["embed_tokens"]), "embeddings"),
        "bias": (make_adapter(tiny_llama, tmp_path / "bias", 4, 0, bias="lora_only"), "biases"),
        "rank": (adapters[2].lora_path, "above max_lora_rank (8)"),
    }
    loras = [LoRARequest(name, 10 + i, str(path)) for i, (name, (path, _)) in enumerate(refused.items())]
    outputs = generate(llm, [[5, 6, 7]] * (len(loras) + 1), [*loras, adapters[0]])
    for output, (path, reason) in zip(outputs, refused.values()):
        assert output.error is not None and reason in output.error and "\n" not in output.error
    assert outputs[-1].error is None


def test_an_adapter_asked_of_an_engine_without_lora_is_the_requests_error(tiny_llama, adapters):
    output = generate(LLM(str(tiny_llama), dtype="float32", max_model_len=128), [[5, 6, 7]], [adapters[0]])[0]
    assert "enable_lora" in output.error


def test_tensor_parallelism_with_adapters_is_refused_in_one_line(tiny_llama):
    with pytest.raises(ValueError, match="LoRA adapters run without tensor parallelism"):
        LLM(str(tiny_llama), dtype="float32", enable_lora=True, tensor_parallel_size=2)


def test_loglikelihood_under_an_adapter_is_the_merged_models(tiny_llama, adapters, references):
    llm = LLM(str(tiny_llama), dtype="float32", enable_lora=True, max_model_len=128)
    context, continuation = prompts(2, 9)
    score = llm.loglikelihood_tokens([(context, continuation)], lora_request=adapters[1])[0]
    with torch.no_grad():
        logits = references[adapters[1].lora_name](torch.tensor([context + continuation])).logits[0]
    expected = logits[len(context) - 1:-1].log_softmax(-1).gather(1, torch.tensor(continuation)[:, None]).sum()
    assert score.logprob == pytest.approx(float(expected), abs=1e-3)


def test_adapters_on_the_transformers_path_are_refused_in_one_line(tiny_llama):
    with pytest.raises(ValueError, match=r"LoRA adapters \(enable_lora\) needs bulkinfer's native code"):
        LLM(str(tiny_llama), dtype="float32", enable_lora=True, model_impl="transformers")


def test_a_request_whose_adapter_finds_no_free_slot_waits_for_one(tiny_llama, adapters, references):
    """One slot, two adapters: no step ever runs both, and every request finishes with its adapter's tokens."""
    llm = LLM(str(tiny_llama), dtype="float32", enable_lora=True, max_loras=1, max_model_len=128)
    steps = []
    execute = llm.runner.execute

    def recording(batch):
        steps.append({seq.lora.lora_int_id for seq in batch.seqs if seq.lora is not None})
        return execute(batch)

    llm.runner.execute = recording
    prompt_ids = prompts(6, 9)
    loras = [adapters[0], adapters[1], None] * 2
    check_outputs(references, prompt_ids, loras, generate(llm, prompt_ids, loras))
    assert all(len(adapters_run) <= 1 for adapters_run in steps)
    assert {1, 2} <= set().union(*steps)
