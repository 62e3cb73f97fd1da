"""Score a demo run: exact-match accuracy of generated answers against the right ones.

    python scripts/score_demo.py RESULTS [--dataset examples/data/addition.jsonl]

RESULTS is a JSONL (optionally .gz) or Parquet file, such as `bulkinfer export OUT results.jsonl`
writes, with "generated_text" and either an "answer" column or an "id" to look it up in --dataset.
Rows that failed (no generated text) count as wrong. Prints the accuracy; exits 1 if it is below
--min-accuracy, 2 on a missing or unreadable file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any, Iterator

DEFAULT_DATASET = Path(__file__).resolve().parent.parent / "examples" / "data" / "addition.jsonl"


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # only Parquet needs it

        yield from pq.read_table(path).to_pylist()
        return
    with (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()) as lines:
        yield from (json.loads(line) for line in lines if line.strip())


def first_text(value: Any) -> str | None:
    # Jobs with n > 1 store one text per sample; the first is scored.
    if isinstance(value, list):
        return value[0] if value else None
    return value


def answer_of(row: dict[str, Any], answers_by_id: dict[str, str]) -> str:
    if row.get("answer") is not None:
        return str(row["answer"])
    if row.get("id") in answers_by_id:
        return answers_by_id[row["id"]]
    raise ValueError(f"row has neither an 'answer' nor a known 'id': {str(row)[:200]}")


def score(rows: Iterator[dict[str, Any]], answers_by_id: dict[str, str]) -> tuple[int, int]:
    """(correct, total). Surrounding whitespace is ignored; anything else must match exactly."""
    correct = total = 0
    for row in rows:
        text = first_text(row.get("generated_text"))
        correct += text is not None and text.strip() == answer_of(row, answers_by_id).strip()
        total += 1
    return correct, total


def load_answers(dataset: Path) -> dict[str, str]:
    if not dataset.is_file():
        return {}
    return {row["id"]: str(row["answer"]) for row in read_rows(dataset) if "id" in row}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("results", type=Path, help="results file: .jsonl, .jsonl.gz or .parquet")
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET,
                        help="input rows with 'id' and 'answer', for results that lack 'answer'")
    parser.add_argument("--min-accuracy", type=float, default=0.0, help="exit 1 below this accuracy")
    args = parser.parse_args(argv)
    if args.results.is_dir():
        # A job directory holds uncommitted shards and a ledger too; export picks the right rows.
        print(f"error: {args.results} is a directory; score the file `bulkinfer export {args.results} "
              f"results.jsonl` writes", file=sys.stderr)
        return 2
    if not args.results.is_file():
        print(f"error: {args.results}: no such file", file=sys.stderr)
        return 2
    try:
        correct, total = score(read_rows(args.results), load_answers(args.dataset))
    except (ValueError, KeyError, OSError) as exc:
        print(f"error: {args.results}: {exc}", file=sys.stderr)
        return 2
    if total == 0:
        print(f"error: {args.results}: no rows to score", file=sys.stderr)
        return 2
    accuracy = correct / total
    print(f"accuracy {accuracy:.4f} ({correct}/{total} exact matches)")
    return 0 if accuracy >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
