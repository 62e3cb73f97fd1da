"""OpenAI's reasoning_effort (low, medium, high) for every thinking family.

gpt-oss was trained to read the effort in its system message, where its chat template writes it; the other
families have no such switch, so an effort becomes a thinking budget. The budgets are powers of four from
1,024 to 16,384 tokens: low leaves room for a short check of the answer, high for the long derivations of
math and code problems, and all three fit the 32K contexts most of these models run with, with room for the
prompt and the answer. The same budgets serve every think-tag family: none publishes its own.
"""

from __future__ import annotations

from bulkinfer.sampling_params import SamplingParams

THINK_TAG_BUDGETS = {"low": 1024, "medium": 4096, "high": 16384}
# By reasoning parser name; a family absent here (gpt_oss) takes the effort through its chat template.
EFFORT_BUDGETS: dict[str, dict[str, int]] = {"deepseek_r1": THINK_TAG_BUDGETS, "qwen3": THINK_TAG_BUDGETS}


def thinking_budget(params: SamplingParams, reasoning_parser: str) -> int | None:
    """The request's thinking budget: its own thinking_budget when set, else its reasoning_effort's for the
    model's family, else none."""
    if params.thinking_budget is not None or params.reasoning_effort is None:
        return params.thinking_budget
    return EFFORT_BUDGETS.get(reasoning_parser, {}).get(params.reasoning_effort)
