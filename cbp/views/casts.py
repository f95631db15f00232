"""``CAST(x AS t)``, ``x::t`` and ``TRY_CAST`` in a view's expressions, with Spark 4's ANSI semantics:
the result type when the pipeline is loaded (a cast Spark refuses under ANSI, such as a date to an
int, is ``view-unsupported``), and the value on a row: a string trimmed and parsed as Spark parses it
(``' 12 '`` as 12, ``'1.5'`` not an int, ``'2024-1-5'`` a date), a decimal rounded HALF_UP, a float
truncated toward zero into an int, a timestamp's date in UTC. A value that does not convert (malformed
or out of the type's range) is a :class:`CastFailure`, which fails the epoch as ``view-cast`` naming
the view and the row (Spark's ANSI mode fails the query); ``TRY_CAST`` gives NULL instead.

    >>> cast_value(" 12 ", "int32"), cast_value("1.005", "decimal(5,2)"), cast_value(2.9, "int64")
    (12, Decimal('1.01'), 2)
    >>> cast_value("abc", "int32", safe=True) is None
    True
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
import struct
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from sqlglot import exp

from ..errors import UserCodeError
from ..spec.typedvalues import decimal_of
from .mode import ansi, wrap_bits
from .viewerror import ViewError, construct_name

__all__ = [
    "CastFailure",
    "cast_target",
    "cast_type",
    "cast_value",
    "comparable",
    "in_view",
    "to_date",
    "to_timestamp",
    "to_text",
    "java_float",
]

_UTC = datetime.timezone.utc
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)
_EXACT = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP)
_T = exp.DataType.Type
#: sqlglot's type -> the target's name in a plan (``int32``: Spark's INT, checked to 32 bits).
_TARGETS = {_T.INT: "int32", _T.BIGINT: "int64", _T.SMALLINT: "int16", _T.TINYINT: "int8"}
_TARGETS |= {_T.DOUBLE: "double", _T.FLOAT: "float32", _T.TEXT: "string", _T.VARCHAR: "string", _T.CHAR: "string"}
_TARGETS |= {_T.BOOLEAN: "bool", _T.DATE: "date", _T.TIMESTAMP: "timestamp", _T.TIMESTAMPTZ: "timestamp"}
_TARGETS |= {_T.TIMESTAMPLTZ: "timestamp"}
_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_SPARK = {"int8": "TINYINT", "int16": "SMALLINT", "int32": "INT", "int64": "BIGINT", "double": "DOUBLE"}
_SPARK |= {"float32": "FLOAT", "string": "STRING", "bool": "BOOLEAN", "date": "DATE", "timestamp": "TIMESTAMP"}
_INT = re.compile(r"[+-]?\d+")
_LEGACY_INT = re.compile(r"([+-]?)(?:(\d+)\.?\d*|\.\d+)")  # non-ANSI: a fraction is dropped
_DEC = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_DOUBLE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[dDfF]?")
_SPECIAL = {"nan": math.nan, "inf": math.inf, "+inf": math.inf, "infinity": math.inf, "+infinity": math.inf}
_SPECIAL |= {"-inf": -math.inf, "-infinity": -math.inf}
_TRUE, _FALSE = {"t", "true", "y", "yes", "1"}, {"f", "false", "n", "no", "0"}
_DATE = re.compile(r"([+-]?\d{4,7})(?:-(\d{1,2})(?:-(\d{1,2})(?:[ T].*)?)?)?", re.DOTALL)
_TS = re.compile(
    r"([+-]?\d{4,7})(?:-(\d{1,2})(?:-(\d{1,2})(?:[ T](\d{1,2})(?::(\d{1,2})(?::(\d{1,2})(?:\.(\d{0,9}))?)?)?)?)?)?"
    r"\s*(Z|UTC|[+-]\d{1,2}(?::?\d{2})?)?"
)


class CastFailure(ValueError):
    """A value Spark's ANSI mode cannot convert: ``spark`` is Spark's error class."""

    def __init__(self, message: str, spark: str = "CAST_INVALID_INPUT") -> None:
        super().__init__(message)
        self.spark = spark


def _spark_name(target: str) -> str:
    return _SPARK.get(target) or target.upper()


def _malformed(v: Any, target: str) -> CastFailure:
    return CastFailure(f"the value {v!r} cannot be cast to {_spark_name(target)}: it is malformed")


def _overflow(v: Any, target: str) -> CastFailure:
    return CastFailure(f"the value {v!r} cannot be cast to {_spark_name(target)}: overflow", "CAST_OVERFLOW")


def cast_target(to: exp.Expr | None) -> str | None:
    """The plan's name of a cast's target type (None: not one a view casts to).

    >>> cast_target(exp.DataType.build("decimal(5, 2)"))
    'decimal(5,2)'
    """
    if not isinstance(to, exp.DataType):
        return None
    if to.this == _T.DECIMAL:
        params = [int(p.this.this) for p in to.expressions]
        p, s = (params + [10, 0][len(params) :])[:2] if params else (10, 0)
        return f"decimal({p},{s})" if 0 < p <= 38 and 0 <= s <= p else None
    return _TARGETS.get(to.this)


def _view_type(target: str) -> str:
    if target in _BITS:
        return "int"
    return "float" if target in ("double", "float32") else target


def _family(t: str) -> str:
    if t in ("int", "float") or decimal_of(t) is not None:
        return "number"
    return "time" if t in ("date", "timestamp") else t


#: (from, to) families Spark's ANSI cast refuses.
_REFUSED = {("time", "number"), ("number", "time"), ("time", "bool"), ("bool", "time")}


def cast_type(node: exp.Expr, source: str | None) -> str:
    """The view type of cast ``node`` whose operand has type ``source``; :class:`ViewError` when the
    target is not a type a view casts to, or Spark's ANSI mode refuses the cast.

    >>> import sqlglot
    >>> cast_type(sqlglot.parse_one("CAST(s AS SMALLINT)", read="spark"), "string")
    'int'
    """
    target = cast_target(node.args.get("to"))
    if target is None:
        to = node.args.get("to")
        raise ViewError(
            "view-unsupported",
            f"CAST to {to.sql(dialect='spark') if isinstance(to, exp.Expr) else to} (a view casts to int, bigint, "
            "smallint, tinyint, double, float, decimal(p,s), string, boolean, date and timestamp)",
            node=node,
        )
    if source is not None and source != "string":
        pair = (_family(source), _family(_view_type(target)))
        if (pair in _REFUSED and not (source == "timestamp" and target in _BITS)) or source == "binary":
            later = source in ("timestamp", "binary") or pair == ("number", "time")  # Spark casts these
            why = "not yet in a view" if later else "Spark's ANSI mode refuses it too"
            raise ViewError("view-unsupported", f"CAST of a {source} to {_spark_name(target)} ({why})", node=node)
    return _view_type(target)


def _fit(v: int, target: str) -> int:
    bits = _BITS[target]
    if not -(2 ** (bits - 1)) <= v < 2 ** (bits - 1):
        raise _overflow(v, target)
    return v


def _to_int(v: Any, target: str) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return _fit(v, target)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            raise _overflow(v, target)
        return _fit(int(v), target)
    if isinstance(v, decimal.Decimal):
        return _fit(int(v), target)
    if isinstance(v, datetime.datetime):
        return _fit((v - _EPOCH) // datetime.timedelta(seconds=1), target)
    text = str(v).strip()
    if not _INT.fullmatch(text) or not -(2 ** (_BITS[target] - 1)) <= int(text) < 2 ** (_BITS[target] - 1):
        raise _malformed(v, target)
    return int(text)


def _to_decimal(v: Any, target: str) -> decimal.Decimal:
    p, s = decimal_of(target) or (10, 0)
    if isinstance(v, bool):
        d = decimal.Decimal(int(v))
    elif isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            raise _overflow(v, target)
        d = decimal.Decimal(repr(v))  # as Spark reads a double: its shortest decimal digits
    elif isinstance(v, str):
        if not _DEC.fullmatch(v.strip()):
            raise _malformed(v, target)
        d = decimal.Decimal(v.strip())
    else:
        d = decimal.Decimal(v)
    fits = d == 0 or d.adjusted() + 1 <= p - s  # (a value past 200 digits cannot be quantized)
    q = d.quantize(decimal.Decimal(1).scaleb(-s), context=_EXACT) if fits else d
    if not fits or (q != 0 and q.adjusted() + 1 > p - s):
        raise CastFailure(f"the value {v!r} cannot be represented as DECIMAL({p},{s})", "NUMERIC_VALUE_OUT_OF_RANGE")
    return q


def _float32(x: float) -> float:
    try:
        return float(struct.unpack("f", struct.pack("f", x))[0])
    except OverflowError:
        return math.copysign(math.inf, x)


def _to_double(v: Any, target: str) -> float:
    if isinstance(v, str):
        text = v.strip()
        if text.lower() in _SPECIAL:
            x = _SPECIAL[text.lower()]
        elif _DOUBLE.fullmatch(text):
            x = float(text.rstrip("dDfF"))
        else:
            raise _malformed(v, target)
    else:
        x = float(v)
    return _float32(x) if target == "float32" else x


def _java_double(x: float, text: str | None = None) -> str:
    """Java's ``Double.toString``: decimal between 1e-3 and 1e7, else ``d.dddE±n``; ``text``: the shortest
    digits that read back as the value (``repr``'s of a double; a float's, for :func:`java_float`)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    text = repr(x) if text is None else text
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        if "e" not in text:
            return text
        plain = format(decimal.Decimal(text), "f")
        return plain if "." in plain else plain + ".0"
    sign, digits, exponent = decimal.Decimal(text).as_tuple()
    assert isinstance(exponent, int)
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    e = exponent + len(digits) - 1
    if len(ds) == 1:  # Java writes a digit after the point: the two digits nearest the value (4.9E-324, 1.4E-45)
        mantissa, power = format(decimal.Decimal(x), ".1e").split("e")
        ds, e = mantissa.lstrip("-").replace(".", ""), int(power)
    return f"{'-' if sign else ''}{ds[0]}.{ds[1:] or '0'}E{e}"


def java_float(x: float | None) -> str | None:
    """A ``float`` (a 32-bit value, held as the double it is) as Spark casts it to a string, Java's
    ``Float.toString``: the shortest digits that read back as the 32-bit value (as Java 19+ writes them),
    not the double's.

    >>> java_float(_float32(0.1)), java_float(_float32(1e7)), java_float(_float32(9.999e-4)), java_float(-0.0)
    ('0.1', '1.0E7', '9.999E-4', '-0.0')
    """
    if x is None:
        return None
    return _java_double(x, str(np.float32(x)))


def to_text(v: Any) -> str:
    """A value as Spark casts it to a string (a double as Java prints it, a timestamp in UTC).

    >>> to_text(1e7), to_text(True), to_text(datetime.datetime(2024, 1, 5, 10, 0, 0, 120000, tzinfo=_UTC))
    ('1.0E7', 'true', '2024-01-05 10:00:00.12')
    """
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return _java_double(v)
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, datetime.datetime):
        t = v.astimezone(_UTC)
        text = f"{t.date().isoformat()} {t.strftime('%H:%M:%S')}"  # the year in 4 digits (strftime: '999')
        return text + (f".{t.microsecond:06d}".rstrip("0") if t.microsecond else "")
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    return str(v)


def _to_bool(v: Any, target: str) -> bool:
    if isinstance(v, str):
        text = v.strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise _malformed(v, target)
    return bool(v)


def to_date(v: Any) -> datetime.date:
    """A string, date or timestamp as a date, as Spark casts it (``'2024'``, ``'2024-1-5'``,
    ``'2024-01-05 10:00'`` are dates; ``'2024/01/05'`` is a :class:`CastFailure`).

    >>> to_date(" 2024-1-5 "), to_date("2024-02")
    (datetime.date(2024, 1, 5), datetime.date(2024, 2, 1))
    """
    if isinstance(v, datetime.datetime):
        return v.astimezone(_UTC).date()
    if isinstance(v, datetime.date):
        return v
    m = _DATE.fullmatch(str(v).strip())
    try:
        if m is None:
            raise ValueError(v)
        return datetime.date(int(m[1]), int(m[2] or 1), int(m[3] or 1))
    except ValueError:
        raise _malformed(v, "date") from None


def _zone(text: str | None) -> datetime.tzinfo:
    if text in (None, "Z", "UTC"):
        return _UTC
    assert text is not None
    digits = text[1:].replace(":", "")
    hours, minutes = (int(digits[:-2]), int(digits[-2:])) if len(digits) > 2 else (int(digits), 0)
    delta = datetime.timedelta(hours=hours, minutes=minutes)
    return datetime.timezone(-delta if text[0] == "-" else delta)


def to_timestamp(v: Any) -> datetime.datetime:
    """A string or date as a UTC timestamp, as Spark casts it (no zone: UTC, the session's).

    >>> to_timestamp("2024-01-05T10:11:12.5Z")
    datetime.datetime(2024, 1, 5, 10, 11, 12, 500000, tzinfo=datetime.timezone.utc)
    """
    if isinstance(v, datetime.datetime):
        return v.astimezone(_UTC)
    if isinstance(v, datetime.date):
        return datetime.datetime(v.year, v.month, v.day, tzinfo=_UTC)
    m = _TS.fullmatch(str(v).strip())
    try:
        if m is None:
            raise ValueError(v)
        y, mo, d, h, mi, s = (int(m[i] or (1 if i < 4 else 0)) for i in range(1, 7))
        micros = int((m[7] or "").ljust(6, "0")[:6])
        return datetime.datetime(y, mo, d, h, mi, s, micros, tzinfo=_zone(m[8])).astimezone(_UTC)
    except ValueError:
        raise _malformed(v, "timestamp") from None


def cast_value(v: Any, target: str, safe: bool = False) -> Any:
    """``v`` cast to ``target`` (a name of :func:`cast_target`); a value that does not convert is a
    :class:`CastFailure`, or NULL when ``safe`` (``TRY_CAST``).

    >>> cast_value(300, "int8", safe=True) is None, cast_value(" yes ", "bool"), cast_value(-2.9, "int32")
    (True, True, -2)
    """
    if v is None:
        return None
    try:
        if target in _BITS:
            return _to_int(v, target)
        if target.startswith("decimal("):
            return _to_decimal(v, target)
        if target in ("double", "float32"):
            return _to_double(v, target)
        if target == "bool":
            return _to_bool(v, target)
        if target == "date":
            return to_date(v)
        if target == "timestamp":
            return to_timestamp(v)
        return to_text(v)
    except CastFailure:
        if safe:
            return None
        if not ansi():  # Spark's non-ANSI cast: NULL, or an int narrowed as Java narrows it
            return _legacy_int(v, target) if target in _BITS else None
        raise


def _legacy_int(v: Any, target: str) -> int | None:
    """A value ANSI cannot cast to an int type, as Spark's non-ANSI cast gives it: a string's fraction
    dropped (NULL when malformed or out of range), a double saturated to 64 bits (to 32 first for a
    narrower type; NaN is 0) and wrapped, a decimal or an int wrapped, a timestamp's seconds NULL past the range."""
    bits = _BITS[target]
    if isinstance(v, str):
        m = _LEGACY_INT.fullmatch(v.strip())
        n = int(m[2] or 0) * (-1 if m[1] == "-" else 1) if m else None
        return n if n is not None and -(2 ** (bits - 1)) <= n < 2 ** (bits - 1) else None
    if isinstance(v, float):
        top = 2 ** (63 if bits == 64 else 31)
        n = 0 if math.isnan(v) else max(-top, min(top - 1, int(v) if math.isfinite(v) else int(math.copysign(top, v))))
        return wrap_bits(n, bits)
    if isinstance(v, (int, decimal.Decimal)):
        return wrap_bits(wrap_bits(int(v), 64), bits)
    return None


#: The implicit casts of a comparison (Spark 4, ANSI): the string side is cast to the other's type.
_IMPLICIT = ({"time", "string"}, {"number", "string"}, {"bool", "string"})


def comparable(node: exp.Expr, types: list[str | None], operands: list[exp.Expr] | None = None) -> None:
    """Refuses (``view-unsupported``) a comparison of ``types`` Spark does not cast implicitly, or of a
    string literal (among ``operands``) that is not a value of the other side's type.

    >>> import sqlglot
    >>> comparable(sqlglot.parse_one("d > '2024-1-5'", read="spark"), ["date", "string"])  # fine: None
    """
    known = {t for t in types if t is not None}
    families = {_family(t) for t in known}
    if len(families) > 1 and families not in _IMPLICIT:
        raise ViewError(
            "view-unsupported",
            f"{construct_name(node)} comparing {' with '.join(sorted(known))} (Spark casts neither implicitly)",
            node=node,
        )
    other = sorted(known - {"string"})
    if len(families) == 2 and operands and ansi():  # a string literal compared with a number, boolean or date:
        # it must be one (non-ANSI: NULL)
        target = "bool" if other == ["bool"] else other[-1] if families == _IMPLICIT[0] else "double"
        target = "int64" if other == ["int"] else target
        for o in operands:
            if isinstance(o, exp.Literal) and o.is_string:
                try:
                    cast_value(o.this, target)
                except CastFailure as e:
                    raise ViewError("view-unsupported", f"{e} (Spark fails the query: {e.spark})", node=o) from None


def in_view(node: exp.Expr, row: Mapping[str, Any], ev: Callable[[exp.Expr, Mapping[str, Any]], Any]) -> Any:
    """``cbp_view(expr, 'view')`` (:data:`cbp.views.exprs.VIEW_FN`): ``expr``'s value; a value Spark's
    ANSI mode cannot convert fails the epoch with ``view-cast``, naming the view and the row."""
    try:
        return ev(node.expressions[0], row)
    except CastFailure as e:
        shown = {k: v for k, v in row.items() if k != "_diff"}
        raise UserCodeError(
            f"view '{node.expressions[1].this}': {e} (Spark's ANSI mode fails the query too: {e.spark}; "
            f"TRY_CAST gives NULL); the row: {str(shown)[:1000]}",
            code="view-cast",
        ) from None
