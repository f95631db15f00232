"""Routing records to keys (map side) and delivering broadcast and multicast records (reduce side).

**Keys.** RouteBy gives each record one key, several keys, or one of the logical keys of paper
001 §2.3: :data:`cbp.ALL` / :func:`cbp.broadcast` and :func:`cbp.multicast`. A keyed record
becomes one envelope per key (:func:`envelope_schema`): the key's canonical JSON text, the input
index, ``_r`` (null: Spark hash-partitions on the key text itself), and the record itself
as an Arrow struct of its flow's schema in the column of its input (``_i0``, ``_i1``, ...; null
in the others). Records cross the shuffle in Arrow form, as they are stored: no text encoding on
the map side, no parsing on the reduce side. ``_rec`` carries a binding's address text, and
``_st`` (black-box mode) a stored state row.

**A key field crosses once.** When an input routes by a field whose key text gives its value back
exactly (a non-null ``string``, ``int`` or ``bool``: :func:`elided_fields`), the envelopes leave
that field out of the record: it crosses the shuffle as ``_key`` only, and the task puts it back
(:func:`restore_fields`) before anything reads the records.

**One copy per partition** (§4.5.3). A broadcast or multicast record becomes P envelopes, one
for each partition: its ``_key`` is a *copy key* (:data:`COPY`, then ``B`` and the JSON list of
flows it is limited to, or ``M`` and the multicast address), which no key text can be, and its
``_r`` is a *probe*: a string whose Spark hash falls in that partition, hashed instead of the key
(:func:`cbp.engine.common.sparkhash.partition_probes`). The job sorts copies first in each partition, so a
task has them all (:class:`Copies`) before its first key group.

**Bindings.** ``out.associate(key, address)`` in epoch e writes ``(key, address)`` rows to the
stage's bindings files; the epoch that reads records multicast in epoch e (its loopback
records) or after it (any other records, in epoch e + 1) shuffles them by key with input index
:data:`BOUND` (they do not make a key called by themselves), the address qualified by e
(:func:`bound_address`), as are the copies' addresses. A key group then receives the
multicast records of each address it is bound to, and the broadcast records its limits allow.

    >>> import cbp
    >>> copy_key(cbp.ALL), copy_key(cbp.broadcast("state")), copy_key(cbp.multicast("n1"), 4)
    ('\\x01Bnull', '\\x01B["state"]', '\\x01M4:"n1"')
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...model import Broadcast, Multicast
from ...spec import STATE, KeyFunction
from ...spec.schema import RecordSchema
from ...spec.typedvalues import to_json

__all__ = [
    "BOUND",
    "COPY",
    "COPY_HASH",
    "BINDINGS",
    "envelope_schema",
    "record_column",
    "encode_key",
    "copy_key",
    "bound_address",
    "plain_envelopes",
    "plain_route_field",
    "Routes",
    "JSON_ESCAPED",
    "elided_fields",
    "restore_fields",
    "has_byte",
]

BOUND = -2
COPY = "\x01"  # first character of a copy key; a key's JSON text starts with a printable character
COPY_HASH = -(1 << 63)  # the ``_h`` of copies: they sort before every key of the partition
#: The rows of a stage's bindings files: a bound key's text and a multicast address's text.
BINDINGS = pa.schema([("_key", pa.string()), ("_addr", pa.string())])

ROUTE_ROWS = 20000

Logical: TypeAlias = Broadcast | Multicast


def record_column(idx: int) -> str:
    """The envelope column that carries the records of input ``idx``."""
    return f"_i{idx}"


#: Field types whose key text (:func:`encode_key`) gives the value back exactly, and that Spark SQL
#: can turn into that text (``cbp.engine.driver.job.json_key_sql``).
KEY_SCALARS = ("string", "int", "bool")


def elided_fields(routes: list[str | None], inputs: list[RecordSchema]) -> dict[int, str]:
    """The inputs (by index) routed by a field that the key text gives back (a non-null, non-list
    ``string``, ``int`` or ``bool``), with that field: their envelopes leave it out of the record.
    ``routes``: each input's RouteBy field (None: a function or none).

        >>> from cbp.spec.schema import RecordSchema
        >>> schemas = [RecordSchema.parse({"url": "string", "n": "int"}), RecordSchema.parse({"x": "float"})]
        >>> elided_fields(["url", "x", None], [*schemas, RecordSchema.parse({"y": "int"})])
        {0: 'url'}
    """
    out: dict[int, str] = {}
    for i, (field, schema) in enumerate(zip(routes, inputs)):
        ft = schema.fields.get(field) if field is not None else None
        if field is not None and ft is not None and not ft.nullable and not ft.is_list and ft.scalar in KEY_SCALARS:
            out[i] = field
    return out


def envelope_schema(
    inputs: list[RecordSchema], state: RecordSchema | None = None, elided: dict[int, str] | None = None
) -> pa.Schema:
    """Envelopes on their way to a stage whose input flows have schemas ``inputs``: key text, input
    index (-1: a state row, -2: a binding), the address of a binding, the partitioning string, one
    struct column per input flow (without its ``elided`` field) and (``state``: black-box mode) one
    for state rows.

        >>> from cbp.spec.schema import RecordSchema
        >>> envelope_schema([RecordSchema.parse({"url": "string", "n": "int"})], elided={0: "url"}).names
        ['_key', '_flow', '_rec', '_r', '_i0']
        >>> envelope_schema([RecordSchema.parse({"url": "string", "n": "int"})], elided={0: "url"}).field("_i0").type
        StructType(struct<n: int64>)
    """
    elided = elided or {}
    fields = [
        pa.field("_key", pa.string()),
        pa.field("_flow", pa.int32()),
        pa.field("_rec", pa.string()),
        pa.field("_r", pa.string()),
    ]
    fields += [
        pa.field(record_column(i), pa.struct([f for f in s.arrow if f.name != elided.get(i)]))
        for i, s in enumerate(inputs)
    ]
    if state is not None:
        fields.append(pa.field("_st", pa.struct(list(state.arrow))))
    return pa.schema(fields)


def encode_key(key: Any) -> str:
    """The canonical text of a grouping key (JSON), used for routing and stored as ``_key``.

        >>> encode_key(["url", "é"])
        '["url","é"]'

    A key whose text cannot be UTF-8 (a lone surrogate) raises ``UnicodeEncodeError``, a
    ``ValueError``, as a key that is not a JSON value does.
    """
    text = _KEY_TEXT(key)
    if not text.isascii():
        text.encode("utf-8")  # raises on a lone surrogate, before Arrow would, far from the record
    return text


_KEY_TEXT = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=to_json
).encode  # json.dumps(key, ...) without an encoder per call; NaN and infinities are no JSON; a date,
# timestamp, decimal or binary value is its JSON form (the translator's key is that text)


def decode_key(text: str) -> Any:
    r"""The grouping key of a canonical key text (:func:`encode_key`'s inverse). A string key
    without escapes is the text between its quotes (no JSON parse: one call per key of an epoch).

        >>> decode_key('"http://a.example/?q=1"'), decode_key('[1,"x"]'), decode_key('"say \\"hi\\""')
        ('http://a.example/?q=1', [1, 'x'], 'say "hi"')
    """
    if text[:1] == '"' and "\\" not in text:  # valid JSON: no backslash, so no escaped quote inside
        return text[1:-1]
    return json.loads(text)


def has_byte(texts: pa.Array, byte: int) -> bool:
    r"""Whether a string of ``texts`` (a string array) holds the byte ``byte``: one pass over its
    data buffer, ~10x faster than ``pc.match_substring`` (a character below 128 is that byte in UTF-8).

        >>> texts = pa.array(['"a"', '"b\\c"'])
        >>> has_byte(texts, ord("\\")), has_byte(texts.slice(0, 1), ord("\\"))
        (True, False)
    """
    if texts.type != pa.string():  # large strings, views: Arrow's own search
        return bool(pc.any(pc.match_substring(texts, chr(byte))).as_py())
    data = texts.buffers()[2] if len(texts) else None
    if data is None:
        return False
    off = np.frombuffer(texts.buffers()[1], np.int32, len(texts) + 1, texts.offset * 4)
    return bool((np.frombuffer(data, np.uint8)[off[0] : off[-1]] == byte).any())


def key_values(texts: pa.Array, scalar: str) -> pa.Array:
    r"""The values of a field of type ``scalar`` (one of :data:`KEY_SCALARS`) whose key texts are ``texts``.

    >>> key_values(pa.array(['"a"', '"say \\"hi\\""']), "string").to_pylist()
    ['a', 'say "hi"']
    >>> ints, bools = key_values(pa.array(["12", "-3"]), "int"), key_values(pa.array(["true", "false"]), "bool")
    >>> ints.to_pylist(), bools.to_pylist()
    ([12, -3], [True, False])
    """
    if scalar == "int":
        return texts.cast(pa.int64())
    if scalar == "bool":
        return pc.equal(texts, "true")
    plain = pc.utf8_slice_codeunits(texts, 1, -1)
    if not has_byte(texts, ord("\\")):  # no escapes: the text between the quotes
        return plain
    escaped = pc.match_substring(texts, "\\")
    return pa.array(
        [json.loads(t) if e else p for t, p, e in zip(texts.to_pylist(), plain.to_pylist(), escaped.to_pylist())],
        pa.string(),
    )


def restore_fields(batch: pa.RecordBatch, inputs: list[RecordSchema], elided: dict[int, str]) -> pa.RecordBatch:
    """``batch`` (envelopes) with each input's ``elided`` field back in its records, from the key
    texts (:func:`elided_fields`); the same batch when nothing was left out."""
    cols = {}
    flows = None
    for i, name in elided.items():
        col = record_column(i)
        st = batch.column(col)
        if st.type.get_field_index(name) >= 0:  # this batch carries it (not routed by the job's rules)
            continue
        if flows is None:
            flows = batch.column("_flow").to_numpy(zero_copy_only=False)
        mine = flows == i
        keys = batch.column("_key")
        if mine.all():
            values = key_values(keys, inputs[i].fields[name].scalar)
        else:  # other rows: null (their struct is null)
            at = np.cumsum(mine) - 1
            values = key_values(keys.filter(pa.array(mine)), inputs[i].fields[name].scalar).take(
                pa.array(at, mask=~mine)
            )
        full = inputs[i].arrow
        kids = st.flatten()
        children = [values.cast(f.type) if f.name == name else kids[st.type.get_field_index(f.name)] for f in full]
        cols[col] = pa.StructArray.from_arrays(children, fields=list(full), mask=st.is_null())
    if not cols:
        return batch
    names = batch.schema.names
    return pa.RecordBatch.from_arrays([cols.get(n, batch.column(n)) for n in names], names=names)


def copy_key(target: Logical, made: int = 0) -> str:
    """The ``_key`` of the copies of a record routed to a broadcast or multicast key; a multicast
    address is qualified by ``made``, the epoch whose bindings deliver it (:func:`bound_address`)."""
    if isinstance(target, Multicast):
        return f"{COPY}M{bound_address(made, encode_key(target.address))}"
    return f"{COPY}B{json.dumps(None if target.flows is None else list(target.flows))}"


def bound_address(made: int, address: str) -> str:
    """A multicast address (its JSON text) as bound in stage epoch ``made``: a record reaches the
    keys bound to its address in the epoch that wrote it (a loopback record) or, for any other
    record, in the stage's previous epoch.

        >>> bound_address(3, '"n1"')
        '3:"n1"'
    """
    return f"{made}:{address}"


#: Characters JSON text must escape (Python's ``json`` with ``ensure_ascii=False`` escapes exactly these).
JSON_ESCAPED = r'["\\\x00-\x1f]'


def records_struct(batch: pa.RecordBatch, schema: pa.Schema, idx: int) -> pa.StructArray:
    """The records of ``batch`` as the envelope column of input ``idx`` (cast to its stored types)."""
    st = schema.field(record_column(idx)).type
    if st.num_fields == 0:  # the key was the only field (it crosses as _key): records of no fields, not null
        return pa.Array.from_buffers(st, batch.num_rows, [None], children=[])
    cols = [batch.column(f.name).cast(f.type) for f in st]
    return pa.StructArray.from_arrays(cols, fields=list(st))


def envelopes(
    schema: pa.Schema, idx: int, keys: pa.Array, recs: pa.Array, route: pa.Array | None = None
) -> pa.RecordBatch:
    """Envelopes of input ``idx``: key texts, their records (a struct array), partitioning strings
    (where not the key: the probes of copies); the other columns null."""
    n = len(keys)
    cols = {"_key": keys, "_flow": pa.array(np.full(n, idx, np.int32)), record_column(idx): recs}
    if route is not None:
        cols["_r"] = route
    return pa.RecordBatch.from_arrays(
        [cols[f.name] if f.name in cols else pa.nulls(n, f.type) for f in schema], schema=schema
    )


def plain_route_field(route: KeyFunction | None, schema: RecordSchema) -> str | None:
    """The field of records of ``schema`` that ``route`` routes by, when :func:`plain_envelopes`
    can make its keys (not a function, not a ``json`` or list field); else None."""
    if route is None or route.field is None:
        return None
    ft = schema.fields.get(route.field)
    return None if ft is None or ft.scalar == "json" or ft.is_list else route.field


def plain_envelopes(flow_idx: int, field: str, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch | None:
    """The envelopes (of ``schema``, :func:`envelope_schema`) of a batch whose RouteBy is the
    (non-``json``) field ``field``, built by Arrow in one pass: the same key texts as
    :func:`encode_key` gives, the records as they are.

    ``None`` when some record needs the per-record path: a key that is a float, a list, a string
    that JSON must escape, or missing (which is an error there).

        >>> from cbp.spec.schema import RecordSchema
        >>> env = envelope_schema([RecordSchema.parse({"url": "string", "n": "int"})])
        >>> b = pa.RecordBatch.from_pydict({"url": ["a", "é"], "n": [1, None]})
        >>> e = plain_envelopes(0, "url", b, env)
        >>> e.column("_key").to_pylist(), e.column("_i0").to_pylist()
        (['"a"', '"é"'], [{'url': 'a', 'n': 1}, {'url': 'é', 'n': None}])
        >>> plain_envelopes(0, "url", pa.RecordBatch.from_pydict({"url": ['say "hi"'], "n": [1]}), env) is None
        True
    """
    if field not in batch.schema.names:
        return None
    col = batch.column(field)
    t = col.type
    if col.null_count:
        return None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if pc.any(pc.match_substring_regex(col, JSON_ESCAPED)).as_py():
            return None
        key = pc.binary_join_element_wise('"', col, '"', "")
    elif pa.types.is_integer(t):
        key = pc.cast(col, pa.string())
    elif pa.types.is_boolean(t):
        key = pc.if_else(col, "true", "false")
    else:
        return None
    return envelopes(schema, flow_idx, key.cast(pa.string()), records_struct(batch, schema, flow_idx))


class Routes:
    """Envelopes of one input flow, from one input batch at a time: each envelope names a record
    of the batch by its row; emitted in batches of at most :data:`ROUTE_ROWS` envelopes."""

    def __init__(self, flow_idx: int, probes: list[str], schema: pa.Schema) -> None:
        self.flow_idx, self.probes, self.schema = flow_idx, probes, schema
        self.recs: pa.StructArray | None = None
        self.keys: list[str] = []
        self.rows: list[int] = []
        self.parts: list[str | None] = []

    def start(self, batch: pa.RecordBatch) -> None:
        """The next input batch (the envelopes of the last one must have been flushed)."""
        self.recs = records_struct(batch, self.schema, self.flow_idx)

    def add(self, key: str, row: int, route: str | None = None) -> pa.RecordBatch | None:
        """Queue one envelope of row ``row``; a full batch when one is due."""
        self.keys.append(key)
        self.rows.append(row)
        self.parts.append(route)
        return self.flush() if len(self.keys) >= ROUTE_ROWS else None

    def add_copies(self, ck: str, row: int) -> Iterator[pa.RecordBatch]:
        """Queue one copy of the record for each partition (``ck``: :func:`copy_key`)."""
        for probe in self.probes:
            b = self.add(ck, row, probe)
            if b is not None:
                yield b

    def flush(self) -> pa.RecordBatch | None:
        if not self.keys:
            return None
        assert self.recs is not None
        b = envelopes(
            self.schema,
            self.flow_idx,
            pa.array(self.keys, pa.string()),
            self.recs.take(pa.array(self.rows, pa.int64())),
            pa.array(self.parts, pa.string()),
        )
        self.keys, self.rows, self.parts = [], [], []
        return b


def check_target(target: Logical, flows: list[str]) -> str | None:
    """Why a broadcast key cannot be used on a stage with input ``flows`` (``None``: it can)."""
    if isinstance(target, Broadcast) and target.flows is not None:
        bad = [f for f in target.flows if f != STATE and f not in flows]
        if bad:
            return (
                f"broadcast names {', '.join(map(repr, bad))}, not an input flow of the stage "
                f"({', '.join(flows)}) nor 'state'"
            )
    if isinstance(target, Multicast):
        try:
            encode_key(target.address)
        except (TypeError, ValueError, RecursionError) as e:
            try:
                shown = repr(target.address)[:80]
            except RecursionError:
                shown = "(nested too deeply to show)"
            return f"multicast address {shown} is not a JSON value ({e})"
    return None
