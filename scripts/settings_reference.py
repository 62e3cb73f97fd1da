"""Write docs/settings.md, the reference of every setting, from the settings' own declarations.

    python scripts/settings_reference.py          # rewrite docs/settings.md
    python scripts/settings_reference.py --check  # exit 1 if it is out of date (the test suite runs this)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bulkinfer.cli.options import flag_of
from bulkinfer.cli.run import RunCommandSettings
from bulkinfer.engine.config import EngineConfig
from bulkinfer.integrations.ray_job import RaySettings
from bulkinfer.runner.config import JobConfig
from bulkinfer.runner.pipeline.stage import StageSettings
from bulkinfer.pooling_params import PoolingParams
from bulkinfer.sampling_params import SamplingParams
from bulkinfer.settings import Setting, settings_of

DOC = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
SECTIONS = [
    ("Sampling", SamplingParams, "Fields of `SamplingParams`. Each is also a job setting, a per-row param column "
     "(`--param-column NAME=COLUMN`), an lm-eval model_arg (a default for generation requests) and an "
     "OpenAI batch body field."),
    ("Pooling", PoolingParams, "Fields of `PoolingParams`: what an embedding looks like (`LLM.embed` takes them; "
     "each is also a job setting, for `--task embed`)."),
    ("Engine", EngineConfig, "Fields of `EngineConfig`: `LLM(model, **options)` takes them, and so do job "
     "files, flags, lm-eval model_args and `bulkinfer bench`. The engine's seed is `engine_seed` where one "
     "namespace holds every setting; `LLM` takes it as `seed`."),
    ("Job", JobConfig, "Fields of `JobConfig`: what a job reads, writes and how it paces itself."),
    ("The run command", RunCommandSettings, "Settings of `bulkinfer run` beside the job's; job files take them too."),
    ("Ray executor", RaySettings, "With `--executor ray` (see scale-out.md)."),
]
# Keys of a pipeline file's [[stages]] tables, beside a job's keys; they have no flags.
STAGE_SECTION = ("Pipeline stages", StageSettings, "Fields of `StageSettings`: a pipeline stage's own keys, "
                 "beside the job keys it takes (see pipelines.md). A pipeline file has no flags.")


def reference() -> str:
    lines = ["# Settings", "",
             "Every setting, with its flag, job-file key and default. Generated from the declarations by",
             "`python scripts/settings_reference.py`; the test suite checks that it is current.", ""]
    for title, cls, intro in SECTIONS:
        lines += [f"## {title}", "", intro, "", "| key | flag | default | meaning |", "|---|---|---|---|"]
        lines += [_row(setting) for setting in settings_of(cls)]
        lines.append("")
    title, cls, intro = STAGE_SECTION
    lines += [f"## {title}", "", intro, "", "| key | default | meaning |", "|---|---|---|"]
    lines += [_row(setting, flag=False) for setting in settings_of(cls)]
    lines.append("")
    return "\n".join(lines)


def _row(setting: Setting, flag: bool = True) -> str:
    default = "required" if setting.required else f"`{setting.default!r}`"
    if setting.default != setting.field_default:
        default += f" (Python API: `{setting.field_default!r}`)"
    meaning = setting.help.replace('|', '/')
    if not flag:
        return f"| `{setting.name}` | {default} | {meaning} |"
    spelled = flag_of(setting)
    if setting.is_bool:
        spelled = f"{spelled} / --no-{spelled.removeprefix('--')}"
    return f"| `{setting.name}` | `{spelled}` | {default} | {meaning} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/settings.md is out of date")
    text = reference()
    if parser.parse_args().check:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            print(f"{DOC} is out of date: run python scripts/settings_reference.py", file=sys.stderr)
            return 1
        return 0
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
