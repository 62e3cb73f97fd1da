"""A request's tools, as OpenAI's chat API takes them: a list of function definitions the chat template
renders into the prompt, and `tool_choice`, which says whether the model must call one.

    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}]
    tool_choice = "auto" | "none" | "required" | {"type": "function", "function": {"name": "get_weather"}}

SamplingParams holds both, so jobs, flags, param columns and OpenAI batch bodies set them as any other
setting; these checks are its own.
"""

from __future__ import annotations

import json
from typing import Any

TOOL_CHOICES = ("none", "auto", "required")


def parsed_tools(value: str | list | None) -> list[dict[str, Any]] | None:
    """The tool definitions from a list or its JSON text, checked; None for none. Raises ValueError."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"tools is not valid JSON ({exc})") from None
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValueError(f"tools must be a list of tool definitions, got {type(value).__name__}")
    for number, tool in enumerate(value, 1):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise ValueError(f'tools[{number}] must be {{"type": "function", "function": {{"name": ...}}}}')
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise ValueError(f"tools[{number}].function needs a non-empty string name")
        if not isinstance(function.get("parameters", {}), dict):
            raise ValueError(f"tools[{number}].function.parameters must be a JSON schema object")
    return value or None


def parsed_tool_choice(value: str | dict | None) -> str | dict | None:
    """tool_choice from its value or its JSON text, its form checked; None when not given. Raises ValueError."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"tool_choice is not valid JSON ({exc})") from None
    if value is None or value in TOOL_CHOICES or named_function(value) is not None:
        return value
    raise ValueError(f'tool_choice must be one of {", ".join(TOOL_CHOICES)} or '
                     f'{{"type": "function", "function": {{"name": ...}}}}, got {value!r}')


def check_tool_choice(tools: list[dict[str, Any]] | None, tool_choice: str | dict | None) -> None:
    """Raises ValueError when tool_choice asks for a call the tools cannot give: required with no tools, or a
    function that is not among them."""
    name = named_function(tool_choice)
    if (tool_choice == "required" or name is not None) and not tools:
        raise ValueError(f"tool_choice {'required' if name is None else repr(name)} needs tools")
    if name is not None and name not in [tool["function"]["name"] for tool in tools]:
        raise ValueError(f"tool_choice names the function {name!r}, which is not among the tools")


def named_function(tool_choice: Any) -> str | None:
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        name = (tool_choice.get("function") or {}).get("name")
        return name if isinstance(name, str) else None
    return None


def forced_functions(tools: list[dict[str, Any]] | None, tool_choice: str | dict | None) -> list[dict] | None:
    """The function definitions one of which the model must call (tool_choice required: any of them; a
    named function: that one), or None when it need not call any. Raises ValueError as check_tool_choice."""
    check_tool_choice(tools, tool_choice)
    if not tools:
        return None
    functions = [tool["function"] for tool in tools]
    if tool_choice == "required":
        return functions
    name = named_function(tool_choice)
    return [f for f in functions if f["name"] == name] if name else None


def parses_calls(tools: list[dict[str, Any]] | None, tool_choice: str | dict | None) -> bool:
    """Whether the output is read for tool calls: tools were given and tool_choice is not "none"."""
    return bool(tools) and tool_choice != "none"
