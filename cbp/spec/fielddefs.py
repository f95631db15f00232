"""A schema field as YAML gives it: a type string, or ``{type: T, default: V}``.

The short form ``n: int`` stays what it always was. The long form adds a ``default``: the value
that stored rows written before the field existed get when ``cbp upgrade`` adds it (see
:mod:`cbp.controller.plan`). The default must fit the type (``null`` only for a nullable one).

    >>> field_definition("n", "int")
    (FieldType(scalar='int', is_list=False, nullable=False, items_nullable=False), False, None)
    >>> field_definition("n", {"type": "int", "default": 0})[1:]
    (True, 0)
    >>> field_definition("n", {"type": "int", "default": "x"})
    Traceback (most recent call last):
    ValueError: default 'x' does not fit type int: field 'n': Input should be a valid integer, got str 'x'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .schema import FieldType, RecordError, RecordSchema, parse_type

__all__ = ["field_definition"]

_KEYS = {"type", "default"}


def field_definition(name: str, raw: Any) -> tuple[FieldType, bool, Any]:
    """``(type, whether a default is given, the default)`` of one field; ``ValueError`` says what is wrong."""
    if isinstance(raw, str):
        return parse_type(raw), False, None
    if not isinstance(raw, Mapping):
        raise ValueError(f"give a type string (e.g. 'int?') or {{type: T, default: V}}, not {type(raw).__name__}")
    unknown = set(raw) - _KEYS
    if unknown or "type" not in raw:
        raise ValueError(
            f"a field given as a mapping takes 'type' and an optional 'default' (got "
            f"{', '.join(map(str, raw)) or 'nothing'})"
        )
    ft = parse_type(raw["type"])
    if "default" not in raw:
        return ft, False, None
    value = raw["default"]
    try:
        one = RecordSchema({name: ft})
        stored = one.validate(one.from_json({name: value}))[name]  # a date's default may be its ISO text ...
    except RecordError as e:
        raise ValueError(f"default {value!r} does not fit type {ft}: {e}") from None
    return ft, True, stored
