"""A script written against vLLM's documented offline API, as a vLLM user writes one. The test runs it with
only its import lines changed to bulkinfer; it prints OK when every check held. argv[1]: a checkpoint."""

import re
import sys

from vllm import LLM, SamplingParams
from vllm.sampling_params import GuidedDecodingParams, StructuredOutputsParams

llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=256, seed=0, enforce_eager=True)
tokenizer = llm.get_tokenizer()

prompts = ["Hello, my name is", "The capital of France is"]
greedy = SamplingParams(temperature=0.0, max_tokens=8, logprobs=2)
for output in llm.generate(prompts, greedy):
    assert output.finished and output.request_id is not None
    assert output.prompt_token_ids == tokenizer(output.prompt).input_ids
    completion = output.outputs[0]
    assert completion.index == 0 and completion.finished() and completion.finish_reason in ("stop", "length")
    assert len(completion.logprobs) == len(completion.token_ids)
    total = sum(step[token].logprob for step, token in zip(completion.logprobs, completion.token_ids))
    assert abs(total - completion.cumulative_logprob) < 1e-4

by_tokens = llm.generate({"prompt_token_ids": tokenizer(prompts[0]).input_ids}, greedy, use_tqdm=False)
assert by_tokens[0].outputs[0].token_ids == llm.generate(prompts[0], greedy)[0].outputs[0].token_ids

conversation = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}]
sampled = llm.chat(conversation, SamplingParams(temperature=0.8, top_p=0.95, max_tokens=8, seed=1, n=2),
                   use_tqdm=False)
assert len(sampled) == 1 and [c.index for c in sampled[0].outputs] == [0, 1]

parts = [{"role": "user", "content": [{"type": "text", "text": "Hi there"}]}]
outputs = llm.chat([conversation, parts], SamplingParams(temperature=0, max_tokens=4),
                   add_generation_prompt=True, chat_template_kwargs={"enable_thinking": False})
expected = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
assert outputs[0].prompt == expected, (outputs[0].prompt, expected)
assert outputs[1].prompt == tokenizer.apply_chat_template([{"role": "user", "content": "Hi there"}],
                                                          tokenize=False, add_generation_prompt=True)

answers = llm.generate(
    ["Is the sky blue?", "Three digits:"],
    [SamplingParams(temperature=0, structured_outputs=StructuredOutputsParams(choice=["yes", "no"])),
     SamplingParams(temperature=0, max_tokens=16, guided_decoding=GuidedDecodingParams(regex="[0-9]{3}"))])
assert answers[0].outputs[0].text in ("yes", "no"), answers[0].outputs[0].text
assert re.fullmatch("[0-9]{3}", answers[1].outputs[0].text), answers[1].outputs[0].text
print("OK")
