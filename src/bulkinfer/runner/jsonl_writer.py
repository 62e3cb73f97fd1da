"""Output rows as JSON lines."""

from __future__ import annotations

import base64
import json
from typing import Any


def json_line(row: dict[str, Any]) -> bytes:
    return (json.dumps(row, ensure_ascii=False, default=json_default) + "\n").encode("utf-8")


def json_default(value: Any) -> Any:
    """Values Parquet inputs may hold that JSON has no type for: bytes as base64, the rest as text."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)
