"""Starting a job: columns are checked, the directory is taken, a different job is refused."""

import json
import shutil
from pathlib import Path

import pytest
from runner_files import write_jsonl, write_parquet

from bulkinfer.errors import UsageError
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.export import export_job
from bulkinfer.runner.open_job import open_job
from bulkinfer.runner.outdir.ledger import make_commit
from bulkinfer.runner.outdir.result_files import ResultFiles
from bulkinfer.runner.status import job_status


def _config(tmp_path: Path, model: Path, **settings) -> JobConfig:
    data = tmp_path / "in.jsonl"
    if not data.exists():
        write_jsonl(data, [{"prompt": f"p{i}", "budget": i} for i in range(5)])
    return JobConfig.from_settings(**{"model": str(model), "input": [str(data)], "output": str(tmp_path / "out"),
                                   **settings})


def test_a_new_job_records_its_inputs_and_resume_finds_them(tmp_path: Path, tiny_llama: Path) -> None:
    job = open_job(_config(tmp_path, tiny_llama))
    assert job.rows_total == 5 and len(job.done) == 0
    written = ResultFiles(job.directory.results_path).write(1, [{"row_index": 1, "error": None},
                                                               {"row_index": 3, "error": None}])
    job.ledger.append(make_commit(1, written.name, [1, 3], 0, written.size, written.digest))
    job.close()
    manifest = json.loads((tmp_path / "out" / "job.json").read_text())
    assert manifest["rows_total"] == 5 and manifest["inputs"][0]["rows"] == 5
    again = open_job(_config(tmp_path, tiny_llama))
    assert sorted(r for r in range(5) if r in again.done) == [1, 3]
    assert job_status(tmp_path / "out").state == "running"  # this process holds the lock
    with pytest.raises(UsageError, match="not complete .*it is still running: wait for it to finish"):
        export_job(tmp_path / "out", tmp_path / "out.parquet")
    again.close()
    assert job_status(tmp_path / "out").to_json() == {"rows_total": 5, "rows_done": 2, "rows_failed": 0,
                                                      "state": "interrupted"}


def test_a_different_job_is_refused_with_what_differs_unless_forced(tmp_path: Path, tiny_llama: Path) -> None:
    open_job(_config(tmp_path, tiny_llama, temperature=0.0)).close()
    write_jsonl(tmp_path / "in.jsonl", [{"prompt": "changed"}])
    with pytest.raises(UsageError) as refused:
        open_job(_config(tmp_path, tiny_llama, temperature=0.5, max_tokens=9))
    message = str(refused.value)
    assert "holds a different job" in message and "--force" in message
    assert "in.jsonl changed (size" in message
    assert "temperature 0.0 -> 0.5" in message and "max_tokens 256 -> 9" in message
    job = open_job(_config(tmp_path, tiny_llama, temperature=0.5, max_tokens=9, force=True))
    assert job.rows_total == 1
    job.close()


def test_speed_settings_may_change_between_runs(tmp_path: Path, tiny_llama: Path) -> None:
    open_job(_config(tmp_path, tiny_llama)).close()
    open_job(_config(tmp_path, tiny_llama, window_rows=7, max_num_seqs=3, shard_rows=2)).close()


@pytest.mark.parametrize("settings, message", [
    ({"prompt_column": "text"}, "in.jsonl: no column 'text' \\(from prompt_column\\); its columns are: budget, prompt"),
    ({"id_column": "uid"}, "no column 'uid' \\(from id_column\\)"),
    ({"param_columns": {"max_tokens": "limit"}}, "no column 'limit' \\(from param_columns.max_tokens\\)"),
])
def test_a_missing_column_is_refused_before_anything_is_written(tmp_path: Path, tiny_llama: Path,
                                                                 settings: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        open_job(_config(tmp_path, tiny_llama, **settings))
    assert not (tmp_path / "out").exists()


def test_parquet_columns_come_from_the_schema(tmp_path: Path, tiny_llama: Path) -> None:
    data = write_parquet(tmp_path / "in.parquet", [{"text": "a", "generated_text": "clash"}])
    config = _config(tmp_path, tiny_llama, input=[str(data)])
    with pytest.raises(UsageError, match="no column 'prompt'.*generated_text, text"):
        open_job(config)
    config = _config(tmp_path, tiny_llama, input=[str(data)], prompt_column="text")
    with pytest.raises(UsageError, match="column 'generated_text' has the name of an output column"):
        open_job(config)


def test_a_directory_with_other_files_is_not_taken(tmp_path: Path, tiny_llama: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "thesis.tex").write_text("years of work")
    with pytest.raises(UsageError, match="is not empty and holds no bulkinfer job"):
        open_job(_config(tmp_path, tiny_llama))


def test_status_of_a_missing_job_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a bulkinfer output directory"):
        job_status(tmp_path)


def test_a_crash_before_job_json_leaves_a_directory_that_can_still_start(tmp_path: Path, tiny_llama: Path) -> None:
    out = tmp_path / "out"
    (out / "shards").mkdir(parents=True)
    (out / ".job.json.tmp").write_text("{half")
    (out / ".lock").write_text("")
    open_job(_config(tmp_path, tiny_llama)).close()


def test_the_same_model_named_differently_is_the_same_job(tmp_path: Path, tiny_llama: Path, monkeypatch) -> None:
    open_job(_config(tmp_path, tiny_llama)).close()
    monkeypatch.chdir(tiny_llama.parent)
    open_job(_config(tmp_path, Path(".") / tiny_llama.name)).close()


def test_a_changed_chat_template_is_a_different_job(tmp_path: Path, tiny_llama: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_llama, model)
    open_job(_config(tmp_path, model)).close()
    (model / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    with pytest.raises(UsageError, match="model_files"):
        open_job(_config(tmp_path, model))
