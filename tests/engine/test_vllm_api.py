"""Code written for vLLM's offline API runs on bulkinfer with only its imports changed: LLM.chat renders
as transformers' apply_chat_template does, get_tokenizer, structured_outputs / guided_decoding, and
vLLM's output fields."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from bulkinfer import LLM, SamplingParams
from bulkinfer.engine.chat_sandbox import MAX_SECONDS
from bulkinfer.sampling_params import GuidedDecodingParams, StructuredOutputsParams
from bulkinfer.settings import settings_of

SCRIPT = Path(__file__).with_name("vllm_offline_script.py")
CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def llm(tiny_llama: Path) -> LLM:
    return LLM(str(tiny_llama), max_model_len=256)


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_llama: Path):
    return AutoTokenizer.from_pretrained(str(tiny_llama))


def test_a_vllm_script_runs_with_only_its_imports_changed(tiny_llama: Path, tmp_path: Path) -> None:
    source = SCRIPT.read_text()
    assert "from vllm import LLM, SamplingParams" in source
    script = tmp_path / "script.py"
    script.write_text(source.replace("from vllm", "from bulkinfer"))
    done = subprocess.run([sys.executable, str(script), str(tiny_llama)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("OK")


def test_chat_prompt_is_transformers_apply_chat_template(llm: LLM, hf_tokenizer) -> None:
    [output] = llm.chat(CONVERSATION, SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)
    assert output.prompt == hf_tokenizer.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    # The template writes BOS itself: tokenized without adding another, as transformers tokenizes it.
    expected = hf_tokenizer.apply_chat_template(CONVERSATION, add_generation_prompt=True, return_dict=True)
    assert output.prompt_token_ids == expected["input_ids"]
    assert output.prompt_token_ids[1] != hf_tokenizer.bos_token_id


def test_chat_takes_a_list_of_conversations_and_the_render_options(llm: LLM, hf_tokenizer) -> None:
    template = "{{ greeting }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{% endfor %}" \
               "{% if add_generation_prompt %}[assistant]{% endif %}"
    conversations = [CONVERSATION[:2], CONVERSATION]
    outputs = llm.chat(conversations, SamplingParams(temperature=0, max_tokens=2), use_tqdm=False,
                       chat_template=template, add_generation_prompt=False,
                       chat_template_kwargs={"greeting": "Hey "})
    expected = [hf_tokenizer.apply_chat_template(c, chat_template=template, tokenize=False,
                                                 add_generation_prompt=False, greeting="Hey ")
                for c in conversations]
    assert [o.prompt for o in outputs] == expected
    assert expected[0] == "Hey [system] Be brief.[user] Hi"


def test_chat_continues_a_final_message_as_transformers(llm: LLM, hf_tokenizer) -> None:
    [output] = llm.chat(CONVERSATION[:3], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False,
                        add_generation_prompt=False, continue_final_message=True)
    assert output.prompt == hf_tokenizer.apply_chat_template(CONVERSATION[:3], tokenize=False,
                                                             continue_final_message=True)


def test_a_chat_template_given_by_the_caller_runs_in_the_sandbox(llm: LLM) -> None:
    started = time.monotonic()
    with pytest.raises(ValueError, match="^conversation 0: chat template stopped: "):
        llm.chat(CONVERSATION, chat_template="{{ range(10**9) | list | length }}", use_tqdm=False)
    assert time.monotonic() - started < MAX_SECONDS + 1


def test_chat_joins_openai_text_parts_and_refuses_other_parts(llm: LLM) -> None:
    params = SamplingParams(temperature=0, max_tokens=2)
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "2+2?"}]}]
    [joined] = llm.chat(parts, params, use_tqdm=False)
    [plain] = llm.chat([{"role": "user", "content": "What is\n2+2?"}], params, use_tqdm=False)
    assert joined.prompt == plain.prompt
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    with pytest.raises(ValueError, match=r"conversation 0: only text content parts .* are supported, got image_url"):
        llm.chat(image, params, use_tqdm=False)


def test_get_tokenizer_is_the_engines_tokenizer(llm: LLM, hf_tokenizer) -> None:
    assert llm.get_tokenizer() is llm.tokenizer
    assert llm.get_tokenizer().encode("Hello there") == hf_tokenizer.encode("Hello there")


def test_generate_takes_vllms_prompt_dicts(llm: LLM) -> None:
    params = SamplingParams(temperature=0, max_tokens=4)
    ids = llm.tokenizer.encode("Hello there")
    by_text, by_ids = llm.generate("Hello there", params, use_tqdm=False)[0], llm.generate(ids, params, use_tqdm=False)[0]
    from_dicts = llm.generate([{"prompt": "Hello there"}, {"prompt_token_ids": ids}], params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in from_dicts] == [by_text.outputs[0].token_ids, by_ids.outputs[0].token_ids]
    assert llm.generate({"prompt": "Hello there"}, params, use_tqdm=False)[0].prompt == "Hello there"
    with pytest.raises(ValueError, match="needs a 'prompt' or a 'prompt_token_ids' key"):
        llm.generate({"text": "Hello there"}, params, use_tqdm=False)


def test_outputs_carry_vllms_fields(llm: LLM) -> None:
    prompt = "A long shared prefix that fills more than one KV block of sixteen tokens, then some more text."
    params = SamplingParams(temperature=0, max_tokens=3)
    first, second = (llm.generate(prompt, params, use_tqdm=False)[0] for _ in range(2))
    assert first.num_cached_tokens == 0
    assert second.num_cached_tokens >= 16  # the prefix cache served at least one whole block
    assert second.outputs[0].finished() and second.outputs[0].text == first.outputs[0].text


@pytest.mark.parametrize("wrapper", [StructuredOutputsParams, GuidedDecodingParams])
@pytest.mark.parametrize("field, value", [("json", {"type": "object"}), ("regex", "a+"), ("choice", ["x", "y"]),
                                          ("grammar", 'start: "a"'), ("json_object", True)])
def test_wrapped_constraints_land_on_the_constraint_fields(wrapper, field, value) -> None:
    argument = "structured_outputs" if wrapper is StructuredOutputsParams else "guided_decoding"
    wrapped = SamplingParams(**{argument: wrapper(**{field: value})})
    assert wrapped.constraint == SamplingParams(**{field: value}).constraint is not None
    # dataclasses.replace, as a job does per row, keeps the constraint and may override it.
    assert dataclasses.replace(wrapped, n=2).constraint == wrapped.constraint


@pytest.mark.parametrize("arguments, message", [
    (dict(structured_outputs=StructuredOutputsParams(regex="a", choice=["x"])), "give at most one of"),
    (dict(regex="b", structured_outputs=StructuredOutputsParams(regex="a")), "regex is given both"),
    (dict(json="{}", guided_decoding=GuidedDecodingParams(regex="a")), "give at most one of"),
    (dict(structured_outputs=StructuredOutputsParams(regex="a"), guided_decoding=GuidedDecodingParams(regex="a")),
     "not both"),
    (dict(structured_outputs={"regex": "a"}), "must be a StructuredOutputsParams, got dict"),
])
def test_wrapped_constraints_are_checked(arguments, message) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingParams(**arguments)


def test_the_wrappers_are_no_settings() -> None:
    names = {setting.name for setting in settings_of(SamplingParams)}
    assert not names & {"structured_outputs", "guided_decoding"}
