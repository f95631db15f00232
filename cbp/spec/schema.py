"""Record schemas of flows: field types, their Arrow form, and record validation.

A schema is a mapping of field name to a type string: ``string``, ``int``, ``float``,
``bool``, ``json`` (any JSON value), ``date``, ``timestamp``, ``decimal(P,S)``, ``binary``
(:mod:`.typedvalues`), the narrow numbers ``int32``, ``int16``, ``int8`` and ``float32`` (stored
as ``int`` and ``float`` are, their values bounded to the width: :data:`WIDTHS`), ``list<T>`` of a
scalar type, each optionally followed by ``?`` for a
field that may be null or missing. Field names are identifiers that do
not start with ``_`` (cbp's own columns do).

Validation is total: a record either comes back as a plain dict that Arrow, Parquet and JSON can
hold, or :class:`RecordError` says which field is wrong. Text must be valid Unicode (no lone
surrogates such as ``"\ud800"``), ``json`` values are JSON (string keys, finite numbers) nested at
most :data:`MAX_DEPTH` levels counting the record itself, and a JSON line is refused before it is
parsed if it nests deeper than that.

    >>> s = RecordSchema.parse({"url": "string", "count": "int"})
    >>> s.validate({"url": "http://a/", "count": 2})
    {'url': 'http://a/', 'count': 2}
"""

from __future__ import annotations

import datetime
import decimal
import functools
import json
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

import pyarrow as pa
from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)
from typing_extensions import NotRequired, Required, TypedDict

from . import typedvalues
from .jsonvalues import MAX_DEPTH, SURROGATE, RecordError, check_json, parse_json, safe_repr, short, surrogate_message

__all__ = ["FieldType", "RecordSchema", "RecordError", "parse_type", "check_json", "MAX_DEPTH", "FIELD_NAME", "DIFF"]
__all__ += ["WIDTHS", "float32", "narrows", "misfit"]

#: The reserved field of a record's multiplicity: a nonzero int64, +1 when absent (-1: a retraction)
DIFF = "_diff"

FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")  # a field name; '_' starts cbp's own columns
_INT64 = Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)]  # what Arrow/Delta/Spark store
# JSON has no NaN or Infinity; an int in a float field is stored as the float it stands for
# (Arrow refuses ints a double cannot hold exactly)
_FLOAT = Annotated[Annotated[StrictFloat, Field(allow_inf_nan=False)] | _INT64, AfterValidator(float)]
_SCALARS: dict[str, tuple[Any, pa.DataType]] = {
    "string": (StrictStr, pa.string()),
    "int": (_INT64, pa.int64()),
    "float": (_FLOAT, pa.float64()),
    "bool": (StrictBool, pa.bool_()),
    "json": (Any, pa.string()),
}
_SPARK = {"string": "STRING", "int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "json": "STRING"}
#: The narrow numbers: type name -> (scalar, bits). Spark's ``int``, ``smallint``, ``tinyint`` and ``float``
#: (a Delta source's columns of those types): stored as an ``int`` (int64) or ``float`` (float64) is, their
#: values within the width (a float32's rounded to 32 bits); a view computes on them in Spark's widths.
WIDTHS = {"int32": ("int", 32), "int16": ("int", 16), "int8": ("int", 8), "float32": ("float", 32)}
_WIDTH_NAMES = {v: k for k, v in WIDTHS.items()}
#: The scalar type names a schema field takes (each also as ``list<T>``, except json, and nullable as ``T?``).
SCALAR_TYPES = (*_SCALARS, *WIDTHS, *typedvalues.TYPED, "decimal(P,S)")
_FLOAT32_MAX = 3.4028234663852886e38
_F32 = struct.Struct("f")


def float32(v: float) -> float:
    """``v`` rounded to the nearest 32-bit float, as Java narrows a ``double`` (past the range: an infinity).

    >>> float32(0.1), float32(1e39)
    (0.10000000149011612, inf)
    """
    if v != v or abs(v) == _INF:
        return v
    try:
        return _F32.unpack(_F32.pack(v))[0]  # type: ignore[no-any-return]
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


def _bounded_int(bits: int) -> Any:
    return Annotated[StrictInt, Field(ge=-(2 ** (bits - 1)), le=2 ** (bits - 1) - 1)]


def _finite_float32(v: float) -> float:
    out = float32(v)
    if abs(out) > _FLOAT32_MAX:
        raise ValueError(f"{v} is past the range of a float32 (at most {_FLOAT32_MAX:g})")
    return out


_TYPE_RE = re.compile(r"^\s*(?:list<\s*(\w+(?:\([\d\s,]*\))?)\s*(\?)?\s*>|(\w+(?:\([\d\s,]*\))?))\s*(\?)?\s*$")


@dataclass(frozen=True)
class FieldType:
    """One field's type: a scalar or a list of scalars (whose items may be nullable), nullable or not;
    ``bits``: an ``int``'s or ``float``'s width (64; ``int32`` is ``int`` of 32 bits)."""

    scalar: str
    is_list: bool = False
    nullable: bool = False
    items_nullable: bool = False
    bits: int = field(default=64, repr=False)

    @property
    def name(self) -> str:
        """The scalar's type name (``int32`` for an ``int`` of 32 bits)."""
        return _WIDTH_NAMES.get((self.scalar, self.bits), self.scalar)

    def __str__(self) -> str:
        base = f"list<{self.name}{'?' if self.items_nullable else ''}>" if self.is_list else self.name
        return base + ("?" if self.nullable else "")

    @property
    def arrow(self) -> pa.DataType:
        t = typedvalues.arrow_type(self.scalar) if self.scalar not in _SCALARS else _SCALARS[self.scalar][1]
        return pa.list_(t) if self.is_list else t

    @property
    def spark(self) -> str:
        """The Spark SQL type of the stored column (``json`` is text).

        >>> parse_type("list<decimal(12,2)>").spark
        'ARRAY<DECIMAL(12,2)>'
        """
        t = _SPARK[self.scalar] if self.scalar in _SPARK else typedvalues.spark_type(self.scalar)
        return f"ARRAY<{t}>" if self.is_list else t

    @property
    def python(self) -> Any:
        t = typedvalues.python_type(self.scalar) if self.scalar not in _SCALARS else _SCALARS[self.scalar][0]
        if self.bits < 64:
            t = _bounded_int(self.bits) if self.scalar == "int" else Annotated[t, AfterValidator(_finite_float32)]
        if self.is_list:
            t = list[t | None] if self.items_nullable else list[t]  # type: ignore[valid-type]
        return t | None if self.nullable else t

    def accepts(self, other: FieldType) -> bool:
        """Whether values of ``other`` (a producer's type) fit this (a consumer's) type."""
        if self.is_list != other.is_list or (other.items_nullable and not self.items_nullable):
            return False
        if other.nullable and not self.nullable:
            return False
        if self.scalar == other.scalar:
            return self.bits >= other.bits  # int32 -> int, float32 -> float widen
        if self.scalar == "float" and other.scalar == "int":
            return self.bits == 64 or other.bits <= 16  # a float32 holds an int16 exactly
        return typedvalues.decimal_widens(other.scalar, self.scalar)


def narrows(old: FieldType, new: FieldType) -> bool:
    """Whether ``new`` is ``old`` of a narrower width (``int`` -> ``int32``, ``float`` -> ``float32``, nullable
    or not as :meth:`FieldType.accepts` allows): the same stored form, whose values must fit the width.

    >>> narrows(parse_type("int"), parse_type("int32?")), narrows(parse_type("int32"), parse_type("int"))
    (True, False)
    """
    wide = FieldType(new.scalar, new.is_list, new.nullable, new.items_nullable)
    return new.scalar == old.scalar and new.bits < old.bits and wide.accepts(old)


def misfit(schema: RecordSchema, table: pa.Table) -> str | None:
    """What of ``table`` (stored records of ``schema``'s fields) does not fit a narrow field's width
    (``int32``, ``float32``, ...): the field and its first value that does not; None when all do."""
    for name, ft in schema.fields.items():
        if ft.bits == 64 or ft.is_list or name not in table.column_names:
            continue
        for v in table.column(name).to_pylist():
            if v is None:
                continue
            fits = (
                float32(v) == v or v != v if ft.scalar == "float" else -(2 ** (ft.bits - 1)) <= v < 2 ** (ft.bits - 1)
            )
            if not fits:
                return f"field '{name}' holds {v!r}, which does not fit its type {ft.name}"
    return None


def parse_type(text: str) -> FieldType:
    """Parse a type string such as ``int``, ``list<string>``, ``list<int?>`` or ``float?``.

    >>> parse_type("list<int>?")
    FieldType(scalar='int', is_list=True, nullable=True, items_nullable=False)
    """
    m = _TYPE_RE.match(str(text))
    scalar = (m.group(1) or m.group(3)) if m else None
    scalar, bits = WIDTHS.get(scalar or "", (scalar, 64))
    if scalar is not None and scalar not in _SCALARS:
        scalar = typedvalues.canonical(re.sub(r"\s+", "", scalar))  # decimal(P,S) with P, S in bounds
    if not m or scalar is None or (m.group(1) and scalar == "json"):
        raise ValueError(
            f"unknown type '{text}'; use one of {', '.join(SCALAR_TYPES)}, list<T> of a scalar T, with an optional '?'"
        )
    nulls = {"nullable": bool(m.group(4)), "items_nullable": bool(m.group(2))}
    return FieldType(scalar, is_list=bool(m.group(1)), bits=bits, **nulls)


@functools.lru_cache(maxsize=256)
def _adapter(fields: tuple[tuple[str, FieldType], ...]) -> TypeAdapter[Any]:
    """The pydantic validator of a schema's records; built once per process and schema (a task
    unpickles its plan's schemas every time)."""
    # a TypedDict, not a model: any identifier is a field name (a model reserves 'model_config' ...)
    # (called through a name typed Any: mypy checks the functional form for a literal dict only)
    typed_dict: Any = TypedDict
    td = typed_dict(
        "Record", {name: (NotRequired[ft.python] if ft.nullable else Required[ft.python]) for name, ft in fields}
    )
    td.__pydantic_config__ = ConfigDict(extra="forbid", strict=True)
    return TypeAdapter(td)


def _flat_record(flat: list[tuple[str, str, bool]], record: dict[str, Any]) -> dict[str, Any] | None:
    """``record`` checked as pydantic would accept it, for a schema of plain scalar fields; None
    if it is not plainly valid (then pydantic's validation says what is wrong, or accepts it)."""
    out: dict[str, Any] = {}
    present = 0
    for name, scalar, nullable in flat:
        v = record.get(name)
        present += name in record
        t = type(v)
        if v is None:
            if not nullable:
                return None
        elif scalar == "string":
            if t is not str or (not v.isascii() and SURROGATE.search(v)):  # isascii: a C scan, 10x a regex search
                return None
        elif scalar == "int":
            if t is not int or not -(2**63) <= v < 2**63:
                return None
        elif scalar == "bool":
            if t is not bool:
                return None
        elif t is float:  # float
            if v != v or v in (_INF, -_INF):
                return None
        elif t is int and -(2**63) <= v < 2**63:
            v = float(v)
        else:
            return None
        out[name] = v
    return out if present == len(record) else None  # else a field the schema does not have


_INF = float("inf")
_FLAT = ("string", "int", "float", "bool")
_TYPED_VALUES = (datetime.date, decimal.Decimal, bytes)  # datetime.datetime is a date


class RecordSchema:
    """The fields of a flow's records, with a fast validator (pydantic) and an Arrow schema."""

    def __init__(
        self, fields: Mapping[str, FieldType], defaults: Mapping[str, Any] | None = None, signed: bool = False
    ) -> None:
        self.fields = dict(fields)
        self.defaults = dict(
            defaults or {}
        )  # field -> the value stored rows without it get on an upgrade (YAML 'default:')
        #: whether the last field is ``_diff`` (int64, null: +1), as the engine reads increments (:meth:`signed`)
        self.is_signed = signed
        if signed:
            self.fields[DIFF] = FieldType("int", nullable=True)
        if not self.fields:
            raise ValueError("a schema needs at least one field (a record of no fields cannot be stored)")
        for name in self.fields:
            if signed and name == DIFF:
                continue
            if not isinstance(name, str) or not FIELD_NAME.match(name):
                raise ValueError(
                    f"field name {short(name)} must be an identifier (letters, digits, _) not starting with '_'"
                )
        self._adapter = _adapter(tuple(self.fields.items()))
        self._json_fields = [n for n, ft in self.fields.items() if ft.scalar == "json"]
        self._text_fields = [(n, ft.is_list) for n, ft in self.fields.items() if ft.scalar == "string"]
        self._list_fields = [n for n, ft in self.fields.items() if ft.is_list]
        #: (name, scalar, nullable) of each field when all are plain scalars: :meth:`validate` checks
        #: such records itself and leaves pydantic only the ones it cannot accept (to say why)
        self._flat = (
            None
            if any(ft.is_list or ft.scalar not in _FLAT or ft.bits < 64 for ft in self.fields.values())
            else [(n, ft.scalar, ft.nullable) for n, ft in self.fields.items()]
        )
        #: (name, scalar, is_list) of the fields of a type JSON lacks (a date ...): read from their JSON form
        self._typed = [(n, ft.scalar, ft.is_list) for n, ft in self.fields.items() if typedvalues.is_typed(ft.scalar)]

    def json_defaults(self) -> dict[str, Any]:
        """:attr:`defaults` as JSON values (a date as its ISO text ...), as a home records them."""
        return {n: typedvalues.to_json(v) if isinstance(v, _TYPED_VALUES) else v for n, v in self.defaults.items()}

    def __getstate__(self) -> dict[str, Any]:
        return {"fields": self.user_fields, "defaults": self.defaults, "signed": self.is_signed}

    def __setstate__(self, st: dict[str, Any]) -> None:
        self.__init__(st["fields"], st.get("defaults"), st.get("signed", False))  # type: ignore[misc]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RecordSchema) and other.fields == self.fields

    @property
    def user_fields(self) -> dict[str, FieldType]:
        """The fields the flow declares (without ``_diff``)."""
        return {n: ft for n, ft in self.fields.items() if n != DIFF} if self.is_signed else self.fields

    def signed(self) -> RecordSchema:
        """This schema with a last field ``_diff`` (a nullable int64: null means +1), as records of
        increments are stored and read; :meth:`from_storage` gives a null one as 1.

            >>> RecordSchema.parse({"url": "string"}).signed().arrow.names
            ['url', '_diff']
        """
        return self if self.is_signed else RecordSchema(self.fields, self.defaults, signed=True)

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> RecordSchema:
        """Build a schema from ``{field: type string}``; ``ValueError`` says what is wrong."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"a schema is a mapping of field names to type strings, got {type(raw).__name__}")
        return cls({k: parse_type(v) for k, v in raw.items()})

    def __repr__(self) -> str:
        return "RecordSchema({" + ", ".join(f"{k!r}: '{v}'" for k, v in self.fields.items()) + "})"

    @property
    def arrow(self) -> pa.Schema:
        """The Arrow schema of stored records (every column nullable; ``json`` fields as text)."""
        return pa.schema([pa.field(n, ft.arrow, nullable=True) for n, ft in self.fields.items()])

    def validate(self, record: Any) -> dict[str, Any]:
        """Return the record as a plain dict with every field, or raise :class:`RecordError`."""
        if self.defaults and isinstance(record, Mapping) and any(k not in record for k in self.defaults):
            record = {**self.defaults, **record}  # a field with a default may be left out (YAML 'default:')
        if self._flat is not None and type(record) is dict:
            out = _flat_record(self._flat, record)
            if out is not None:
                return out
        if not isinstance(record, Mapping):
            raise RecordError(None, f"expected a JSON object, got {type(record).__name__}")
        try:
            rec = self._adapter.validate_python(dict(record))
        except ValidationError as e:
            raise _record_error(e) from None
        out = {name: rec.get(name) for name in self.fields}
        for name, is_list in self._text_fields:
            v = out[name]
            if v is not None:
                for text in v if is_list else (v,):
                    if text is not None and SURROGATE.search(text):
                        raise RecordError(name, surrogate_message(text, f"[{v.index(text)}]" if is_list else ""))
        for name in self._json_fields:
            if out[name] is not None:
                check_json(name, out[name])
        return out

    def validate_json_line(self, line: str) -> dict[str, Any]:
        """Parse one JSON text and validate it (malformed JSON is a :class:`RecordError` too).

        Work is bounded: a text nested deeper than :data:`MAX_DEPTH` is refused before it is parsed.
        """
        return self.validate(self.parse_json_line(line))

    def parse_json_line(self, line: str) -> Any:
        """One JSON text parsed (not validated), bounded as :meth:`validate_json_line` says; the
        fields of a type JSON lacks (``date`` ...) are read from their JSON form (:meth:`from_json`)."""
        value = parse_json(line)
        if self._typed and type(value) is dict:
            value = self.from_json(value, line)
        return value

    def from_json(self, record: dict[str, Any], line: str | None = None) -> dict[str, Any]:
        """``record`` with its ``date``, ``timestamp``, ``decimal`` and ``binary`` fields read from
        their JSON form (:mod:`cbp.spec.typedvalues`); ``line``: the JSON text it was parsed from,
        whose numbers a decimal field takes exactly (never through a float).

            >>> s = RecordSchema.parse({"d": "date", "p": "decimal(4,2)"})
            >>> s.validate(s.from_json({"d": "2024-05-01", "p": "1.5"}))
            {'d': datetime.date(2024, 5, 1), 'p': Decimal('1.50')}
        """
        exact: dict[str, Any] | None = None
        out = dict(record)
        for name, scalar, is_list in self._typed:
            v = out.get(name)
            if v is None:
                continue
            if scalar.startswith("decimal(") and line is not None and _has_float(v):
                if exact is None:
                    exact = json.loads(line, parse_float=decimal.Decimal)
                v = exact.get(name, v)
            try:
                if is_list and type(v) is list:
                    out[name] = [typedvalues.from_json(scalar, x) for x in v]
                elif not is_list:
                    out[name] = typedvalues.from_json(scalar, v)
            except ValueError as e:
                raise RecordError(name, str(e)) from None
        return out

    def to_storage(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Encode ``json`` fields as text, as they are stored."""
        if not self._json_fields:
            return dict(record)
        out = dict(record)
        for n in self._json_fields:
            if out.get(n) is not None:
                out[n] = json.dumps(out[n], sort_keys=True)
        return out

    def from_storage(self, record: dict[str, Any]) -> dict[str, Any]:
        """Decode stored ``json`` fields back to values (and, signed, a null or missing ``_diff`` to 1);
        a date, timestamp, decimal or binary field in its JSON form (a broadcast copy crosses the
        shuffle as JSON text) back to its Python value."""
        if self.is_signed and record.get(DIFF) is None:
            record[DIFF] = 1
        for n in self._json_fields:
            if record.get(n) is not None:
                record[n] = json.loads(record[n])
        for n, scalar, is_list in self._typed:
            v = record.get(n)
            if type(v) is str:
                record[n] = typedvalues.from_json(scalar, v)
            elif is_list and v and any(type(x) is str for x in v):
                record[n] = [typedvalues.from_json(scalar, x) for x in v]
        return record

    def decoded_copy(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """A stored row decoded as :meth:`from_storage` does, sharing nothing mutable with ``row``
        (a translator may change the record it is given in place; ``row`` stays as it was stored).

            >>> s = RecordSchema.parse({"tags": "list<string>", "extra": "json"})
            >>> row = {"tags": ["a"], "extra": '{"n": 1}'}
            >>> rec = s.decoded_copy(row)
            >>> rec["tags"].append("b"); rec
            {'tags': ['a', 'b'], 'extra': {'n': 1}}
            >>> row
            {'tags': ['a'], 'extra': '{"n": 1}'}
        """
        out = dict(row)
        for n in self._list_fields:
            if out.get(n) is not None:
                out[n] = list(out[n])
        return self.from_storage(out)

    def to_arrow(
        self, records: Sequence[Mapping[str, Any]], extra: pa.Schema | None = None, diffs: list[int] | None = None
    ) -> pa.Table:
        """Validated records (plus ``extra`` leading columns) to an Arrow table; with ``diffs``
        (one per record), a last column ``_diff`` (int64) holds them."""
        schema = self.arrow if extra is None else pa.schema(list(extra) + list(self.arrow))
        rows = [self.to_storage(r) for r in records] if self._json_fields else records
        table = pa.Table.from_pylist(rows, schema=schema)
        return table if diffs is None else table.append_column(pa.field(DIFF, pa.int64()), pa.array(diffs, pa.int64()))


def _has_float(v: Any) -> bool:
    return type(v) is float or (type(v) is list and any(type(x) is float for x in v))


def _record_error(e: ValidationError) -> RecordError:
    err = e.errors()[0]
    loc = [short(x) if not isinstance(x, int) else str(x) for x in err.get("loc", ())]
    field = loc[0] if loc else None
    kind = err.get("type", "")
    if kind == "missing":
        return RecordError(field, "missing (every field without '?' is required)")
    if kind == "extra_forbidden":
        return RecordError(field, "unknown field (not in the flow's schema)")
    where = ("[" + "][".join(loc[1:]) + "]") if len(loc) > 1 else ""
    if kind == "value_error":  # a date, timestamp, decimal or binary value: the message says what it got
        return RecordError(field, f"{err.get('msg', 'invalid').removeprefix('Value error, ')}{where}")
    got = err.get("input")
    return RecordError(field, f"{err.get('msg', 'invalid')}{where}, got {type(got).__name__} {safe_repr(got)}")
