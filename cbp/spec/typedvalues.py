"""The field types real tables have beyond JSON's: ``date``, ``timestamp``, ``decimal(P,S)`` and
``binary`` — their Arrow and Spark types, the Python values a translator sees and returns, their
JSON form, and an Arrow column read as one of them.

========== ============================= ==================== ============================ ===========
type       JSON form                     Python value         Arrow                        Spark
========== ============================= ==================== ============================ ===========
date       ``"2024-05-01"``              ``datetime.date``    ``date32``                   DATE
timestamp  ``"2024-05-01T12:00:00.5Z"``  aware ``datetime``   ``timestamp('us', 'UTC')``   TIMESTAMP
decimal    ``"12.50"`` or ``12.50``      ``decimal.Decimal``  ``decimal128(P, S)``         DECIMAL(P,S)
binary     base64 text                   ``bytes``            ``binary``                   BINARY
========== ============================= ==================== ============================ ===========

A timestamp is UTC with microseconds: a JSON text needs ``Z`` or an offset (it is normalised to
UTC), a Python ``datetime`` a ``tzinfo`` (a naive one is refused: cbp does not guess a zone). A
decimal that does not fit ``P`` digits with ``S`` after the point is refused, never rounded (as
Spark's ANSI cast fails).

    >>> check_value("decimal(5,2)", decimal.Decimal("3.1"))
    Decimal('3.10')
    >>> from_json("timestamp", "2024-05-01T14:00:00+02:00")
    datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.timezone.utc)
    >>> to_json(datetime.date(2024, 5, 1)), to_json(b"hi"), to_json(decimal.Decimal("1.50"))
    ('2024-05-01', 'aGk=', '1.50')
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import functools
import re
from typing import Annotated, Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import PlainValidator

__all__ = ["TYPED", "canonical", "is_typed", "arrow_type", "spark_type", "python_type", "check_value"]
__all__ += ["from_json", "to_json", "typed_column", "field_type_of_arrow", "decimal_of", "decimal_widens"]

#: The type names of this module besides ``decimal(P,S)``, with their Arrow types.
TYPED = {"date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "binary": pa.binary()}
_SPARK = {"date": "DATE", "timestamp": "TIMESTAMP", "binary": "BINARY"}
_DECIMAL = re.compile(r"decimal\(\s*(\d{1,3})\s*,\s*(\d{1,3})\s*\)\Z")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}\Z")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})\Z", re.I)
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\Z")
_UTC = datetime.timezone.utc


def decimal_of(scalar: str) -> tuple[int, int] | None:
    """``(P, S)`` of a ``decimal(P,S)`` type name, None for any other name.

    >>> decimal_of("decimal(12,2)"), decimal_of("int")
    ((12, 2), None)
    """
    m = _DECIMAL.match(scalar)
    return (int(m.group(1)), int(m.group(2))) if m else None


def canonical(scalar: str) -> str | None:
    """The name of a scalar type of this module as cbp writes it (``decimal(12,2)``), None if
    ``scalar`` names none; ``ValueError`` for a decimal out of bounds.

    >>> canonical("decimal( 12, 2 )"), canonical("string")
    ('decimal(12,2)', None)
    """
    if scalar in TYPED:
        return scalar
    ps = decimal_of(scalar)
    if ps is None:
        return None
    p, s = ps
    if not 1 <= p <= 38 or not 0 <= s <= p:
        raise ValueError(
            f"type '{scalar}': a decimal(P,S) has 1 <= P <= 38 digits, S of them (0 <= S <= P) after the point"
        )
    return f"decimal({p},{s})"


def decimal_widens(old: str, new: str) -> bool:
    """Whether every ``decimal`` value of type ``old`` is one of ``new`` as it is (no fewer digits
    before or after the point).

        >>> decimal_widens("decimal(10,2)", "decimal(12,3)"), decimal_widens("decimal(10,2)", "decimal(12,1)")
        (True, False)
    """
    a, b = decimal_of(old), decimal_of(new)
    return a is not None and b is not None and b[1] >= a[1] and b[0] - b[1] >= a[0] - a[1]


def is_typed(scalar: str) -> bool:
    """Whether ``scalar`` (a canonical name) is one of this module's types."""
    return scalar in TYPED or scalar.startswith("decimal(")


def arrow_type(scalar: str) -> pa.DataType:
    """The Arrow type stored for ``scalar``."""
    ps = decimal_of(scalar)
    return pa.decimal128(*ps) if ps else TYPED[scalar]


def spark_type(scalar: str) -> str:
    """The Spark SQL type of ``scalar``.

    >>> spark_type("decimal(12,2)"), spark_type("timestamp")
    ('DECIMAL(12,2)', 'TIMESTAMP')
    """
    return scalar.upper() if scalar.startswith("decimal(") else _SPARK[scalar]


@functools.lru_cache(maxsize=64)
def python_type(scalar: str) -> Any:
    """The pydantic type that checks a Python value of ``scalar`` (:func:`check_value`)."""
    return Annotated[Any, PlainValidator(functools.partial(check_value, scalar))]


def check_value(scalar: str, v: Any) -> Any:
    """A Python value of ``scalar`` as stored; ``ValueError`` says why it does not fit."""
    if scalar == "date":
        if type(v) is not datetime.date:
            raise ValueError(f"expected a datetime.date (JSON: 'YYYY-MM-DD'), got {type(v).__name__}")
        return v
    if scalar == "timestamp":
        if not isinstance(v, datetime.datetime):
            raise ValueError(
                f"expected a datetime.datetime with a tzinfo (JSON: ISO 8601 with Z), got {type(v).__name__}"
            )
        if v.tzinfo is None or v.utcoffset() is None:
            raise ValueError("a naive datetime (no tzinfo): give its zone, e.g. tzinfo=datetime.timezone.utc")
        return v.astimezone(_UTC)
    if scalar == "binary":
        if not isinstance(v, (bytes, bytearray)):
            raise ValueError(f"expected bytes (JSON: base64 text), got {type(v).__name__}")
        return bytes(v)
    return _fit_decimal(scalar, v)


def _fit_decimal(scalar: str, v: Any) -> decimal.Decimal:
    p, s = decimal_of(scalar) or (0, 0)
    if type(v) is int:
        v = decimal.Decimal(v)
    if not isinstance(v, decimal.Decimal):
        raise ValueError(f"expected a decimal.Decimal or an int (JSON: a number or its text), got {type(v).__name__}")
    if not v.is_finite():
        raise ValueError(f"{v} is not a number a decimal({p},{s}) holds")
    ctx = decimal.Context(prec=80, traps=[decimal.Inexact, decimal.InvalidOperation])
    try:
        q = v.quantize(decimal.Decimal(1).scaleb(-s), context=ctx)
    except (decimal.Inexact, decimal.InvalidOperation):
        q = None
    if q is None or q != v or len(q.as_tuple().digits) > p and q != 0:
        raise ValueError(f"{v} does not fit decimal({p},{s}) ({p - s} digits before the point, {s} after; no rounding)")
    return q


def from_json(scalar: str, v: Any) -> Any:
    """A value of ``scalar`` in its JSON form as the Python value :func:`check_value` takes (a
    value not in a JSON form is left as it is, for the check to refuse); ``ValueError`` if the
    text is not the type's form."""
    if type(v) is not str:
        return v
    if scalar == "date":
        if not _DATE.match(v):
            raise ValueError(f"date {v[:40]!r} is not 'YYYY-MM-DD'")
        return datetime.date.fromisoformat(v)
    if scalar == "timestamp":
        if not _TIMESTAMP.match(v):
            raise ValueError(
                f"timestamp {v[:60]!r} is not ISO 8601 with a zone ('2024-05-01T12:00:00Z', at most 6 decimals "
                "of a second, an offset or Z: cbp does not guess a zone)"
            )
        return datetime.datetime.fromisoformat(v.upper().replace("Z", "+00:00")).astimezone(_UTC)
    if scalar == "binary":
        try:
            return base64.b64decode(v, validate=True)
        except binascii.Error:
            raise ValueError(f"binary {v[:40]!r} is not base64 text") from None
    if not _NUMBER.match(v.strip()):
        raise ValueError(f"decimal {v[:40]!r} is not a number's text")
    return decimal.Decimal(v.strip())


def to_json(v: Any) -> Any:
    """The JSON form of a value of these types (``json.dumps(..., default=to_json)``); TypeError
    for any other value that JSON cannot hold."""
    if isinstance(v, datetime.datetime):
        return v.astimezone(_UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode("ascii")
    raise TypeError(f"{type(v).__name__} is not JSON")


_Bad = tuple[int, str] | None


def typed_column(scalar: str, arr: pa.Array) -> tuple[pa.Array, _Bad]:
    """An Arrow column read as ``scalar``: its stored form, and its first bad value (row, message)."""
    t, want = arr.type, arrow_type(scalar)
    ok = (
        (scalar == "date" and (pa.types.is_date(t)))
        or (scalar == "timestamp" and pa.types.is_timestamp(t))
        or (scalar == "binary" and _is_binary(t))
        or (scalar.startswith("decimal(") and (pa.types.is_decimal(t) or pa.types.is_integer(t)))
    )
    if not ok:
        return arr, (_first(arr.is_valid()), f"expected {scalar} values, got an Arrow column of type {t}")
    if scalar == "timestamp" and t.tz is None:
        return arr, (
            _first(arr.is_valid()),
            f"a timestamp column without a time zone ({t}): cbp does not guess one; give the column a zone "
            "(e.g. pandas' tz_localize('UTC'), or Arrow's timestamp(unit, tz='UTC'))",
        )
    try:
        return arr.cast(want, safe=True), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    return arr, _first_unfit(scalar, arr)


def _first_unfit(scalar: str, arr: pa.Array) -> tuple[int, str]:
    """The first value of ``arr`` that does not cast to ``scalar`` safely, and why."""
    if scalar == "timestamp":  # finer than microseconds
        coarse = arr.cast(pa.timestamp("us", tz="UTC"), safe=False).cast(arr.type)
        lost = pc.fill_null(pc.not_equal(coarse, arr), False)
        return _first(lost), "a timestamp finer than microseconds (cbp keeps microseconds; truncate it first)"
    for i, v in enumerate(arr.to_pylist()):
        if v is not None:
            try:
                check_value(scalar, v)
                pa.array([v], arrow_type(scalar))
            except (ValueError, pa.ArrowException) as e:
                return i, str(e)
    return _first(arr.is_valid()), f"the Arrow column of type {arr.type} cannot be read as {scalar}"


def _is_binary(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    )


def _first(mask: Any) -> int:
    return int(pc.index(mask, True).as_py())


def field_type_of_arrow(t: pa.DataType, nullable: bool) -> str | None:
    """The schema type string of an Arrow column (a Delta table's, for a flow declared without
    ``schema:``), None for a type cbp cannot carry (a struct, a map, a naive timestamp, ...).

        >>> field_type_of_arrow(pa.int16(), False), field_type_of_arrow(pa.list_(pa.decimal128(9, 2)), True)
        ('int16', 'list<decimal(9,2)?>?')
        >>> field_type_of_arrow(pa.struct([("x", pa.int64())]), True) is None
        True
    """
    q = "?" if nullable else ""
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = _scalar_of_arrow(t.value_type)
        return None if item is None else f"list<{item}{'?' if t.value_field.nullable else ''}>{q}"
    scalar = _scalar_of_arrow(t)
    return None if scalar is None else scalar + q


def _scalar_of_arrow(t: pa.DataType) -> str | None:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_integer(t) and not pa.types.is_uint64(t):  # Spark's tinyint, smallint, int: narrow
        return {8: "int8", 16: "int16", 32: "int32"}.get(t.bit_width, "int") if pa.types.is_signed_integer(t) else "int"
    if pa.types.is_floating(t):
        return "float32" if pa.types.is_float32(t) else "float"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t) and t.tz is not None:
        return "timestamp"
    if pa.types.is_decimal(t) and 1 <= t.precision <= 38 and 0 <= t.scale <= t.precision:
        return f"decimal({t.precision},{t.scale})"
    return "binary" if _is_binary(t) else None
