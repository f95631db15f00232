"""Record schemas of flows: field types, their Arrow form, and record validation.

A schema is a mapping of field name to a type string: ``string``, ``int``, ``float``,
``bool``, ``json`` (any JSON value), ``list<T>`` of a scalar type, each optionally
followed by ``?`` for a field that may be null or missing.

    >>> s = RecordSchema.parse({"url": "string", "count": "int"})
    >>> s.validate({"url": "http://a/", "count": 2})
    {'url': 'http://a/', 'count': 2}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Mapping, Optional

import pyarrow as pa
from pydantic import ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter, ValidationError, create_model

__all__ = ["FieldType", "RecordSchema", "RecordError", "parse_type"]

_INT64 = Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1)]  # what Arrow/Delta/Spark store
_FLOAT = Annotated[StrictFloat, Field(allow_inf_nan=False)] | _INT64  # JSON has no NaN or Infinity
_SCALARS: dict[str, tuple[Any, pa.DataType]] = {
    "string": (StrictStr, pa.string()),
    "int": (_INT64, pa.int64()),
    "float": (_FLOAT, pa.float64()),
    "bool": (StrictBool, pa.bool_()),
    "json": (Any, pa.string()),
}
_TYPE_RE = re.compile(r"^\s*(?:list<\s*(\w+)\s*(\?)?\s*>|(\w+))\s*(\?)?\s*$")


class RecordError(ValueError):
    """One record does not fit its schema; ``field`` names the field at fault."""

    def __init__(self, field: str | None, message: str) -> None:
        self.field = field
        super().__init__(f"field '{field}': {message}" if field else message)


@dataclass(frozen=True)
class FieldType:
    """One field's type: a scalar or a list of scalars (whose items may be nullable), nullable or not."""

    scalar: str
    is_list: bool = False
    nullable: bool = False
    items_nullable: bool = False

    def __str__(self) -> str:
        base = f"list<{self.scalar}{'?' if self.items_nullable else ''}>" if self.is_list else self.scalar
        return base + ("?" if self.nullable else "")

    @property
    def arrow(self) -> pa.DataType:
        t = _SCALARS[self.scalar][1]
        return pa.list_(t) if self.is_list else t

    @property
    def python(self) -> Any:
        t = _SCALARS[self.scalar][0]
        if self.is_list:
            t = list[Optional[t]] if self.items_nullable else list[t]  # type: ignore[valid-type]
        return Optional[t] if self.nullable else t

    def accepts(self, other: "FieldType") -> bool:
        """Whether values of ``other`` (a producer's type) fit this (a consumer's) type."""
        if self.is_list != other.is_list or (other.items_nullable and not self.items_nullable):
            return False
        if other.nullable and not self.nullable:
            return False
        return self.scalar == other.scalar or (self.scalar == "float" and other.scalar == "int")


def parse_type(text: str) -> FieldType:
    """Parse a type string such as ``int``, ``list<string>``, ``list<int?>`` or ``float?``.

        >>> parse_type("list<int>?")
        FieldType(scalar='int', is_list=True, nullable=True, items_nullable=False)
    """
    m = _TYPE_RE.match(str(text))
    scalar = (m.group(1) or m.group(3)) if m else None
    if not m or scalar not in _SCALARS or (m.group(1) and scalar == "json"):
        raise ValueError(
            f"unknown type '{text}'; use one of {', '.join(_SCALARS)}, list<T> of a scalar T, with an optional '?'"
        )
    return FieldType(scalar, is_list=bool(m.group(1)), nullable=bool(m.group(4)), items_nullable=bool(m.group(2)))


class RecordSchema:
    """The fields of a flow's records, with a fast validator (pydantic) and an Arrow schema."""

    def __init__(self, fields: Mapping[str, FieldType]) -> None:
        self.fields = dict(fields)
        defs: dict[str, Any] = {}
        for name, ft in self.fields.items():
            defs[name] = (ft.python, Field(default=None) if ft.nullable else ...)
        model = create_model(  # type: ignore[call-overload]
            "Record", __config__=ConfigDict(extra="forbid", strict=True), **defs
        )
        self._adapter = TypeAdapter(model)
        self._json_fields = [n for n, ft in self.fields.items() if ft.scalar == "json"]

    def __getstate__(self) -> dict[str, Any]:
        return {"fields": self.fields}

    def __setstate__(self, st: dict[str, Any]) -> None:
        self.__init__(st["fields"])  # type: ignore[misc]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RecordSchema) and other.fields == self.fields

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> "RecordSchema":
        """Build a schema from ``{field: type string}``."""
        return cls({str(k): parse_type(v) for k, v in raw.items()})

    def __repr__(self) -> str:
        return "RecordSchema({" + ", ".join(f"{k!r}: '{v}'" for k, v in self.fields.items()) + "})"

    @property
    def arrow(self) -> pa.Schema:
        """The Arrow schema of stored records (every column nullable; ``json`` fields as text)."""
        return pa.schema([pa.field(n, ft.arrow, nullable=True) for n, ft in self.fields.items()])

    def validate(self, record: Any) -> dict[str, Any]:
        """Return the record as a plain dict with every field, or raise :class:`RecordError`."""
        if not isinstance(record, Mapping):
            raise RecordError(None, f"expected a JSON object, got {type(record).__name__}")
        try:
            model = self._adapter.validate_python(dict(record))
        except ValidationError as e:
            raise _record_error(e) from None
        return {name: getattr(model, name) for name in self.fields}

    def validate_json_line(self, line: str) -> dict[str, Any]:
        """Parse one JSON text and validate it (malformed JSON is a :class:`RecordError` too)."""
        try:
            value = json.loads(line, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
        except json.JSONDecodeError as e:
            raise RecordError(None, f"malformed JSON: {e.msg} at column {e.colno}") from None
        return self.validate(value)

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
        """Decode stored ``json`` fields back to values."""
        for n in self._json_fields:
            if record.get(n) is not None:
                record[n] = json.loads(record[n])
        return record

    def to_arrow(self, records: list[Mapping[str, Any]], extra: pa.Schema | None = None) -> pa.Table:
        """Validated records (plus ``extra`` leading columns) to an Arrow table."""
        schema = self.arrow if extra is None else pa.schema(list(extra) + list(self.arrow))
        rows = [self.to_storage(r) for r in records] if self._json_fields else records
        return pa.Table.from_pylist(rows, schema=schema)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise RecordError(k, "appears twice in the same JSON object")
        seen[k] = v
    return seen


def _no_constant(name: str) -> Any:
    raise RecordError(None, f"malformed JSON: {name} is not a JSON number")


def _record_error(e: ValidationError) -> RecordError:
    err = e.errors()[0]
    loc = [str(x) for x in err.get("loc", ()) if x != "Record"]
    field = loc[0] if loc else None
    kind = err.get("type", "")
    if kind == "missing":
        return RecordError(field, "missing (every field without '?' is required)")
    if kind == "extra_forbidden":
        return RecordError(field, "unknown field (not in the flow's schema)")
    where = ("[" + "][".join(loc[1:]) + "]") if len(loc) > 1 else ""
    got = err.get("input")
    return RecordError(field, f"{err.get('msg', 'invalid')}{where}, got {type(got).__name__} {got!r:.60}")
