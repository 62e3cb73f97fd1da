"""Without lm_eval installed, the backend and the command say how to install it."""

from __future__ import annotations

import sys

import pytest

from bulkinfer.integrations import LM_EVAL_INSTALL_HINT
from bulkinfer.integrations.lm_eval_cli import lm_eval_main


@pytest.fixture
def no_lm_eval(monkeypatch):
    # None in sys.modules makes every import of lm_eval fail as if it were not installed.
    for name in [name for name in sys.modules if name == "lm_eval" or name.startswith("lm_eval.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    monkeypatch.delitem(sys.modules, "bulkinfer.integrations.lm_eval", raising=False)


def test_importing_the_backend_names_the_extra(no_lm_eval):
    with pytest.raises(ImportError) as refused:
        import bulkinfer.integrations.lm_eval  # noqa: F401
    assert str(refused.value) == LM_EVAL_INSTALL_HINT
    assert "pip install 'bulkinfer[eval]'" in LM_EVAL_INSTALL_HINT


def test_the_command_prints_the_hint_and_exits_2(no_lm_eval, capsys):
    assert lm_eval_main(["--model", "bulkinfer", "--tasks", "x"]) == 2
    error = capsys.readouterr().err
    assert error.strip() == f"bulkinfer lm-eval: {LM_EVAL_INSTALL_HINT}"
