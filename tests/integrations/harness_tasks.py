"""Local lm-evaluation-harness tasks (YAML plus JSONL data) for the tests: nothing is downloaded.

One task per request type, each with a case that exercises a rule the backends must share:
few-shot contexts and answer choices (multiple_choice); a context ending in a space, an empty
context and one too long for the model (loglikelihood); texts longer than one window
(loglikelihood_rolling); a prompt longer than max_length - max_gen_toks (generate_until).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TASKS = ("bi_mc", "bi_ll", "bi_ppl", "bi_gen")
# The parity test asks the model for each one's greedy continuation, so is_greedy is exercised.
# (Random models often emit pieces of a UTF-8 character, whose text encodes to other tokens and so
# is not greedy any more; with the tiny llama these three come back whole.)
GREEDY_CONTEXTS = ("Hello", "The river", "1 2 3 4")
FIXED_LL_ROWS = [("The cat sat on the ", "mat"), ("", "The weather is good today."), ("One two three", " four")]
MAX_GEN_TOKS = 16

_DATASET = """dataset_path: json
dataset_kwargs:
  data_files: {test: "DATA"}
  cache_dir: "CACHE"
test_split: test
"""

_MC = """task: bi_mc
fewshot_split: test
num_fewshot: 2
output_type: multiple_choice
doc_to_text: "Question: {{question}}\\nAnswer:"
doc_to_choice: "{{choices}}"
doc_to_target: gold
metric_list: [{metric: acc}, {metric: acc_norm}]
"""

_LL = """task: bi_ll
output_type: loglikelihood
doc_to_text: "{{context}}"
doc_to_target: "{{target}}"
metric_list: [{metric: perplexity}, {metric: acc}]
"""

_PPL = """task: bi_ppl
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{text}}"
metric_list: [{metric: word_perplexity}, {metric: byte_perplexity}, {metric: bits_per_byte}]
"""

_GEN = """task: bi_gen
output_type: generate_until
doc_to_text: "{{prompt}}"
doc_to_target: "{{answer}}"
generation_kwargs: {until: ["\\n", "."], max_gen_toks: MAX_GEN_TOKS, do_sample: false}
metric_list: [{metric: exact_match}]
"""

_WORDS = ("the a model engine cat river house book letter story question answer number time day "
          "year good small large new old one two three").split()


def write_tasks(root: Path, greedy_targets: list[str] | None = None) -> Path:
    """Write the four tasks into root (their --include_path) and return it."""
    targets = greedy_targets or [" world", " flows", " 5"]
    # The last context is longer than max_length (64): it must lose its oldest tokens alike.
    ll_rows = list(zip(GREEDY_CONTEXTS, targets)) + FIXED_LL_ROWS + [(" ".join(_WORDS * 3), " story")]
    _write(root, "bi_mc", _MC, _mc_rows())
    _write(root, "bi_ll", _LL, [{"context": c, "target": t} for c, t in ll_rows])
    _write(root, "bi_ppl", _PPL, [{"text": text} for text in _texts()])
    _write(root, "bi_gen", _GEN.replace("MAX_GEN_TOKS", str(MAX_GEN_TOKS)), _gen_rows())
    return root


def _write(root: Path, name: str, config: str, rows: list[dict]) -> None:
    data = root / f"{name}.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    dataset = _DATASET.replace("DATA", str(data)).replace("CACHE", str(root / "datasets_cache"))
    (root / f"{name}.yaml").write_text(config + dataset)


def _mc_rows() -> list[dict]:
    rows = []
    for index, (a, b) in enumerate([(1, 2), (3, 4), (10, 5), (7, 7), (2, 9), (6, 1), (8, 8), (12, 3)]):
        choices = [str(a + b + delta) for delta in (1, -1, 2)]
        gold = index % 4  # the right answer moves around
        choices.insert(gold, str(a + b))
        rows.append({"question": f"What is {a} + {b}?", "choices": choices, "gold": gold})
    return rows


def _texts() -> list[str]:
    # With max_length 64, the longer ones need two to five windows.
    rng = random.Random(0)
    return [" ".join(rng.choice(_WORDS) for _ in range(n)).capitalize() + "." for n in (5, 20, 60, 150)]


def _gen_rows() -> list[dict]:
    prompts = ["Count: one two three", "The cat sat on the", "Question: What is 2 + 2?\nAnswer:",
               "Once upon a time", " ".join(_WORDS * 3), "Hello"]
    return [{"prompt": prompt, "answer": " four"} for prompt in prompts]
