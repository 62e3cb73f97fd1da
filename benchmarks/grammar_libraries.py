"""llguidance against xgrammar on this machine: the measurements that chose bulkinfer's grammar library.

For each JSON schema of the stored JSONSchemaBench sample (tests/data/jsonschemabench, one file per
category) and each library:
  - coverage: the library compiles the schema, accepts every valid test instance of it (fed as the
    tokenizer's tokens) and refuses every invalid one;
  - compile time: from the schema's text to the first token mask (what a request waits for);
  - mask time at batch 256: 256 matchers, cycled over the compiled schemas, each walking one of its
    valid instances token by token; one batched mask per step, timed.

The tokenizer is a byte-level BPE trained here on the sample's own text (a JSON-heavy vocabulary, so
that many tokens are live inside strings and keys, the hard case for masks). Run from the repository
root:

    python benchmarks/grammar_libraries.py [--vocab 32000] [--corpus DATA_DIR] [--steps 32] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "jsonschemabench"
BATCH = 256
SEPARATORS = (",", ":")


def load_sample() -> dict[str, list[dict]]:
    return {path.stem: [json.loads(line) for line in path.read_text().splitlines()]
            for path in sorted(DATA.glob("*.jsonl"))}


def train_tokenizer(sample: dict[str, list[dict]], vocab: int, corpus: Path | None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [json.dumps(row["schema"], indent=1) for rows in sample.values() for row in rows]
    texts += [json.dumps(test["data"]) for rows in sample.values() for row in rows for test in row["tests"]]
    if corpus is not None:  # the sample alone is too small for a vocabulary of real size
        texts += [path.read_text(errors="replace") for path in sorted(corpus.rglob("*.json"))]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=1, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>")


class Llguidance:
    name = "llguidance"

    def __init__(self, hf_tokenizer):
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.lib = llguidance
        self.tokenizer = llguidance.hf.from_tokenizer(hf_tokenizer)
        self.vocab = self.tokenizer.vocab_size
        self.executor = llguidance.LLExecutor()
        self.options = {"item_separator": SEPARATORS[0], "key_separator": SEPARATORS[1], "whitespace_flexible": False}

    def compile(self, schema: dict):
        grammar = self.lib.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=self.options)
        matcher = self.lib.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return grammar

    def matcher(self, compiled):
        return self.lib.LLMatcher(self.tokenizer, compiled, log_level=0)

    def accepts(self, compiled, tokens: list[int]) -> bool:
        matcher = self.matcher(compiled)
        return matcher.consume_tokens(tokens) and matcher.is_accepting()

    def first_mask(self, matcher) -> None:
        mask = self.lib.torch.allocate_token_bitmask(1, self.vocab)
        self.lib.torch.fill_next_token_bitmask(matcher, mask, 0)

    def batch_mask(self, matchers, mask) -> None:
        self.lib.torch.fill_next_token_bitmask_par(self.executor, [(m, i) for i, m in enumerate(matchers)], mask)

    def consume(self, matcher, token: int) -> None:
        assert matcher.consume_token(token), matcher.get_error()


class Xgrammar:
    name = "xgrammar"

    def __init__(self, hf_tokenizer):
        import xgrammar

        self.lib = xgrammar
        info = xgrammar.TokenizerInfo.from_huggingface(hf_tokenizer)
        self.vocab = info.vocab_size
        self.compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
        self.batch = xgrammar.BatchGrammarMatcher()

    def compile(self, schema: dict):
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=SEPARATORS,
                                                 strict_mode=False)

    def matcher(self, compiled):
        return self.lib.GrammarMatcher(compiled)

    def accepts(self, compiled, tokens: list[int]) -> bool:
        matcher = self.matcher(compiled)
        # The grammar is complete where it accepts a stop token next.
        return all(matcher.accept_token(token) for token in tokens) and matcher.accept_token(matcher.stop_token_ids[0])

    def first_mask(self, matcher) -> None:
        mask = self.lib.allocate_token_bitmask(1, self.vocab)
        matcher.fill_next_token_bitmask(mask)

    def batch_mask(self, matchers, mask) -> None:
        self.batch.batch_fill_next_token_bitmask(matchers, mask)

    def consume(self, matcher, token: int) -> None:
        assert matcher.accept_token(token)


def measure(library, sample: dict[str, list[dict]], tokenizer, steps: int) -> dict:
    per_category, compile_ms, walks = {}, [], []
    for category, rows in sample.items():
        compiled = accepted = refused = 0
        for row in rows:
            start = time.perf_counter()
            try:
                grammar = library.compile(row["schema"])
                library.first_mask(library.matcher(grammar))
            except Exception:  # noqa: BLE001 - each library refuses in its own way
                continue
            compile_ms.append((time.perf_counter() - start) * 1000)
            compiled += 1
            encoded = [(test["valid"], tokenizer.encode(json.dumps(test["data"], separators=SEPARATORS)))
                       for test in row["tests"]]
            valid_ok = all(library.accepts(grammar, tokens) for valid, tokens in encoded if valid)
            invalid_ok = all(not library.accepts(grammar, tokens) for valid, tokens in encoded if not valid)
            accepted += valid_ok
            refused += valid_ok and invalid_ok
            walks += [(grammar, tokens) for valid, tokens in encoded if valid and valid_ok][:1]
        per_category[category] = {"schemas": len(rows), "compiled": compiled, "valid_accepted": accepted,
                                  "all_tests_agree": refused}
    return {"categories": per_category, "compile_ms": _summary(compile_ms),
            "mask_at_batch_256": _mask_times(library, walks, steps)}


def _mask_times(library, walks: list, steps: int) -> dict:
    """Per step: one batched mask for 256 rows; a row that reaches the end of its instance restarts."""
    rows = [walks[i % len(walks)] for i in range(BATCH)]
    matchers = [library.matcher(grammar) for grammar, _ in rows]
    positions = [0] * BATCH
    mask = torch.full((BATCH, (library.vocab + 31) // 32), -1, dtype=torch.int32)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        library.batch_mask(matchers, mask)
        times.append((time.perf_counter() - start) * 1000)
        for i, (grammar, tokens) in enumerate(rows):
            if positions[i] == len(tokens):
                matchers[i], positions[i] = library.matcher(grammar), 0
            library.consume(matchers[i], tokens[positions[i]])
            positions[i] += 1
    step = _summary(times[1:])
    return {"step_ms": step, "per_row_us": {k: v * 1000 / BATCH for k, v in step.items()}}


def _summary(values: list[float]) -> dict:
    values = sorted(values)
    return {"mean": statistics.fmean(values), "p50": values[len(values) // 2],
            "p95": values[min(len(values) - 1, int(len(values) * 0.95))], "max": values[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--corpus", type=Path, help="more JSON files to train the tokenizer on: the data/ folder "
                                                     "of a JSONSchemaBench checkout")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sample = load_sample()
    tokenizer = train_tokenizer(sample, args.vocab, args.corpus)
    report = {"vocab": len(tokenizer), "threads": torch.get_num_threads()}
    for library in (Llguidance(tokenizer), Xgrammar(tokenizer)):
        report[library.name] = measure(library, sample, tokenizer, args.steps)
        print(library.name, json.dumps(report[library.name], indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
