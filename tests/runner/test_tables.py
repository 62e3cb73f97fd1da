import pyarrow as pa

from bulkinfer.runner.outdir.row_tables import conform, rows_to_table, unified_schema
from bulkinfer.runner.tasks import result_columns


def test_uneven_rows_keep_every_key_and_odd_columns_become_text() -> None:
    table = rows_to_table([{"row_index": 0, "a": 1, "mixed": 1, "empty": {}},
                           {"row_index": 1, "b": "x", "mixed": "one"}])
    assert table.column_names == ["row_index", "a", "mixed", "empty", "b"]
    assert table.column("mixed").to_pylist() == ["1", "one"]
    assert table.column("empty").to_pylist() == ["{}", None]
    assert table.column("a").type == pa.int64()


def test_schemas_unify_with_result_columns_last() -> None:
    first = rows_to_table([{"row_index": 0, "prompt": "p", "generated_text": "g", "error": None, "x": None}])
    second = rows_to_table([{"row_index": 1, "prompt": "q", "generated_text": None, "error": "bad", "x": 2.5}])
    third = rows_to_table([{"row_index": 2, "x": "text", "generated_text": "h"}])
    schema = unified_schema([first.schema, second.schema, third.schema], result_columns("generate"))
    assert schema.names == ["row_index", "prompt", "x", "generated_text", "error"]
    assert schema.field("x").type == pa.string()  # a double in one shard, a string in another
    merged = pa.concat_tables([conform(t, schema) for t in (first, second, third)])
    assert merged.column("x").to_pylist() == [None, "2.5", "text"]
    mixed = rows_to_table([{"row_index": 3, "x": {"a": 1}}, {"row_index": 4, "x": "plain"}])
    assert conform(mixed, schema).column("x").to_pylist() == ['{"a": 1}', "plain"]
    assert merged.column("error").to_pylist() == [None, "bad", None]
