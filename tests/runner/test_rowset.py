import random

import pytest

from bulkinfer.runner.rowset import RowSet, decode_rows, encode_rows


def test_membership_and_count() -> None:
    rows = RowSet([3, 17, 17, 1000])
    assert len(rows) == 3
    assert 17 in rows and 1000 in rows and 4 not in rows and 10**9 not in rows
    assert rows.add(5) and not rows.add(5)


@pytest.mark.parametrize("start, stop", [(0, 0), (0, 1), (3, 29), (8, 16), (5, 64), (0, 100)])
def test_contains_all_matches_a_plain_check(start: int, stop: int) -> None:
    generator = random.Random(start * 100 + stop)
    full = RowSet(range(0, 100))
    holey = RowSet(r for r in range(100) if r != generator.randrange(100))
    for rows in (full, holey, RowSet()):
        assert rows.contains_all(start, stop) == all(r in rows for r in range(start, stop))


def test_encoding_round_trips_scattered_rows_compactly() -> None:
    rows = random.Random(0).sample(range(10_000_000), 10_000)
    text = encode_rows(rows)
    assert decode_rows(text) == sorted(rows)
    assert len(text) < 8 * len(rows)  # well under the JSON list's ~9 bytes per row
