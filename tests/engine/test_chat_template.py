"""Chat templates render in bulkinfer's sandbox exactly as transformers renders them, and a hostile template
fails the conversation it renders, quickly and in bounded memory, instead of hanging or exhausting the job."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from bulkinfer.engine.chat_sandbox import MAX_SECONDS
from bulkinfer.engine.chat_template import ChatTemplate, ChatTemplateError
from bulkinfer.openai_batch import convert_batch_file
from checkpoints import CHAT_TEMPLATE
from cli_helpers import DEMO_MODEL, exported, invoke

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
SOURCES = {"tiny checkpoints": CHAT_TEMPLATE, "demo model": (DEMO_MODEL / "chat_template.jinja").read_text(),
           **{path.stem: path.read_text() for path in sorted(TEMPLATES.glob("*.jinja"))}}

TOOL_CALL = {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}
CONVERSATIONS = {
    "one user turn": [{"role": "user", "content": "  What is 2+2?  "}],
    "alternating": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                    {"role": "user", "content": "Bye"}],
    "system first": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    "tools and reasoning": [
        {"role": "system", "content": "You add."}, {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "", "reasoning_content": "Use the tool.", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "content": "4"}, {"role": "tool", "content": "4 again"},
        {"role": "assistant", "content": "<think>\nsure\n</think>\n\nIt is 4.", "tool_calls": None},
        {"role": "user", "content": "Thanks"}],
}
OPTIONS = {"generation prompt": dict(add_generation_prompt=True),
           "no generation prompt": dict(add_generation_prompt=False)}


@pytest.fixture(scope="module")
def tokenizer(tiny_llama: Path):
    return AutoTokenizer.from_pretrained(str(tiny_llama))


def _with_template(tokenizer, source: str):
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.chat_template = source
    return tokenizer


def _outcome(render) -> str:
    """The rendered text, or that it failed: templates refuse some conversations, and then both must."""
    try:
        return render()
    except Exception:  # transformers raises the template's own errors; bulkinfer raises ChatTemplateError
        return "<failed>"


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS)
@pytest.mark.parametrize("messages", CONVERSATIONS.values(), ids=CONVERSATIONS)
@pytest.mark.parametrize("source", SOURCES.values(), ids=SOURCES)
def test_renders_as_transformers_does(tokenizer, source, messages, options):
    tokenizer = _with_template(tokenizer, source)
    ours = _outcome(lambda: ChatTemplate(tokenizer).render(messages, **options))
    theirs = _outcome(lambda: tokenizer.apply_chat_template(messages, tokenize=False, **options))
    assert ours == theirs


@pytest.mark.parametrize("source", SOURCES.values(), ids=SOURCES)
def test_continues_a_final_message_as_transformers_does(tokenizer, source):
    tokenizer = _with_template(tokenizer, source)
    messages = [{"role": "user", "content": "Count:"}, {"role": "assistant", "content": "1, 2, "}]
    ours = _outcome(lambda: ChatTemplate(tokenizer).render(messages, add_generation_prompt=False,
                                                           continue_final_message=True))
    theirs = _outcome(lambda: tokenizer.apply_chat_template(messages, tokenize=False, continue_final_message=True))
    assert ours == theirs


def test_a_long_conversation_fits_under_the_output_limit(tokenizer):
    messages = [{"role": "user", "content": "0123456789" * 500_000}, {"role": "assistant", "content": "ok"}]
    tokenizer = _with_template(tokenizer, SOURCES["chatml_tools_thinking"])
    assert ChatTemplate(tokenizer).render(messages) == tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True)


HOSTILE = {
    "nested ranges": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "nested loops over a long string": "{% for a in messages[0].content * 5000 %}"
                                       "{% for b in messages[0].content * 5000 %}{% endfor %}{% endfor %}",
    "a range made into a list": "{{ range(10**9) | list | length }}",
    "a huge product": "{{ 'a' * 300000000 }}",
    "a huge list": "{{ [1] * 10**9 }}",
    "doubling with ~": "{% set ns = namespace(x='a') %}{% for i in range(64) %}{% set ns.x = ns.x ~ ns.x %}"
                       "{% endfor %}{{ ns.x }}",
    "doubling with +": "{% set ns = namespace(x='a') %}{% for i in range(64) %}{% set ns.x = ns.x + ns.x %}"
                       "{% endfor %}{{ ns.x }}",
    "a huge width (filter)": "{{ 'a' | center(300000000) }}",
    "a huge width (method)": "{{ 'a'.ljust(300000000) }}",
    "a huge width (format)": "{{ '{:300000000}'.format('a') }}",
    "a huge width (%)": "{{ '%300000000s' % 'a' }}",
    "a multiplying replace": "{{ ('a' * 1000000) | replace('a', 'aaaaaaaaaa') }}",
    "a multiplying join": "{{ (['a'] * 1000) | join('-' * 1000000) }}",
    "a huge power": "{{ 7 ** 100000000 }}",
    "exponential recursion": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                             "{{ f(64) }}",
    "too much output": "{% set x = 'x' * 10000 %}{% for i in range(1000) %}{{ x }}{% endfor %}",
}


@pytest.mark.parametrize("source", HOSTILE.values(), ids=HOSTILE)
def test_a_hostile_template_fails_its_conversation_within_the_limits(tokenizer, source):
    template = ChatTemplate(_with_template(tokenizer, source))
    started = time.monotonic()
    with pytest.raises(ChatTemplateError, match="^chat template stopped: ") as info:
        template.render([{"role": "user", "content": "hello"}])
    assert time.monotonic() - started < MAX_SECONDS + 1
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("messages", [[], ["hi"], [{"role": "user"}, 3], None])
def test_malformed_messages_fail_with_a_reason(tokenizer, messages):
    with pytest.raises(ChatTemplateError, match="^chat template failed: "):
        ChatTemplate(tokenizer).render(messages, add_generation_prompt=False, continue_final_message=True)


def test_a_template_cannot_reach_python_internals(tokenizer):
    for source in ("{{ messages.__class__.__mro__ }}",
                   "{% set ns = namespace() %}{% set ns._x = 1 %}", "{{ lipsum(10) }}", "{{ 'a\t'.expandtabs(9) }}"):
        with pytest.raises(ChatTemplateError, match="^chat template failed: "):
            ChatTemplate(_with_template(tokenizer, source)).render([{"role": "user", "content": "hello"}])


# Renders hostile templates in a fresh process and prints, for each, how far its peak resident memory rose (in
# MiB; the kernel's peak is reset before each, so loading transformers does not count) and the error.
_PEAK_PROBE = """
import json, sys
from transformers import AutoTokenizer
from bulkinfer.engine.chat_template import ChatTemplate, ChatTemplateError
from bulkinfer.openai_batch import convert_batch_file
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
def kib(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field + ":"))
for source in json.loads(sys.argv[2]):
    tokenizer.chat_template = source
    template = ChatTemplate(tokenizer)
    before = kib("VmRSS")
    open("/proc/self/clear_refs", "w").write("5")
    try:
        template.render([{"role": "user", "content": "hello"}])
        print(json.dumps(["rendered", 0]))
    except ChatTemplateError as exc:
        print(json.dumps([str(exc), (kib("VmHWM") - before) / 1024]))
"""
BOUNDED_MEMORY = ["a huge product", "doubling with ~", "nested ranges", "a huge width (format)", "a multiplying join"]


def test_hostile_templates_stay_within_bounded_memory(tiny_llama):
    result = subprocess.run([sys.executable, "-c", _PEAK_PROBE, str(tiny_llama),
                             json.dumps([HOSTILE[name] for name in BOUNDED_MEMORY])],
                            capture_output=True, text=True, timeout=300)
    outcomes = dict(zip(BOUNDED_MEMORY, map(json.loads, result.stdout.splitlines())))
    assert len(outcomes) == len(BOUNDED_MEMORY), result.stderr
    for name, (error, rise_mib) in outcomes.items():
        assert error.startswith("chat template stopped") and rise_mib < 100, (name, error, rise_mib)


def test_rendering_is_no_slower_than_transformers(tokenizer):
    tokenizer = _with_template(tokenizer, SOURCES["chatml_tools_thinking"])
    template, messages = ChatTemplate(tokenizer), CONVERSATIONS["tools and reasoning"]

    def seconds(render) -> float:
        started = time.perf_counter()
        for _ in range(200):
            render()
        return time.perf_counter() - started

    ours = seconds(lambda: template.render(messages))
    theirs = seconds(lambda: tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    assert ours < 3 * theirs, json.dumps({"ours": ours, "transformers": theirs})


def test_a_job_goes_on_past_a_row_its_template_cannot_render(capsys, tiny_llama, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_llama, model)
    # The checkpoint's own template, which hangs (for hours, unsandboxed) on a row that says "loop".
    (model / "chat_template.jinja").write_text(
        "{% if messages[0].content == 'loop' %}" + HOSTILE["nested ranges"] + "{% endif %}" + CHAT_TEMPLATE)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"chat": [{"role": "user", "content": text}]}) + "\n"
                            for text in ("hi", "loop", "bye")))
    code, _, err = invoke(capsys, "run", "--model", model, "--input", rows, "--messages-column", "chat",
                          "--output", tmp_path / "out", "--max-tokens", "2", "--device", "cpu")
    assert code == 0, err
    errors = [row["error"] for row in exported(capsys, tmp_path / "out")]
    assert errors[0] is None and errors[2] is None
    assert errors[1].endswith("chat template stopped: more than 1,000,000 steps (loop iterations, calls, lookups)")


def test_an_openai_batch_line_its_template_cannot_render_gets_its_own_error(tokenizer, tmp_path):
    hostile = _with_template(tokenizer, "{% if messages[0].content == 'loop' %}" + HOSTILE["nested ranges"]
                             + "{% endif %}" + CHAT_TEMPLATE)
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps({"custom_id": text, "method": "POST", "url": "/v1/chat/completions",
                                         "body": {"messages": [{"role": "user", "content": text}]}}) + "\n"
                             for text in ("hi", "loop")))
    convert_batch_file(batch, tmp_path / "table.jsonl", hostile)
    rows = [json.loads(line) for line in (tmp_path / "table.jsonl").read_text().splitlines()]
    assert rows[0]["batch_error"] is None and rows[0]["prompt"].endswith("<|assistant|>\n")
    assert rows[1]["batch_error"].startswith("chat template stopped: more than 1,000,000 steps")
