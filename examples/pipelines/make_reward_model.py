"""Write examples/pipelines/reward-model: the demo model (examples/demo-model) with a one-output score
head in place of its language-model head, as a reward model is, for the best-of-n recipe to run offline.

    python examples/pipelines/make_reward_model.py

The head is random (seeded), so its rewards only show the mechanics: which sample wins is the head's
arbitrary taste. With a real reward model, set `model` in best-of-n.toml to it.
"""

from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

HERE = Path(__file__).resolve().parent
DEMO_MODEL = HERE.parent / "demo-model"


def main() -> None:
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(DEMO_MODEL, num_labels=1)
    model.config.pad_token_id = model.config.eos_token_id
    model.save_pretrained(HERE / "reward-model")
    AutoTokenizer.from_pretrained(DEMO_MODEL).save_pretrained(HERE / "reward-model")
    print(f"wrote {HERE / 'reward-model'}")


if __name__ == "__main__":
    main()
