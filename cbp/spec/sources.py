"""Source and key declarations of external flows: ``source: {delta: URI}`` and ``key:`` (AUTO CDC).

A *source flow* is fed from a Delta table by ``cbp sync`` (:mod:`cbp.controller.sources`); a
*keyed flow* keeps its current row per key and lands each feed as signed changes
(:mod:`cbp.controller.keyed`). Both are declared on an external flow::

    flows:
      orders:
        external: true
        source: {delta: s3://bucket/tables/orders}   # a local path, a file: URI or s3://
        key: [order_id]                              # optional: upserts by key
        sequence_by: updated_at                      # optional: the newest event per key wins
        delete_when: is_deleted                      # optional: a bool field that marks a delete
        schema: {order_id: int, customer: string, amount: float, updated_at: int, is_deleted: bool}

``schema:`` may be left out of a flow with a ``source``: it is then the table's own
(:func:`source_fields`, read when the pipeline is loaded).

    >>> from cbp.spec.schema import RecordSchema
    >>> s = RecordSchema.parse({"id": "int", "v": "float", "ts": "int"})
    >>> check_keyed(s, ["id"], "ts", None, "flow 'x'")
    ('id',)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .schema import RecordSchema
from .typedvalues import field_type_of_arrow

__all__ = ["RawSource", "SourceSpecError", "flow_source", "source_fields", "check_source_uri", "check_keyed"]
__all__ += ["ORDERABLE"]

ORDERABLE = ("int", "float", "string", "date", "timestamp")
"""The scalar types a ``sequence_by`` field may have."""


class RawSource(BaseModel):
    """``source:`` of a flow in YAML: where its records come from."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    delta: str = Field(description="the Delta table's URI: a local path, a `file:` URI or `s3://BUCKET/PATH`")


class SourceSpecError(ValueError):
    """A bad ``source``/``key`` declaration: ``(message, code)``; the loader adds file and line."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def flow_source(
    name: str,
    raw: Any,
    schema: RecordSchema,
    framed: bool,
    fail: Callable[[tuple[str, ...], str, str], Exception],
    base: str = ".",
) -> dict[str, Any]:
    """The :class:`~cbp.spec.FlowSpec` fields ``source``, ``key``, ``sequence_by``, ``delete_when`` of
    flow ``name`` (``raw``: its YAML, in directory ``base``), checked; a mistake is raised as
    ``fail(where, message, code)``."""
    try:
        if (raw.source is not None or raw.key is not None) and not raw.external:
            raise SourceSpecError(
                f"flow '{name}': 'source' and 'key' belong to external flows (external: true)", "not-external"
            )
        if (raw.source is not None or raw.key is not None) and framed:
            raise SourceSpecError(
                f"flow '{name}': a source or keyed flow lands one increment per feed; it cannot have a frame_by",
                "source-framed",
            )
        keys = check_keyed(schema, raw.key, raw.sequence_by, raw.delete_when, f"flow '{name}'")
        uri = check_source_uri(raw.source.delta, f"flow '{name}'", base) if raw.source is not None else None
    except SourceSpecError as e:
        raise fail(("flows", name), str(e), e.code) from None
    return {"source": uri, "key": keys, "sequence_by": raw.sequence_by, "delete_when": raw.delete_when}


def source_fields(
    name: str, raw: Any, fail: Callable[[tuple[str, ...], str, str], Exception], base: str = "."
) -> dict[str, str]:
    """The schema of flow ``name`` declared without ``schema:``: its Delta source table's columns,
    each as the type cbp stores it (:func:`cbp.spec.typedvalues.field_type_of_arrow`); a column of
    a type cbp cannot carry is ``source-schema``, a flow without a source ``invalid-spec``."""
    if raw.source is None:
        raise fail(
            ("flows", name),
            f"flow '{name}': 'schema' is missing; only a flow with a source: {{delta: URI}} may leave it out "
            "(its schema is then the table's)",
            "invalid-spec",
        )
    from ..storage.deltasource import SourceTable

    try:
        uri = check_source_uri(raw.source.delta, f"flow '{name}'", base)
    except SourceSpecError as e:
        raise fail(("flows", name, "source"), str(e), e.code) from None
    fields: dict[str, str] = {}
    for f in SourceTable(uri).arrow_schema():
        t = field_type_of_arrow(f.type, f.nullable)
        if t is None:
            raise fail(
                ("flows", name, "source"),
                f"flow '{name}': source table {uri}: column '{f.name}' is of type {f.type}, which cbp cannot carry "
                "(it takes strings, ints, floats, bools, dates, timestamps with a zone, decimals, binaries and "
                "lists of them); give the flow a schema: of the columns it reads, or drop the column",
                "source-schema",
            )
        fields[f.name] = t
    return fields


def check_source_uri(uri: str, what: str, base: str = ".") -> str:
    """A Delta source location as cbp will open it: a local path (relative ones from ``base``, the
    YAML file's directory, made absolute), a ``file:``
    URI, or ``s3://BUCKET/PATH`` (``s3a://`` too); anything else is ``bad-source``.

        >>> check_source_uri("s3://b/t", "flow 'x'")
        's3://b/t'
        >>> check_source_uri("gs://b/t", "flow 'x'")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        cbp.spec.sources.SourceSpecError: flow 'x': source delta 'gs://b/t': give a local path, a file: URI or ...
    """
    import os

    text = uri.strip()
    scheme, sep, rest = text.partition("://")
    bad = not text or "\0" in text or any(ord(c) < 32 for c in text)
    if sep and (
        scheme.lower() not in ("s3", "s3a", "file") or not rest or (scheme.lower() != "file" and rest.startswith("/"))
    ):
        bad = True
    if bad:
        raise SourceSpecError(
            f"{what}: source delta {uri!r:.200}: give a local path, a file: URI or s3://BUCKET/PATH", "bad-source"
        )
    if sep:
        return text
    if text.lower().startswith("file:"):
        return text
    return os.path.abspath(os.path.join(base, text))


def check_keyed(
    schema: RecordSchema, key: list[str] | None, sequence_by: str | None, delete_when: str | None, what: str
) -> tuple[str, ...]:
    """Check ``key`` / ``sequence_by`` / ``delete_when`` of a flow against its schema; the key fields."""
    if key is None:
        for name, value in (("sequence_by", sequence_by), ("delete_when", delete_when)):
            if value is not None:
                raise SourceSpecError(f"{what}: '{name}' needs a 'key' (the fields that identify a row)", "no-key")
        return ()
    if not key:
        raise SourceSpecError(f"{what}: 'key' lists no field; give the fields that identify a row", "bad-key")
    if len(set(key)) != len(key):
        raise SourceSpecError(f"{what}: 'key' lists a field twice", "bad-key")
    for name in [*key, *(x for x in (sequence_by, delete_when) if x is not None)]:
        if name not in schema.fields:
            raise SourceSpecError(
                f"{what}: '{name}' is not a field of the flow (fields: {', '.join(schema.fields)})", "unknown-field"
            )
    for k in key:
        ft = schema.fields[k]
        if ft.is_list or ft.scalar not in ("string", "int", "bool"):
            raise SourceSpecError(
                f"{what}: key field '{k}' is {ft}; a key field is a string, an int or a bool", "bad-key"
            )
    if sequence_by is not None:
        ft = schema.fields[sequence_by]
        if ft.is_list or ft.scalar not in ORDERABLE or ft.nullable or sequence_by in key:
            raise SourceSpecError(
                f"{what}: sequence_by '{sequence_by}' is {ft}{' and a key field' if sequence_by in key else ''}; "
                f"give a required field of type {', '.join(ORDERABLE)} that is not part of the key",
                "bad-sequence",
            )
    if delete_when is not None:
        ft = schema.fields[delete_when]
        if ft.is_list or ft.scalar != "bool" or delete_when in key:
            raise SourceSpecError(
                f"{what}: delete_when '{delete_when}' is {ft}; give a bool field that is not part of the key",
                "bad-delete-when",
            )
    return tuple(key)
