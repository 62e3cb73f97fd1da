"""The Jinja sandbox chat templates render in: what transformers' chat-template environment offers, with
limits on work, time and size, so that a checkpoint's template can neither hang a job nor exhaust its memory.

A chat template comes with the checkpoint, so it is a stranger's program. Jinja's own sandbox stops it from
reaching Python's internals, but not from looping for hours or building a string of gigabytes. Here every
render has a budget: each loop iteration, call, attribute lookup and range element is a step; operations
that multiply sizes (``*``, ``**``, widths, ``replace``, ``join``) are refused before they allocate more than
the output may hold; every result and the output itself are measured as they are made; and a clock stops
whatever slips past those. The limits are constants, not settings: no real template comes within orders of
magnitude of them, and they exist only to bound a hostile one.
"""

from __future__ import annotations

import functools
import json
import re
import time
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any, Iterator

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

# Loop iterations, calls, attribute lookups and range elements one render may take. Real templates take
# about ten per message.
MAX_STEPS = 1_000_000
# Seconds one render may take; real templates take milliseconds.
MAX_SECONDS = 5.0
# Characters the output (and any value built on the way) may hold: this many, plus four per character of
# the messages, so that long conversations always fit.
MIN_OUTPUT_CHARS = 4 * 2**20
OUTPUT_CHARS_PER_INPUT_CHAR = 4
# Integers above this many bits are not needed by any template and make arithmetic slow.
MAX_INT_BITS = 4096


class TemplateLimitError(jinja2.exceptions.SecurityError):
    """A render went past one of the limits above."""


class Budget:
    """What one render may still spend."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.steps_left = MAX_STEPS
        self.deadline = time.monotonic() + MAX_SECONDS

    def spend(self, steps: int = 1) -> None:
        self.steps_left -= steps
        if self.steps_left < 0:
            raise TemplateLimitError(f"more than {MAX_STEPS:,} steps (loop iterations, calls, lookups)")
        if time.monotonic() > self.deadline:
            raise TemplateLimitError(f"rendering took more than {MAX_SECONDS:g} s")

    def check_size(self, size: int, what: str = "a value") -> None:
        if size > self.max_chars:
            raise TemplateLimitError(f"{what} of more than {self.max_chars:,} characters")

    def checked(self, value: Any) -> Any:
        """The value, if it is within the size limits."""
        if isinstance(value, (str, list, tuple, dict)):
            self.check_size(len(value))
        elif isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise TemplateLimitError(f"an integer of more than {MAX_INT_BITS} bits")
        return value

    def check_arguments(self, args: tuple, kwargs: dict) -> None:
        """Widths, counts and indents: no argument may ask for more than the output may hold."""
        for value in (*args, *kwargs.values()):
            if isinstance(value, int) and not isinstance(value, bool) and value > self.max_chars:
                raise TemplateLimitError(f"an argument of {value:,}, above the output limit")


# The render in progress in this thread; templates compile outside any render, under a default budget.
_current: ContextVar[Budget | None] = ContextVar("chat_template_budget", default=None)


def budget() -> Budget:
    return _current.get() or Budget(MIN_OUTPUT_CHARS)


@contextmanager
def rendering(max_chars: int) -> Iterator[Budget]:
    token = _current.set(Budget(max_chars))
    try:
        yield _current.get()
    finally:
        _current.reset(token)


def _projected_size(operator: str, left: Any, right: Any) -> int:
    """How many characters (or items) a size-multiplying operation would make, without making them."""
    if operator == "*" and not (isinstance(left, int) and isinstance(right, int)):
        sequence, count = (left, right) if isinstance(right, int) else (right, left)
        return len(sequence) * count if isinstance(sequence, (str, list, tuple)) and isinstance(count, int) else 0
    if operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
        return len(left) + len(right)
    if operator == "%" and isinstance(left, str):  # widths in the format, or given as arguments ('%*s')
        arguments = right if isinstance(right, tuple) else (right,)
        return _format_widths(left) + sum(a for a in arguments if isinstance(a, int) and not isinstance(a, bool))
    return 0


def _power_bits(operator: str, left: Any, right: Any) -> int:
    if operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
        return right * abs(left).bit_length()
    return 0


def _format_widths(text: str) -> int:
    """The total of the numbers in a format string: an upper bound on the padding it asks for."""
    return sum(int(number) for number in re.findall(r"\d{1,12}", text))


def _projected_call(name: str, receiver: Any, args: tuple) -> int:
    """The result size of a str method that can multiply its input, without calling it."""
    if name == "replace" and len(args) >= 2 and all(isinstance(a, str) for a in (receiver, *args[:2])):
        count = receiver.count(args[0]) if args[0] else len(receiver) + 1
        return len(receiver) + count * (len(args[1]) - len(args[0]))
    if name == "join" and args and isinstance(args[0], (list, tuple)) and isinstance(receiver, str):
        items = args[0]
        return sum(len(item) for item in items if isinstance(item, str)) + len(receiver) * max(len(items) - 1, 0)
    if name == "format" and isinstance(receiver, str):
        return _format_widths(receiver)
    return 0


def _limited_filter(name: str, function: Any) -> Any:
    """A Jinja filter held to the budget: filters are called directly, not through the sandbox's call()."""
    @functools.wraps(function)
    def limited(*args: Any, **kwargs: Any) -> Any:
        spending = budget()
        spending.spend()
        value, *rest = args[1:] if getattr(function, "jinja_pass_arg", None) else args  # past Jinja's context
        spending.check_arguments(tuple(rest), kwargs)
        if name == "join":  # value|join(separator) is separator.join(value)
            value, rest = rest[0] if rest else kwargs.get("d", ""), [value]
        spending.check_size(_projected_call(name, value, tuple(rest)), f"a {name} result")
        return spending.checked(function(*args, **kwargs))

    return limited


class _Generation(Extension):
    """``{% generation %}`` marks assistant text for training masks; rendering it is rendering its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


class _Namespace(jinja2.utils.Namespace):
    """A namespace that refuses underscore names, which could reach Python's internals."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - Jinja's signature trick: `self` may be a key
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a namespace attribute may not start with '_': {name!r}")


class _Dict:
    """``dict(...)`` and ``dict.fromkeys(...)`` for templates, without the dict class's other attributes."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # Not Jinja's own tojson, which escapes HTML: chat templates expect plain JSON, as transformers renders it.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _range(*args: int) -> range:
    numbers = range(*args)
    budget().spend(len(numbers))  # charged when made: `range(n)|list` allocates without any loop
    return numbers


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _Counted(NodeTransformer):
    """Routes loops and ``~`` (which Jinja runs as plain Python, out of the sandbox's sight) through the budget."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = nodes.Call(nodes.EnvironmentAttribute("counted"), [node.iter], [], None, None)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return nodes.Call(nodes.EnvironmentAttribute("joined"), node.nodes, [], None, None)


class ChatSandbox(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment (globals, filters, whitespace options, the generation tag),
    with every render held to its Budget."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols])
        self.filters["tojson"] = _tojson
        self.filters = {name: _limited_filter(name, function) for name, function in self.filters.items()}
        self.globals.pop("lipsum")  # random filler text, sized by its arguments: no template needs it
        self.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, range=_range,
                            dict=_Dict(), namespace=_Namespace)

    def compile_template(self, source: str) -> jinja2.Template:
        """The template, with every for loop's iterable counted step by step and every ``~`` measured."""
        return self.from_string(_Counted().visit(self.parse(source)))

    @staticmethod
    def counted(iterable: Any) -> Iterator[Any]:
        spending = budget()
        for item in iterable:
            spending.spend()
            yield item

    @staticmethod
    def joined(*parts: Any) -> str:
        texts = [str(part) for part in parts]
        budget().check_size(sum(map(len, texts)), "a '~' result")
        return "".join(texts)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        # expandtabs multiplies a string by its argument for each tab, past any check on that argument.
        return attr != "expandtabs" and super().is_safe_attribute(obj, attr, value)

    def wrap_str_format(self, value: Any) -> Any:
        # The sandbox hands templates a wrapper for str.format, which call() cannot see into: measure here.
        if isinstance(getattr(value, "__self__", None), str):
            budget().check_size(_projected_call("format", value.__self__, ()), "a str.format result")
        return super().wrap_str_format(value)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        spending = budget()
        spending.spend()
        spending.check_size(_projected_size(operator, left, right), f"a '{operator}' result")
        if _power_bits(operator, left, right) > MAX_INT_BITS:
            raise TemplateLimitError(f"an integer of more than {MAX_INT_BITS} bits")
        return spending.checked(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - as Jinja's
        spending = budget()
        spending.spend()
        receiver = getattr(__obj, "__self__", None)
        if isinstance(receiver, str):  # widths (center, ljust, zfill...) and the methods that multiply
            name = getattr(__obj, "__name__", "")
            spending.check_arguments(args, kwargs)
            spending.check_size(_projected_call(name, receiver, args), f"a str.{name} result")
        return spending.checked(super().call(__context, __obj, *args, **kwargs))

    def getattr(self, obj: Any, attribute: str) -> Any:
        budget().spend()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        budget().spend()
        return super().getitem(obj, argument)
