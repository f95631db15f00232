"""Signed records: every record's multiplicity ``_diff``, a nonzero int64 (+1 when absent, -1 a
retraction), as a feed gives it and a translator writes it.

    >>> from cbp.spec.schema import RecordSchema
    >>> validate_signed(RecordSchema.parse({"url": "string"}), {"url": "a", "_diff": -1})
    ({'url': 'a'}, -1)
"""

from __future__ import annotations

from typing import Any

from .jsonvalues import safe_repr
from .schema import DIFF, RecordError, RecordSchema

__all__ = ["DIFF", "DiffError", "check_diff", "validate_signed", "validate_json_line_signed"]


class DiffError(RecordError):
    """A record's ``_diff`` is not a nonzero int64 (code ``bad-diff``)."""

    code = "bad-diff"

    def __init__(self, message: str) -> None:
        super().__init__(DIFF, message)


def check_diff(value: Any) -> int:
    """A record's ``_diff`` as given: an int (not a bool), nonzero, within int64; else :class:`DiffError`.

    >>> check_diff(-1)
    -1
    >>> try:
    ...     check_diff(0.5)
    ... except DiffError as e:
    ...     print(e)
    field '_diff': must be a nonzero int (a multiplicity: +1 a record, -1 a retraction), got float 0.5
    """
    if type(value) is int and value and -(2**63) <= value < 2**63:
        return value
    if type(value) is int and value:
        raise DiffError(f"must fit in 64 bits (-2**63 .. 2**63 - 1), got {safe_repr(value)}")
    raise DiffError(
        f"must be a nonzero int (a multiplicity: +1 a record, -1 a retraction), got {type(value).__name__} "
        f"{safe_repr(value)}"
    )


def validate_signed(schema: RecordSchema, record: Any) -> tuple[dict[str, Any], int]:
    """:meth:`RecordSchema.validate` of a record that may carry ``_diff``: the record without it,
    and its multiplicity (+1 when absent; a bad one is a :class:`DiffError`)."""
    if isinstance(record, dict) and DIFF in record:
        record = dict(record)
        diff = check_diff(record.pop(DIFF))
        return schema.validate(record), diff
    return schema.validate(record), 1


def validate_json_line_signed(schema: RecordSchema, line: str) -> tuple[dict[str, Any], int]:
    """:meth:`RecordSchema.validate_json_line` of a line that may carry ``_diff`` (as :func:`validate_signed`)."""
    return validate_signed(schema, schema.parse_json_line(line))
