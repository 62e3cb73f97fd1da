"""What bfloat16 gives up against float32 on the CPU, measured on the demo model.

Both dtypes answer the same addition prompts greedily (task accuracy, identical answers); then float32's answers
are fed back as prompts to both, and at every answer position the two next-token distributions are compared
(largest logprob difference, whether their best tokens agree).

    python benchmarks/bf16_accuracy.py --rows 300 --output benchmarks/results/cpu-demo-bf16-accuracy.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bulkinfer import LLM, SamplingParams
from bulkinfer.bench.run import machine_name, save_report

REPO = Path(__file__).resolve().parent.parent
DTYPES = ("float32", "bfloat16")


def answer_distributions(llm: LLM, prompts: list[list[int]], answers: list[list[int]]) -> list[list[dict]]:
    """For each prompt, the next-token logprobs (id -> logprob, the whole vocabulary) at each answer position."""
    vocab = llm.model_config.vocab_size
    outputs = llm.generate([{"prompt_token_ids": p + a} for p, a in zip(prompts, answers)],
                           SamplingParams(max_tokens=1, prompt_logprobs=vocab), use_tqdm=False)
    return [[{token: entry.logprob for token, entry in record.items()} for record in o.prompt_logprobs[len(p):]]
            for o, p in zip(outputs, prompts)]


def measure(rows: int) -> dict:
    data = [json.loads(line) for line in (REPO / "examples/data/addition.jsonl").read_text().splitlines()[:rows]]
    llms = {dtype: LLM(str(REPO / "examples/demo-model"), dtype=dtype, max_model_len=64, device="cpu")
            for dtype in DTYPES}
    greedy = SamplingParams(temperature=0, max_tokens=8)
    outputs = {dtype: llm.generate([row["prompt"] for row in data], greedy, use_tqdm=False) for dtype, llm in llms.items()}
    prompts = [list(o.prompt_token_ids) for o in outputs["float32"]]
    answers = [list(o.outputs[0].token_ids) for o in outputs["float32"]]
    dists = {dtype: answer_distributions(llm, prompts, answers) for dtype, llm in llms.items()}
    differences, agree = [], 0
    for exact_row, bf16_row in zip(dists["float32"], dists["bfloat16"]):
        for exact, bf16 in zip(exact_row, bf16_row):
            differences.append(max(abs(exact[t] - bf16[t]) for t in exact))
            agree += max(exact, key=exact.get) == max(bf16, key=bf16.get)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine_name(llms["float32"].config.device),
        "rows": len(data),
        "accuracy": {dtype: sum(o.outputs[0].text == row["answer"] for o, row in zip(out, data)) / len(data)
                     for dtype, out in outputs.items()},
        "identical_answers": sum(a.outputs[0].token_ids == b.outputs[0].token_ids
                                 for a, b in zip(outputs["float32"], outputs["bfloat16"])),
        "positions": len(differences), "top1_agreement": agree,
        "max_logprob_difference": round(max(differences), 4),
        "mean_max_logprob_difference": round(sum(differences) / len(differences), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    report = measure(args.rows)
    print(json.dumps(report, indent=2))
    if args.output is not None:
        save_report(report, args.output)


if __name__ == "__main__":
    main()
