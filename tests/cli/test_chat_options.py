"""The model and chat options (--tokenizer, --revision, --chat-template, --system-prompt), inspect --show-prompt,
--version, and how the help reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import DEMO_MODEL, REPO, invoke, one_line_error

import bulkinfer
from bulkinfer.cli.app import app
from bulkinfer.settings import PANELS

SEEDS = REPO / "examples" / "data" / "synthetic-seeds.jsonl"  # {"messages": [{"role": "user", ...}]} rows
# Writes every message with its role, system messages too (the demo model's template writes user turns only).
ROLES_TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"


def _template(tmp_path: Path, source: str = ROLES_TEMPLATE, name: str = "chat.jinja") -> Path:
    file = tmp_path / name
    file.write_text(source)
    return file


def _show_prompts(capsys, *options: str) -> tuple[int, str, str]:
    return invoke(capsys, "inspect", SEEDS, "--messages-column", "messages", "--model", DEMO_MODEL, *options)


def _seeds(tmp_path: Path, rows: int, system: str | None = None) -> Path:
    lines = SEEDS.read_text().splitlines()[:rows]
    if system is not None:
        lines = [line.replace('"messages": [', f'"messages": [{{"role": "system", "content": "{system}"}}, ')
                 for line in lines]
    file = tmp_path / "seeds.jsonl"
    file.write_text("\n".join(lines) + "\n")
    return file


def test_show_prompt_prints_the_first_n_rendered_prompts(capsys) -> None:
    code, out, err = _show_prompts(capsys, "--show-prompt", "2")
    assert code == 0, err
    assert out.count("prompt 1") == 1 and out.count("prompt 2") == 1 and "prompt 3" not in out
    assert "<s>967+921=" in out and "<s>631+896=" in out  # the demo template: BOS, then the user's text
    assert "prompt 1" not in _show_prompts(capsys)[1]


def test_a_chat_template_file_replaces_the_models(capsys, tmp_path: Path) -> None:
    code, out, err = _show_prompts(capsys, "--show-prompt", "1", "--chat-template", _template(tmp_path),
                                   "--system-prompt", "Answer with digits.")
    assert code == 0, err
    assert "<system>Answer with digits.\n<user>967+921=" in out


def test_a_system_prompt_the_template_would_drop_is_refused(capsys) -> None:
    err = one_line_error(*_show_prompts(capsys, "--system-prompt", "Answer with digits.")[::2])
    assert "chat template drops system messages" in err


def test_a_system_prompt_the_template_drops_is_refused_by_run(capsys, tmp_path: Path) -> None:
    code, _, err = invoke(capsys, "run", "--model", DEMO_MODEL, "--input", _seeds(tmp_path, 2), "--messages-column",
                          "messages", "--system-prompt", "Answer with digits.", "--output", tmp_path / "out")
    assert "chat template drops system messages" in one_line_error(code, err)


def test_system_messages_in_rows_that_the_template_drops_are_warned_about_once(capsys, tmp_path: Path) -> None:
    code, out, err = invoke(capsys, "inspect", _seeds(tmp_path, 3, system="Be brief."), "--messages-column",
                            "messages", "--model", DEMO_MODEL)
    assert code == 0, err
    assert err.count("the chat template drops system messages") == 1 and "3 (0 would be error rows)" in out


def _tokenizer(tmp_path: Path) -> Path:
    """The demo model's tokenizer in a directory of its own."""
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(DEMO_MODEL / name, tokenizer)
    return tokenizer


def test_a_tokenizer_directory_other_than_the_models_is_used(capsys, tmp_path: Path) -> None:
    tokenizer = _tokenizer(tmp_path)
    _template(tokenizer, "TOKENIZER'S {{ messages[0].content }}", "chat_template.jinja")
    code, out, err = _show_prompts(capsys, "--show-prompt", "1", "--tokenizer", tokenizer)
    assert code == 0, err
    assert "TOKENIZER'S 967+921=" in out


def test_a_job_resumes_only_with_the_same_tokenizer_and_chat_template(capsys, tmp_path: Path) -> None:
    template, tokenizer = _template(tmp_path), _tokenizer(tmp_path)
    job = ["run", "--model", DEMO_MODEL, "--input", _seeds(tmp_path, 2), "--messages-column", "messages",
           "--max-tokens", "2", "--output", tmp_path / "out", "--chat-template", template]
    code, _, err = invoke(capsys, *job, "--tokenizer", tokenizer)
    assert code == 0, err
    assert "holds a different job (tokenizer " in one_line_error(*invoke(capsys, *job)[::2])
    template.write_text(ROLES_TEMPLATE + " ")
    err = one_line_error(*invoke(capsys, *job, "--tokenizer", tokenizer)[::2])
    assert "holds a different job (chat_template " in err


def test_a_revision_of_a_local_directory_is_refused(capsys, tmp_path: Path) -> None:
    code, _, err = invoke(capsys, "run", "--model", DEMO_MODEL, "--input", _seeds(tmp_path, 1), "--revision", "v2",
                          "--output", tmp_path / "out")
    assert "a revision (v2) applies to hub ids, not local directories" in one_line_error(code, err)


@pytest.mark.parametrize("options, message", [
    (["--chat-template", "/no/template.jinja"], "chat_template /no/template.jinja: no such file"),
    (["--chat-template", "{{ broken"], "no such file"),
    (["--tokenizer", "/no/tokenizer"], "/no/tokenizer: no such tokenizer directory"),
    (["--show-prompt", "-1"], "show_prompt must be >= 0, got -1"),
])
def test_model_option_mistakes_are_one_line(capsys, options: list[str], message: str) -> None:
    assert message in one_line_error(*_show_prompts(capsys, *options)[::2])


def test_a_chat_template_that_does_not_compile_is_one_line(capsys, tmp_path: Path) -> None:
    err = one_line_error(*_show_prompts(capsys, "--chat-template", _template(tmp_path, "{% for %}"))[::2])
    assert f"chat_template {tmp_path / 'chat.jinja'}: chat template failed" in err


def test_version(capsys) -> None:
    assert invoke(capsys, "--version")[:2] == (0, f"bulkinfer {bulkinfer.__version__}\n")


def test_bulkinfer_alone_prints_the_help(capsys) -> None:
    code, out, err = invoke(capsys)
    assert code == 0 and err == "" and "Usage: bulkinfer" in out and "run" in out


def test_the_commands_descriptions_are_whole(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = invoke(capsys, "--help")
    commands = " ".join(out[out.index("─ Commands ─"):].replace("│", " ").split())
    assert code == 0 and "..." not in commands
    for command in app.registered_commands:
        assert " ".join(command.help.split()) in commands, command.help


def test_run_help_has_a_panel_per_kind_of_option_required_first(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = invoke(capsys, "run", "--help")
    assert code == 0
    panels = [out.index(f"─ {panel} ─") for panel in PANELS]
    assert panels == sorted(panels)
    flags = [out.index(flag) for flag in ("╭─ Input", "--input ", "--input-format", "╭─ Model", "--model ",
                                          "--chat-template", "--tokenizer", "╭─ Sampling", "--temperature",
                                          "╭─ Output", "--output ", "--output-format", "╭─ Performance",
                                          "--max-num-seqs")]
    assert flags == sorted(flags)


def test_system_messages_in_a_batch_file_the_template_drops_are_warned_about_once(capsys, tmp_path: Path) -> None:
    requests = [{"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                 "body": {"model": "m", "max_tokens": 2, "messages": [{"role": "system", "content": "Be brief."},
                                                                      {"role": "user", "content": f"{i}+1="}]}}
                for i in range(2)]
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps(request) + "\n" for request in requests))
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", DEMO_MODEL, "--input", batch,
                          "--output", tmp_path / "out")
    assert code == 0, err
    assert err.count("the chat template drops system messages") == 1


def test_run_help_in_a_narrow_terminal_cuts_no_flag_short(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = invoke(capsys, "run", "--help")
    assert code == 0 and "…" not in out and "--max-num-batched" in out


def test_a_chat_template_file_is_refused_with_a_batch_file(capsys, tmp_path: Path) -> None:
    code, _, err = invoke(capsys, "run", "--format", "openai-batch", "--model", DEMO_MODEL, "--input",
                          _seeds(tmp_path, 1), "--chat-template", _template(tmp_path), "--output", tmp_path / "out")
    assert "drop --chat-template" in one_line_error(code, err)
