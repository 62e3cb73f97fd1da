"""The bulkinfer backend's pieces: tokenization as lm_eval's hf backend does it, model_args,
and generate_until's settings."""

from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")
pytest.importorskip("accelerate")  # lm_eval's hf backend needs it

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.registry import get_model  # noqa: E402

from bulkinfer.integrations.lm_eval import BulkinferLM  # noqa: E402
from bulkinfer.integrations.lm_eval_settings import ModelArgsError  # noqa: E402

TEXTS = ["Hello world", "<s>Hello world", "  leading spaces", "The cat sat on the mat.\n\nQ: why?"]
MAX_LENGTH = 32


@pytest.fixture(scope="module", params=[None, False, True], ids=["bos-default", "bos-off", "bos-on"])
def both(request, tiny_llama):
    """hf and bulkinfer on the tiny model, with add_bos_token unset, off and on."""
    bos = {} if request.param is None else {"add_bos_token": request.param}
    hf = get_model("hf")(pretrained=str(tiny_llama), dtype="float32", device="cpu", max_length=MAX_LENGTH, **bos)
    ours = BulkinferLM(pretrained=str(tiny_llama), dtype="float32", device="cpu", max_length=MAX_LENGTH, **bos)
    return hf, ours


def test_text_becomes_the_same_ids_as_in_hf(both):
    hf, ours = both
    assert ours.prefix_token_id == hf.prefix_token_id and ours.eot_token_id == hf.eot_token_id
    for text in TEXTS:
        assert ours.tok_encode(text) == hf.tok_encode(text)
        assert ours._encode_pair(text, " and more") == hf._encode_pair(text, " and more")


def test_generation_prompts_are_encoded_and_cut_as_in_hf(both):
    hf, ours = both
    for text in TEXTS + [" ".join(["word"] * 40)]:
        ids, _ = hf.tok_batch_encode([text], left_truncate_len=MAX_LENGTH - 8)
        assert ours._prompt_ids(text, 8) == ids[0].tolist()


def test_chat_templates_render_as_in_hf(both):
    hf, ours = both
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rendered = ours.apply_chat_template(chat)
    assert rendered == hf.apply_chat_template(chat)
    assert ours.tok_encode(rendered) == hf.tok_encode(rendered)  # BOS written by the template, not twice
    assert ours.tokenizer_name == hf.tokenizer_name


def test_unknown_model_args_are_a_clear_error(tiny_llama):
    with pytest.raises(ModelArgsError, match="unknown model_args for bulkinfer: num_beams"):
        get_model("bulkinfer").create_from_arg_string(f"pretrained={tiny_llama},num_beams=4")
    with pytest.raises(ModelArgsError, match="dtype"):  # the engine's own refusal, kept one line
        get_model("bulkinfer").create_from_arg_string(f"pretrained={tiny_llama},dtype=float8")


def test_harness_args_are_accepted(tiny_llama):
    lm = get_model("bulkinfer").create_from_arg_string(
        f"pretrained={tiny_llama},device=cpu,max_num_seqs=4,max_length=48,prefix_token_id=2,max_gen_toks=5",
        {"batch_size": 16, "max_batch_size": 64})
    assert lm.max_length == lm.llm.max_model_len == 48
    assert lm.llm.config.options.max_num_seqs == 4
    assert lm.prefix_token_id == 2 and lm.generation_defaults["max_tokens"] == 5


def test_generate_until_honours_stops_and_lengths(both):
    _, ours = both

    def generate(gen_kwargs: dict) -> str:
        [text] = ours.generate_until([Instance(request_type="generate_until", doc={}, idx=0,
                                               arguments=("Once upon a time", gen_kwargs))], disable_tqdm=True)
        return text

    free = generate({"until": [], "max_gen_toks": 12})
    stop = next(character for character in free[1:] if character.strip())  # one that occurs in it
    assert generate({"until": [stop], "max_gen_toks": 12}) == free[:free.index(stop)]
    short = generate({"until": [], "max_gen_toks": 2})
    assert len(ours.tokenizer.encode(short, add_special_tokens=False)) <= 2 and free.startswith(short)
    assert ours.generate_until([]) == []


def test_a_device_in_model_args_and_lm_evals_device_is_one_line(tiny_llama):
    with pytest.raises(ModelArgsError, match=r"^device given both in --model_args and by lm_eval's own options"):
        get_model("bulkinfer").create_from_arg_string(f"pretrained={tiny_llama},device=cpu", {"device": "cpu"})


def test_a_mixture_of_experts_model_scores_and_generates_as_in_hf(checkpoint_factory):
    path = str(checkpoint_factory("mixtral"))
    hf = get_model("hf")(pretrained=path, dtype="float32", device="cpu", max_length=MAX_LENGTH)
    ours = BulkinferLM(pretrained=path, dtype="float32", device="cpu", max_length=MAX_LENGTH)
    pairs = [Instance(request_type="loglikelihood", doc={}, idx=i, arguments=(context, continuation))
             for i, (context, continuation) in enumerate([("The cat", " sat on the mat"), ("Hello", " world")])]
    for (hf_logprob, hf_greedy), (our_logprob, our_greedy) in zip(hf.loglikelihood(pairs, disable_tqdm=True),
                                                                   ours.loglikelihood(pairs, disable_tqdm=True)):
        assert our_logprob == pytest.approx(hf_logprob, abs=1e-3) and our_greedy == hf_greedy
    greedy = [Instance(request_type="generate_until", doc={}, idx=0,
                       arguments=("Once upon a time", {"until": [], "max_gen_toks": 6, "do_sample": False}))]
    assert ours.generate_until(greedy, disable_tqdm=True) == hf.generate_until(greedy, disable_tqdm=True)
