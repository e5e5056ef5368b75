"""Whether JSON values have the types a dataclass's annotations give: how results.json's record is checked
as it is read back (results.wrongly_typed). Apart from results.py, so that a run, which only writes the
record, does not load it."""

from __future__ import annotations

import json
import types
import typing
from typing import Any


def _matches(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a field's annotation (None, bool, int, float, str, list[...], dict[str, ...],
    unions and Any); an int is a float, a bool is neither an int nor a float."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in args)
    if hint is type(None):
        return value is None
    if hint is float:  # null too: write_results writes a NaN or an infinity, at any depth, as null
        return value is None or isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is list:
        return isinstance(value, list) and all(_matches(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            isinstance(key, str) and _matches(item, args[1]) for key, item in value.items()
        )
    return isinstance(value, hint)


def first_mistyped(values: dict[str, Any], hints: dict[str, Any]) -> str | None:
    """What is wrong with the first value (by `hints`' names, in order) that does not fit its annotation."""
    for name, hint in hints.items():
        value = values.get(name)
        if not _matches(value, hint):
            shown = json.dumps(value, default=str)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            expected = str(hint).replace("typing.", "")
            return f"its key '{name}' holds {shown} ({type(value).__name__}), where a run writes {expected}"
    return None
