"""Train the offline demo model: a tiny Llama that adds whole numbers, with its own tokenizer.

    python scripts/train_demo_model.py --out examples/demo-model

writes a Hugging Face checkpoint (config, safetensors, generation config, tokenizer) to --out,
the demo dataset to --data (2,000 distinct problems as JSONL rows with "id", "prompt",
"answer"; all but the shortest are held out of training), and training.json and README.md
beside the model with the settings, the final loss (mean of the last 100 steps) and the
greedy exact-match accuracy on the dataset and on its held-out rows, bare and after a few-shot
prefix.

Prompt and answer are plain text: BOS "123+456=" -> "579" EOS. The answer is written most
significant digit first, as people read it, which costs more steps than the reversed-digit
trick but keeps the demo's output meaningful without explanation. Half the training prompts
carry a few-shot prefix, 1-4 solved problems one a line ("12+7=19\n45+33=78\n123+456="), as
eval prompts do; the loss is on the final answer only. Training is seeded and runs on the CPU
only, so the same command rebuilds the same weights on the same software stack.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import string
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# Set before torch loads OpenMP: on a shared machine, threads that spin while waiting for the
# others steal the cores those others need, and a step can take ten times as long.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors  # noqa: E402
from transformers import (  # noqa: E402
    GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast,
)

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
# Digits and signs are what the model learns; the rest of printable ASCII is in the vocabulary
# only so that any English prompt (from other jobs run against this model) round-trips as text.
CHARACTERS = string.digits + "+=" + "".join(
    c for c in string.printable if c not in string.digits + "+=\x0b\x0c\r")
# The model knows only addition problems (bare or after solved ones), so the template keeps the
# user's words and drops the rest (system prompts, earlier turns' roles): a chat job then feeds it
# exactly what training did.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ message['content'] }}{% endif %}"
    "{% endfor %}"
)


@dataclass(frozen=True)
class Settings:
    seed: int = 0
    max_digits: int = 3
    # Answering after worked examples takes longer to learn: with half the prompts few-shot,
    # 4,000 steps left bare problems at 0.987 accuracy (0.996 when all were bare).
    steps: int = 10000
    batch_size: int = 128
    micro_batches: int = 4  # rows of similar length computed together: less padding, same loss
    lr: float = 3e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    hidden_size: int = 96
    num_layers: int = 3
    num_heads: int = 4
    intermediate_size: int = 256
    # Share of training prompts preceded by 1 to max_shots solved problems: a model that saw only
    # bare problems answers almost none right once worked examples come first.
    few_shot_share: float = 0.5
    max_shots: int = 4
    # RoPE has no learned positions, so this is only the limit the engine enforces; it is set
    # well past the ~70 tokens an addition after four solved ones needs so that other jobs'
    # longer prompts still run.
    max_position_embeddings: int = 512
    dataset_rows: int = 2000
    threads: int = 2


# ---- the task ----------------------------------------------------------------------------------

def random_operand(rng: random.Random, max_digits: int) -> int:
    # Uniform in the number of digits first, so short operands are not drowned by long ones.
    digits = rng.randint(1, max_digits)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10 ** digits - 1)


def problem(a: int, b: int) -> tuple[str, str]:
    return f"{a}+{b}=", str(a + b)


def random_pair(rng: random.Random, settings: Settings, excluded: set[tuple[int, int]]) -> tuple[int, int]:
    while True:
        pair = random_operand(rng, settings.max_digits), random_operand(rng, settings.max_digits)
        if pair not in excluded:
            return pair


def solved(a: int, b: int) -> str:
    prompt, answer = problem(a, b)
    return f"{prompt}{answer}\n"


def few_shot_prefix(rng: random.Random, settings: Settings, excluded: set[tuple[int, int]]) -> str:
    """1 to max_shots solved problems, one a line, as an eval puts its worked examples first."""
    count = rng.randint(1, settings.max_shots)
    return "".join(solved(*random_pair(rng, settings, excluded)) for _ in range(count))


def eval_prefixes(settings: Settings, dataset: list[tuple[int, int]]) -> list[str]:
    """A few-shot prefix for each dataset row, the same on every call; none solves a dataset
    problem, so no prefix gives a row's answer away."""
    rng, excluded = random.Random(f"few-shot-eval-{settings.seed}"), set(dataset)
    return [few_shot_prefix(rng, settings, excluded) for _ in dataset]


def always_trained(a: int, b: int) -> bool:
    """Problems with three digits between both operands (1,900 in all) come up so often in
    training that holding any out would starve it of them: "5+8=" would never be taught."""
    return len(str(a)) + len(str(b)) <= 3


def dataset_pairs(settings: Settings) -> list[tuple[int, int]]:
    """The dataset's distinct problems, from their own seed; training skips all but the shortest."""
    rng = random.Random(f"heldout-{settings.seed}")
    pairs: dict[tuple[int, int], None] = {}
    while len(pairs) < settings.dataset_rows:
        pairs[(random_operand(rng, settings.max_digits), random_operand(rng, settings.max_digits))] = None
    return list(pairs)


def write_dataset(pairs: list[tuple[int, int]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for index, (a, b) in enumerate(pairs):
            prompt, answer = problem(a, b)
            out.write(json.dumps({"id": f"add-{index:05d}", "prompt": prompt, "answer": answer}) + "\n")


# ---- tokenizer ---------------------------------------------------------------------------------

def build_tokenizer(max_length: int) -> PreTrainedTokenizerFast:
    """One token per character; BOS added by encode(), as the engine encodes plain prompts."""
    vocab = {token: index for index, token in enumerate([PAD, BOS, EOS, UNK, *CHARACTERS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()  # characters join with nothing between them
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, vocab[BOS])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK,
        chat_template=CHAT_TEMPLATE, clean_up_tokenization_spaces=False,
        model_max_length=max_length)


# ---- batches -----------------------------------------------------------------------------------

def encode_example(tokenizer: PreTrainedTokenizerFast, prefix: str, a: int, b: int) -> tuple[list[int], int]:
    """Token ids of BOS prefix prompt answer EOS, and how many of them precede the answer (not scored)."""
    prompt, answer = problem(a, b)
    prompt_ids = tokenizer.encode(prefix + prompt)
    answer_ids = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
    return prompt_ids + answer_ids, len(prompt_ids)


def training_batch(tokenizer: PreTrainedTokenizerFast, rng: random.Random, settings: Settings,
                   excluded: set[tuple[int, int]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One batch as micro-batches of rows of similar length, each padded only to its own longest:
    padding a bare problem (~12 tokens) to a four-shot prompt (~60) would triple a step's cost.
    Held-out problems appear neither as questions nor among the solved ones of a prefix."""
    rows = []
    for _ in range(settings.batch_size):
        a, b = random_pair(rng, settings, excluded)
        prefix = few_shot_prefix(rng, settings, excluded) if rng.random() < settings.few_shot_share else ""
        rows.append(encode_example(tokenizer, prefix, a, b))
    rows.sort(key=lambda row: len(row[0]))
    size = -(-len(rows) // settings.micro_batches)
    return [padded(tokenizer, rows[start:start + size]) for start in range(0, len(rows), size)]


def padded(tokenizer: PreTrainedTokenizerFast,
           rows: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and labels, both [rows, longest]; padding goes on the right, where causal
    attention keeps it from touching the real tokens, and the loss ignores it and the prompt."""
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    for row, (ids, prompt_length) in enumerate(rows):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        labels[row, prompt_length:len(ids)] = torch.tensor(ids[prompt_length:])
    return input_ids, labels


# ---- model and training ------------------------------------------------------------------------

def build_model(settings: Settings, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size, num_hidden_layers=settings.num_layers,
        num_attention_heads=settings.num_heads, num_key_value_heads=settings.num_heads,
        max_position_embeddings=settings.max_position_embeddings, rms_norm_eps=1e-6,
        tie_word_embeddings=False, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(config)


def learning_rate(settings: Settings, step: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < settings.warmup_steps:
        return settings.lr * (step + 1) / settings.warmup_steps
    progress = (step - settings.warmup_steps) / max(settings.steps - settings.warmup_steps, 1)
    return settings.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_loss(model: LlamaForCausalLM, micro_batches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Mean loss per answer token over the whole batch, as one padded batch would give: each
    micro-batch sums its tokens' losses and divides by the batch's count, not its own."""
    scored = sum(int((labels[:, 1:] != -100).sum()) for _, labels in micro_batches)  # labels shift by one
    return sum(model(input_ids=input_ids, labels=labels, num_items_in_batch=scored).loss
               for input_ids, labels in micro_batches)


def train(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, settings: Settings,
          dataset: list[tuple[int, int]]) -> float:
    """Returns the mean loss over the last 100 steps."""
    excluded = {pair for pair in dataset if not always_trained(*pair)}
    rng = random.Random(f"train-{settings.seed}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.98),
                                  weight_decay=settings.weight_decay)
    model.train()
    recent: list[float] = []
    started = time.perf_counter()
    for step in range(settings.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(settings, step)
        loss = batch_loss(model, training_batch(tokenizer, rng, settings, excluded))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        recent = (recent + [loss.item()])[-100:]
        if step % 100 == 0 or step == settings.steps - 1:
            print(f"step {step:5d}  loss {sum(recent) / len(recent):.4f}  lr {learning_rate(settings, step):.2e}  "
                  f"{time.perf_counter() - started:5.0f}s{_peek(model, tokenizer, settings, dataset, step)}",
                  flush=True)
    return sum(recent) / len(recent)


def _peek(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, settings: Settings,
          dataset: list[tuple[int, int]], step: int) -> str:
    """Accuracy on 200 dataset rows every 500 steps: whether the run is on track, for ~1% of its time."""
    if step % 500:
        return ""
    rows, prefixes = dataset[:200], eval_prefixes(settings, dataset)[:200]
    bare = mean(correct(model, tokenizer, settings, rows))
    few_shot = mean(correct(model, tokenizer, settings, rows, prefixes))
    model.train()
    return f"  accuracy on 200 rows {bare:.3f} bare, {few_shot:.3f} few-shot"


# ---- evaluation --------------------------------------------------------------------------------

@torch.no_grad()
def greedy_answers(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, prompts: list[str],
                   max_new_tokens: int) -> list[str]:
    """Greedy continuations, batched by prompt length so no padding or mask is needed."""
    model.eval()
    by_length: dict[int, list[int]] = {}
    encoded = [tokenizer.encode(p) for p in prompts]
    for index, ids in enumerate(encoded):
        by_length.setdefault(len(ids), []).append(index)
    answers = [""] * len(prompts)
    for indices in by_length.values():
        ids = torch.tensor([encoded[i] for i in indices])  # [rows, prompt_length]
        width = ids.shape[1]
        for _ in range(max_new_tokens):
            next_ids = model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, next_ids], dim=1)
        for row, index in enumerate(indices):
            answers[index] = _until_eos(ids[row, width:].tolist(), tokenizer)
    return answers


def _until_eos(ids: list[int], tokenizer: PreTrainedTokenizerFast) -> str:
    if tokenizer.eos_token_id in ids:
        ids = ids[:ids.index(tokenizer.eos_token_id)]
    return tokenizer.decode(ids, skip_special_tokens=True)


def correct(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, settings: Settings,
            pairs: list[tuple[int, int]], prefixes: list[str] | None = None) -> list[bool]:
    """Whether the greedy answer to each problem, after its prefix if given, is exactly right."""
    prompts, answers = zip(*(problem(a, b) for a, b in pairs))
    if prefixes is not None:
        prompts = [prefix + prompt for prefix, prompt in zip(prefixes, prompts)]
    generated = greedy_answers(model, tokenizer, list(prompts), max_new_tokens=settings.max_digits + 2)
    return [g == a for g, a in zip(generated, answers)]


def mean(flags: list[bool]) -> float:
    return round(sum(flags) / len(flags), 4)


# ---- saving ------------------------------------------------------------------------------------

def save(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, out: Path, report: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, do_sample=False)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _portable_tokenizer_config(out / "tokenizer_config.json")
    (out / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "README.md").write_text(model_card(report))


def model_card(report: dict) -> str:
    settings = report["settings"]
    return (
        "# bulkinfer demo model: a tiny Llama that adds\n\n"
        f"A {report['parameters']:,}-parameter LlamaForCausalLM ({settings['num_layers']} layers, hidden size "
        f"{settings['hidden_size']}) with a character-level tokenizer, trained from scratch on the CPU to "
        f"add whole numbers of up to {settings['max_digits']} digits. It exists so that bulkinfer's demo "
        "and tests run with no network and give answers that can be checked.\n\n"
        "Prompt `123+456=` (BOS is added by the tokenizer), answer `579`, then EOS; decode greedily. "
        f"The prompt may start with up to {settings['max_shots']} solved problems, one a line, as few-shot "
        "examples: `12+7=19\\n45+33=78\\n123+456=`.\n\n"
        f"Greedy exact-match accuracy: {report['heldout_accuracy']:.4f} on the {report['heldout_rows']} "
        f"rows of `{report['dataset']}` never seen in training, {report['dataset_accuracy']:.4f} on all "
        f"{report['dataset_rows']}; with a random few-shot prefix before each row, "
        f"{report['few_shot_heldout_accuracy']:.4f} and {report['few_shot_dataset_accuracy']:.4f} respectively. "
        "Settings, loss and timing: `training.json`.\n\n"
        f"Rebuild (about {round(report['train_seconds'] / 60)} minutes on {settings['threads']} CPU cores):\n\n"
        "    python scripts/train_demo_model.py --out examples/demo-model\n"
    )


def _portable_tokenizer_config(path: Path) -> None:
    """transformers 5 names its own tokenizer class and keeps the template in a separate file;
    naming the class both major versions know, and the template inline too, lets 4.x load it."""
    config = json.loads(path.read_text())
    config.update(tokenizer_class="PreTrainedTokenizerFast", chat_template=CHAT_TEMPLATE)
    path.write_text(json.dumps(config, indent=2) + "\n")


def parse_settings() -> tuple[Settings, Path, Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("examples/demo-model"), help="checkpoint directory")
    parser.add_argument("--data", type=Path, default=Path("examples/data/addition.jsonl"),
                        help="where the held-out problems are written")
    for name, default in asdict(Settings()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    args = vars(parser.parse_args())
    out, data = args.pop("out"), args.pop("data")
    return Settings(**args), out, data


def main() -> None:
    settings, out, data = parse_settings()
    torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    torch.use_deterministic_algorithms(True)
    tokenizer = build_tokenizer(settings.max_position_embeddings)
    pairs = dataset_pairs(settings)
    model = build_model(settings, tokenizer)
    started = time.perf_counter()
    final_loss = train(model, tokenizer, settings, pairs)
    seconds = time.perf_counter() - started
    right = correct(model, tokenizer, settings, pairs)
    right_few_shot = correct(model, tokenizer, settings, pairs, eval_prefixes(settings, pairs))
    unseen = [ok for ok, pair in zip(right, pairs) if not always_trained(*pair)]
    unseen_few_shot = [ok for ok, pair in zip(right_few_shot, pairs) if not always_trained(*pair)]
    report = {
        "settings": asdict(settings), "parameters": sum(p.numel() for p in model.parameters()),
        "train_seconds": round(seconds, 1), "final_loss": round(final_loss, 5),
        "dataset": str(data), "dataset_rows": len(pairs),
        "dataset_accuracy": mean(right), "heldout_rows": len(unseen), "heldout_accuracy": mean(unseen),
        "few_shot_dataset_accuracy": mean(right_few_shot), "few_shot_heldout_accuracy": mean(unseen_few_shot),
        "heldout_note": "dataset rows never trained on: all but those with 3 digits between both operands",
        "few_shot_note": "each row after its own seeded prefix of 1 to max_shots random solved problems",
        "format": "BOS ['<a>+<b>=<a+b>\\n' x 0..max_shots] '<a>+<b>=' -> '<a+b>' EOS; exact match, greedy",
        "torch": torch.__version__,
    }
    print(f"trained in {seconds:.0f}s; final loss {final_loss:.4f}; accuracy {report['dataset_accuracy']:.4f} "
          f"on the dataset, {report['heldout_accuracy']:.4f} on its {len(unseen)} held-out rows; after a few-shot "
          f"prefix {report['few_shot_dataset_accuracy']:.4f} and {report['few_shot_heldout_accuracy']:.4f}")
    save(model, tokenizer, out, report)
    write_dataset(pairs, data)


if __name__ == "__main__":
    main()
