"""`bulkinfer run PIPELINE.toml`, `status` and `export` of a pipeline's output directory, and the
mistakes in a pipeline file that are refused in one line before anything runs."""

import json
import os
from pathlib import Path

import pytest
from cli_helpers import DEMO_MODEL, invoke, one_line_error

PROBLEMS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in [(5, 95), (12, 7), (300, 45), (8, 8)]]


def _pipeline(tmp_path: Path, stages: str) -> Path:
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in PROBLEMS))
    path = tmp_path / "pipeline.toml"
    path.write_text(f'input = "{data}"\noutput = "{tmp_path / "out"}"\n\n{stages}')
    return path


STAGES = f"""
[[stages]]
name = "generate"
model = "{DEMO_MODEL}"
max_tokens = 5

[[stages]]
name = "right"
filter = "generated_text == answer"

[[stages]]
name = "plus_one"
model = "{DEMO_MODEL}"
max_tokens = 5
prompt_template = "{{answer}}+1="
"""


def test_a_pipeline_runs_reports_and_exports_per_stage(capsys, tmp_path: Path) -> None:
    path = _pipeline(tmp_path, STAGES)
    code, _, err = invoke(capsys, "run", path)
    assert code == 0, err
    assert "stage 1 of 3: generate" in err and "stage 3 of 3: plus_one" in err
    code, out, _ = invoke(capsys, "status", tmp_path / "out")
    assert code == 0 and out.splitlines() == ["stage 1 generate: complete: 4 of 4 rows done, 0 with errors",
                                              "stage 2 right: transform",
                                              "stage 3 plus_one: complete: 4 of 4 rows done, 0 with errors"]
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "final.jsonl")
    assert code == 0, err
    final = [json.loads(line) for line in (tmp_path / "final.jsonl").read_text().splitlines()]
    assert [row["generated_text"] for row in final] == [str(int(row["answer"]) + 1) for row in PROBLEMS]
    assert [row["source_row"] for row in final] == [0, 1, 2, 3]
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "first.jsonl", "--stage", "generate")
    assert code == 0, err
    first = [json.loads(line) for line in (tmp_path / "first.jsonl").read_text().splitlines()]
    assert [row["generated_text"] for row in first] == [row["answer"] for row in PROBLEMS]
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "x.jsonl", "--stage", "nowhere")
    assert "no stage 'nowhere'" in one_line_error(code, err)


@pytest.mark.parametrize("text", ["__import__('os').system('touch {owned}')", "().__class__.__bases__",
                                  "open('{owned}', 'w')"])
def test_a_filter_that_would_run_code_is_refused_and_nothing_runs(capsys, tmp_path: Path, text: str) -> None:
    owned = tmp_path / "owned"
    stages = STAGES.replace('"generated_text == answer"', json.dumps(text.format(owned=owned)))
    code, _, err = invoke(capsys, "run", _pipeline(tmp_path, stages))
    assert "is not allowed" in one_line_error(code, err)
    assert not owned.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("stages, said", [
    ('[[stages]]\nname = "a"\nmodel = "m"\noutput = "elsewhere"\n', "output is set for the whole pipeline"),
    ('[[stages]]\nname = "a"\nmodel = "m"\nmax_tokns = 3\n', "unknown key max_tokns (did you mean max_tokens?)"),
    ('[[stages]]\nname = "a"\nkeep_top = "two"\n', "keep_top must be an integer"),
    ('[[stages]]\nname = "a"\nrank_by = "reward"\n', "rank_by and keep_top go together"),
    ('[[stages]]\nname = "a"\nmax_tokens = 3\n', "max_tokens needs a model"),
    ('[[stages]]\nname = "a"\n[[stages]]\nname = "b"\ninput = "c"\n', "input 'c' is not an earlier stage"),
    ('[[stages]]\nname = "a"\nprompt_template = "{x.__class__}"\n', "is not a column name"),
    ('[[stages]]\nname = "../a"\n', "use letters, digits"),
])
def test_mistakes_in_a_pipeline_file_are_one_line(capsys, tmp_path: Path, stages: str, said: str) -> None:
    code, _, err = invoke(capsys, "run", _pipeline(tmp_path, stages))
    assert said in one_line_error(code, err)
    assert not (tmp_path / "out").exists()


def test_flags_do_not_apply_to_a_pipeline_file(capsys, tmp_path: Path) -> None:
    code, _, err = invoke(capsys, "run", _pipeline(tmp_path, STAGES), "--max-tokens", "3")
    assert "set max_tokens in its stages" in one_line_error(code, err)


RECIPES = Path(__file__).resolve().parents[2] / "examples" / "pipelines"


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.toml")), ids=lambda path: path.stem)
def test_the_recipes_are_pipelines_whose_every_stage_is_valid(recipe: Path) -> None:
    from bulkinfer.cli.jobfile import load_toml
    from bulkinfer.cli.pipeline_file import read_pipeline

    pipeline = read_pipeline(recipe, load_toml(recipe))
    assert len(pipeline.stages) >= 1 and all(stage.has_model for stage in pipeline.stages)


def test_status_and_export_see_a_stage_whose_input_changed_since_it_ran(capsys, tmp_path: Path) -> None:
    path = _pipeline(tmp_path, STAGES)
    code, _, err = invoke(capsys, "run", path)
    assert code == 0, err
    table = tmp_path / "out" / "stages" / "03-plus_one" / "input-table.jsonl"
    stat = table.stat()
    os.utime(table, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # as if written for another input
    code, out, _ = invoke(capsys, "status", tmp_path / "out", "--json")
    assert [stage["state"] for stage in json.loads(out)["stages"]] == ["complete", "transform", "out of date"]
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "final.jsonl")
    assert "run the pipeline again" in one_line_error(code, err)
    code, _, err = invoke(capsys, "run", path)
    assert code == 0, err
    code, out, _ = invoke(capsys, "status", tmp_path / "out")
    assert out.splitlines()[2] == "stage 3 plus_one: complete: 4 of 4 rows done, 0 with errors"


def test_a_stage_with_fail_on_error_fails_the_pipeline_when_it_has_error_rows(capsys, tmp_path: Path) -> None:
    stages = f'[[stages]]\nname = "hinted"\nmodel = "{DEMO_MODEL}"\nmax_tokens = 4\nprompt_template = "{{hint}}"\n'
    code, _, err = invoke(capsys, "run", _pipeline(tmp_path, stages))
    assert code == 0, err  # every row an error row, but the stage does not ask to fail on them
    code, _, err = invoke(capsys, "run", _pipeline(tmp_path, stages + "fail_on_error = true\n"))
    assert code == 1 and "stage hinted has 4 error rows (fail_on_error)" in err


def test_rows_that_fit_no_parquet_schema_are_refused_in_one_line_and_export_to_jsonl(capsys, tmp_path: Path) -> None:
    data = tmp_path / "in.jsonl"
    data.write_text('{"prompt": "1+1=", "tag": 5}\n{"prompt": "2+2=", "tag": "five"}\n')
    path = tmp_path / "pipeline.toml"
    path.write_text(f'input = "{data}"\noutput = "{tmp_path / "out"}"\n[[stages]]\nname = "keep"\nfilter = "True"\n')
    code, _, err = invoke(capsys, "run", path)
    assert code == 0, err
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "rows.parquet")
    assert "export to .jsonl instead" in one_line_error(code, err)
    code, _, err = invoke(capsys, "export", tmp_path / "out", tmp_path / "rows.jsonl")
    assert code == 0, err
    assert [json.loads(line)["tag"] for line in (tmp_path / "rows.jsonl").read_text().splitlines()] == [5, "five"]
