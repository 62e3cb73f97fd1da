"""``lm_eval_main``: lm_eval's own command line with the bulkinfer backend, end to end."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval")

import lm_eval.__main__  # noqa: E402
from lm_eval.api.registry import get_model  # noqa: E402

from bulkinfer.integrations.lm_eval_cli import lm_eval_main  # noqa: E402
from harness_tasks import write_tasks  # noqa: E402

pytestmark = pytest.mark.slow  # lm_eval's whole command line


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    return write_tasks(tmp_path_factory.mktemp("harness_tasks"))


def test_runs_a_local_task_and_writes_results(tiny_llama, task_dir, tmp_path, capsys):
    # No --device: lm_eval then asks for cuda:0, which must still run on a machine without CUDA.
    status = lm_eval_main(["--model", "bulkinfer", "--model_args", f"pretrained={tiny_llama},max_num_seqs=4",
                           "--tasks", "bi_mc", "--include_path", str(task_dir), "--limit", "4",
                           "--output_path", str(tmp_path / "out")])
    assert status == 0
    [results_file] = (tmp_path / "out").rglob("results_*.json")
    results = json.loads(results_file.read_text())
    assert results["config"]["model"] == "bulkinfer"
    assert 0 <= results["results"]["bi_mc"]["acc,none"] <= 1
    assert "bi_mc" in capsys.readouterr().out  # lm_eval's own results table


def test_a_bad_model_arg_is_a_one_line_usage_error(tiny_llama, monkeypatch, capsys):
    # The backend refuses it while lm_eval builds the model (see test_lm_eval_backend); here,
    # only how the command reports that, without lm_eval's seconds of task indexing first.
    def build_the_model():
        get_model("bulkinfer").create_from_arg_string(f"pretrained={tiny_llama},max_num_seq=4")

    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", build_the_model)
    assert lm_eval_main(["--model", "bulkinfer", "--model_args", f"pretrained={tiny_llama},max_num_seq=4"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("bulkinfer lm-eval: error: unknown model_args for bulkinfer: max_num_seq (accepted: ")


def test_argparse_mistakes_and_help_keep_their_exit_status(capsys):
    assert lm_eval_main(["run", "--no-such-option"]) == 2
    assert lm_eval_main(["--help"]) == 0
    assert "lm-eval" in capsys.readouterr().out
