"""The job record survives damage, and damage to the ledger is reported: every bit flip in the ledger
is named by `status` with its line number (exit 1); a damaged record is written again from a trusted
copy, once; with no trusted copy left, a different job is refused and never mixed in; a job.json or
ledger that no run wrote is not a job, and is left as it is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from runner_files import prompts, read_results, write_jsonl

from bulkinfer.cli import main

SETTINGS = dict(max_tokens=3, temperature=0.0, max_num_seqs=8, window_rows=10, shard_rows=10, commit_seconds=60)
ROWS = 40


def _main(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


def _run_argv(model: Path, data: Path, out: Path) -> list[str]:
    flags = [part for name, value in SETTINGS.items() for part in ("--" + name.replace("_", "-"), str(value))]
    return ["run", "--model", str(model), "--input", str(data), "--output", str(out), *flags]


def _run(capsys, model: Path, data: Path, out: Path) -> tuple[int, str, str]:
    return _main(capsys, *_run_argv(model, data, out))


@pytest.fixture(scope="module")
def finished_job(tmp_path_factory, tiny_llama: Path) -> Path:
    """A finished 40-row job: a job record and a few commits in its ledger."""
    root = tmp_path_factory.mktemp("record")
    data = write_jsonl(root / "in.jsonl", prompts(ROWS))
    with pytest.raises(SystemExit) as exited:
        main(_run_argv(tiny_llama, data, root / "out"))
    assert exited.value.code == 0
    return root / "out"


@pytest.fixture
def data(finished_job: Path) -> Path:
    """The finished job's input."""
    return finished_job.parent / "in.jsonl"


@pytest.fixture
def job(finished_job: Path, tmp_path: Path) -> Path:
    """A copy of the finished job, to damage."""
    out = tmp_path / "out"
    shutil.copytree(finished_job, out)
    return out


def _flip(path: Path, offset: int, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


def _line_starts(path: Path) -> list[tuple[int, int]]:
    """(offset, length) of each line."""
    starts, offset = [], 0
    for line in path.read_bytes().splitlines(keepends=True):
        starts.append((offset, len(line)))
        offset += len(line)
    return starts


def test_status_names_every_bit_flip_in_the_ledger_by_its_line(job: Path, capsys) -> None:
    ledger = job / "ledger.jsonl"
    sound = ledger.read_bytes()
    lines = _line_starts(ledger)
    assert len(lines) >= 3  # the job record and the commits
    trials = 0
    for number, (start, length) in enumerate(lines, 1):
        for at, bit in [(0, 0), (length // 3, 3), (length // 2, 6), (2 * length // 3, 1), (length - 2, 2),
                        (length - 1, number % 8)]:  # the last: its newline
            _flip(ledger, start + at, bit)
            for verify in ([], ["--verify"]):
                code, out, _ = _main(capsys, "status", str(job), *verify)
                assert code == 1 and out.startswith("damaged: "), out
                assert f"damaged: {ledger}: line {number} fails its checksum" in out, (number, at, bit, out)
            ledger.write_bytes(sound)
            trials += 1
    assert trials == 6 * len(lines)
    assert _main(capsys, "status", str(job), "--verify")[0] == 0


def test_a_damaged_job_record_is_written_again_then_runs_are_quiet(job: Path, data: Path, tiny_llama: Path,
                                                                   capsys) -> None:
    ledger = job / "ledger.jsonl"
    _flip(ledger, 30, 4)
    code, _, err = _run(capsys, tiny_llama, data, job)
    assert code == 0 and f"{ledger} line 1 is damaged" in err, err
    record = json.loads(ledger.read_bytes().splitlines()[-2])["job"]  # appended, then the damage reported
    assert record == json.loads((job / "job.json").read_text())
    code, _, err = _run(capsys, tiny_llama, data, job)
    assert code == 0 and "is damaged" not in err, err
    code, out, _ = _main(capsys, "status", str(job), "--verify")
    assert code == 0 and out.startswith(f"complete: {ROWS} of {ROWS} rows done"), out


def test_a_lost_job_record_never_lets_another_job_in(job: Path, data: Path, finished_job: Path, tiny_llama: Path,
                                                     capsys) -> None:
    ledger = job / "ledger.jsonl"
    other = write_jsonl(job.parent / "other.jsonl", [{"prompt": f"other {i}"} for i in range(ROWS + 5)])
    _flip(ledger, 30, 4)
    (job / "job.json").unlink()
    sound_files = {path.name: path.read_bytes() for path in (job / "shards").iterdir()}
    damaged = ledger.read_bytes()
    code, _, err = _run(capsys, tiny_llama, other, job)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"bulkinfer: error: {job}: the job record"), err
    assert "pass --force to discard them and start over, or choose another --output" in err
    assert ledger.read_bytes() == damaged and not (job / "job.json").exists()
    assert {path.name: path.read_bytes() for path in (job / "shards").iterdir()} == sound_files
    for command in (["status", str(job)], ["export", str(job), str(job.parent / "x.jsonl")]):
        code, _, err = _main(capsys, *command)
        assert code == 1 and err.count("\n") == 1 and "rerun the job's own command to rebuild it" in err, err
    code, _, err = _run(capsys, tiny_llama, data, job)  # the job the commits name: its record is rebuilt
    assert code == 0, err
    assert _exported(capsys, job) == _exported(capsys, finished_job)


def _exported(capsys, out: Path) -> list[dict]:
    destination = out.parent / f"{out.name}-export.jsonl"
    assert _main(capsys, "export", str(out), str(destination))[0] == 0
    return read_results(destination)


@pytest.mark.parametrize("key", ["version", "fingerprint", "inputs", "rows_total"])
def test_a_job_json_missing_a_key_is_one_line_and_rewritten_from_the_ledger(job: Path, data: Path, tiny_llama: Path,
                                                                            capsys, key: str) -> None:
    manifest = json.loads((job / "job.json").read_text())
    sound = dict(manifest)
    del manifest[key]
    (job / "job.json").write_text(json.dumps(manifest))
    assert _main(capsys, "status", str(job))[0] == 0  # the ledger's record
    assert _run(capsys, tiny_llama, data, job)[0] == 0
    assert json.loads((job / "job.json").read_text()) == sound
    (job / "job.json").write_text(json.dumps(manifest))
    (job / "ledger.jsonl").unlink()
    code, _, err = _main(capsys, "status", str(job))
    assert code == 2 and err == f"bulkinfer: error: {job}: not a bulkinfer output directory (no job.json)\n"
    code, _, err = _run(capsys, tiny_llama, data, job)
    assert code == 2 and err.count("\n") == 1 and "holds no bulkinfer job" in err, err
    assert json.loads((job / "job.json").read_text()) == manifest


@pytest.mark.parametrize("name, content", [("ledger.jsonl", b"not a ledger\n{}\ntorn"),
                                           ("job.json", b'{"version": 1}'),
                                           ("ledger-1-of-2.jsonl", b"\x00" * 100)])
def test_a_stray_ledger_or_job_json_is_not_a_job_and_is_left_as_it_is(tmp_path: Path, tiny_llama: Path, capsys,
                                                                    name: str, content: bytes) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_bytes(content)
    data = write_jsonl(tmp_path / "in.jsonl", prompts(3))
    code, _, err = _run(capsys, tiny_llama, data, out)
    assert code == 2 and err.count("\n") == 1 and "holds no bulkinfer job" in err, err
    assert (out / name).read_bytes() == content and sorted(path.name for path in out.iterdir()) == [name]
    for command in (["status", str(out)], ["export", str(out), str(tmp_path / "x.jsonl")]):
        code, _, err = _main(capsys, *command)
        assert code == 2 and err.count("\n") == 1 and "not a bulkinfer output directory" in err, err
    assert (out / name).read_bytes() == content and not (tmp_path / "x.jsonl").exists()
