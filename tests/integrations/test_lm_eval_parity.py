"""The bulkinfer backend against lm_eval's own hf backend on the same models and local tasks:
accuracy equal, log-likelihoods within 1e-3, greedy generations identical. The models: the native
llama, the native hybrids Qwen3.5, Granite 4.0-H and LFM2 (their recurrent state on the engine's pool), native DeepSeek-V3
(latent attention), and architectures that run through the transformers path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

lm_eval = pytest.importorskip("lm_eval")
pytest.importorskip("accelerate")  # lm_eval's hf backend needs it

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.registry import get_model  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

import bulkinfer.integrations.lm_eval  # noqa: E402,F401  (registers "bulkinfer")
from harness_tasks import GREEDY_CONTEXTS, TASKS, write_tasks  # noqa: E402

MAX_LENGTH = 64  # small, so long texts need several rolling windows and long prompts get cut
# Name -> (checkpoint arch, its overrides, bulkinfer model_impl). Gemma 3 brings sliding windows and a final
# soft-cap; Granite scales its logits, so a log-likelihood taken before the scaling would show; DeepSeek-V2 through
# transformers has values narrower than its keys; native DeepSeek-V3 caches latent rows.
MODELS = {"llama": ("llama", {}, "native"), "gemma3_text": ("gemma3_text", {}, "transformers"),
          "granite": ("granite", {}, "transformers"), "deepseek_v2": ("deepseek_v2", {}, "transformers"),
          "deepseek_v3_native": ("deepseek_v3", {}, "native"),
          "qwen3_5": ("qwen3_5", {}, "native"),
          "granite_h": ("granite_h", {}, "native"), "lfm2": ("lfm2", {}, "native")}


@pytest.fixture(scope="module", params=["llama", "granite", pytest.param("gemma3_text", marks=pytest.mark.slow),
                                        pytest.param("deepseek_v2", marks=pytest.mark.slow),
                                        pytest.param("deepseek_v3_native", marks=pytest.mark.slow),
                                        pytest.param("qwen3_5", marks=pytest.mark.slow),
                                        pytest.param("granite_h", marks=pytest.mark.slow),
                                        pytest.param("lfm2", marks=pytest.mark.slow)])
def model(request, checkpoint_factory) -> tuple[Path, str]:
    arch, overrides, model_impl = MODELS[request.param]
    return checkpoint_factory(arch, **overrides), model_impl


@pytest.fixture(scope="module")
def hf_lm(model):
    return get_model("hf")(pretrained=str(model[0]), dtype="float32", device="cpu", max_length=MAX_LENGTH)


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory, hf_lm) -> Path:
    return write_tasks(tmp_path_factory.mktemp("harness_tasks"), _greedy_continuations(hf_lm))


def _greedy_continuations(hf_lm) -> list[str]:
    requests = [Instance(request_type="generate_until", doc={}, idx=0,
                         arguments=(context, {"until": [], "max_gen_toks": 3, "do_sample": False}))
                for context in GREEDY_CONTEXTS]
    return hf_lm.generate_until(requests, disable_tqdm=True)


def _evaluate(model: Any, task_dir: Path, model_args: str | None = None) -> dict:
    return lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=list(TASKS),
                                   # Leaving out lm_eval's own thousands of tasks saves seconds of indexing.
                                   task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
                                   log_samples=True, bootstrap_iters=0, batch_size=1)


@pytest.fixture(scope="module")
def runs(hf_lm, task_dir, model) -> dict[str, dict]:
    path, model_impl = model
    model_args = (f"pretrained={path},dtype=float32,device=cpu,max_model_len={MAX_LENGTH},block_size=8,"
                  f"model_impl={model_impl}")
    return {"hf": _evaluate(hf_lm, task_dir), "bulkinfer": _evaluate("bulkinfer", task_dir, model_args)}


def _samples(runs: dict[str, dict], task: str) -> list[tuple[dict, dict]]:
    pairs = list(zip(runs["hf"]["samples"][task], runs["bulkinfer"]["samples"][task], strict=True))
    for hf, ours in pairs:
        assert hf["doc_id"] == ours["doc_id"] and hf["arguments"] == ours["arguments"]
    return pairs


def test_multiple_choice_accuracy_is_equal_and_scores_close(runs):
    hf, ours = runs["hf"]["results"]["bi_mc"], runs["bulkinfer"]["results"]["bi_mc"]
    assert ours["acc,none"] == hf["acc,none"]
    assert ours["acc_norm,none"] == hf["acc_norm,none"]
    for hf_sample, our_sample in _samples(runs, "bi_mc"):
        for [(hf_logprob, _)], [(our_logprob, _)] in zip(hf_sample["resps"], our_sample["resps"], strict=True):
            assert our_logprob == pytest.approx(hf_logprob, abs=1e-3)


def test_loglikelihood_and_is_greedy_agree(runs):
    hf, ours = runs["hf"]["results"]["bi_ll"], runs["bulkinfer"]["results"]["bi_ll"]
    assert ours["acc,none"] == hf["acc,none"] > 0  # some targets are the greedy continuation
    assert ours["perplexity,none"] == pytest.approx(hf["perplexity,none"], rel=1e-3)
    for hf_sample, our_sample in _samples(runs, "bi_ll"):
        [[(hf_logprob, hf_greedy)]], [[(our_logprob, our_greedy)]] = hf_sample["resps"], our_sample["resps"]
        assert our_logprob == pytest.approx(hf_logprob, abs=1e-3)
        assert our_greedy == hf_greedy


def test_rolling_loglikelihood_agrees_over_several_windows(runs):
    for hf_sample, our_sample in _samples(runs, "bi_ppl"):
        [[hf_total]], [[our_total]] = hf_sample["resps"], our_sample["resps"]
        # A total sums hundreds of log-probabilities, each within fp32 rounding of transformers' (whose delta rule
        # sums in 64-token chunks, another order than a recurrence): 1e-5 of the total, at least 1e-3.
        assert our_total == pytest.approx(hf_total, abs=1e-3, rel=1e-5)
    hf, ours = runs["hf"]["results"]["bi_ppl"], runs["bulkinfer"]["results"]["bi_ppl"]
    for metric in ("word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none"):
        assert ours[metric] == pytest.approx(hf[metric], rel=1e-3)


def test_greedy_generations_are_identical(runs):
    generations = []
    for hf_sample, our_sample in _samples(runs, "bi_gen"):
        assert our_sample["resps"] == hf_sample["resps"]
        generations.append(our_sample["resps"][0][0])
    assert sum(bool(text) for text in generations) >= len(generations) // 2  # not trivially empty
    assert runs["bulkinfer"]["results"]["bi_gen"]["exact_match,none"] == runs["hf"]["results"]["bi_gen"]["exact_match,none"]
