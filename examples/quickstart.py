"""The Python API on the demo model shipped in examples/demo-model (it adds numbers up to 999).

    python examples/quickstart.py
"""

from pathlib import Path

from bulkinfer import LLM, SamplingParams

MODEL = Path(__file__).parent / "demo-model"

llm = LLM(str(MODEL), max_model_len=64)
problems = [(a, b) for a in (7, 58, 123, 999) for b in (5, 44, 876)]
prompts = [f"{a}+{b}=" for a, b in problems]
outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=8))
for (a, b), output in zip(problems, outputs):
    answer = output.outputs[0].text
    print(f"{a}+{b}={answer:<5} {'ok' if answer == str(a + b) else 'WRONG'}")
correct = sum(o.outputs[0].text == str(a + b) for (a, b), o in zip(problems, outputs))
print(f"{correct}/{len(problems)} correct; {llm.stats.generation_tokens} tokens in {llm.stats.steps} steps")
