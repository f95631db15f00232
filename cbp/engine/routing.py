"""Routing records to keys (map side) and delivering broadcast and multicast records (reduce side).

**Keys.** RouteBy gives each record one key, several keys, or one of the logical keys of paper
001 §2.3: :data:`cbp.ALL` / :func:`cbp.broadcast` and :func:`cbp.multicast`. A keyed record
becomes one envelope per key (:data:`ENVELOPE`): the key's canonical JSON text, the input index,
the record as JSON text, and ``_r``, the string Spark hash-partitions on (the key text itself).

**One copy per partition** (§4.5.3). A broadcast or multicast record becomes P envelopes, one
for each partition: its ``_key`` is a *copy key* (:data:`COPY`, then ``B`` and the JSON list of
flows it is limited to, or ``M`` and the multicast address), which no key text can be, and its
``_r`` is a *probe*: a string whose Spark hash falls in that partition
(:func:`cbp.engine.job.partition_probes`). The job sorts copies first in each partition, so a
task has them all (:class:`Copies`) before its first key group.

**Bindings.** ``out.associate(key, address)`` in epoch e writes ``(key, address)`` rows to the
stage's bindings files; the stage's next epoch shuffles them by key with input index
:data:`BOUND` (they do not make a key called by themselves). A key group then receives the
multicast records of each address it is bound to, and the broadcast records its limits allow.

    >>> import cbp
    >>> copy_key(cbp.ALL), copy_key(cbp.broadcast("state")), copy_key(cbp.multicast("n1"))
    ('\\x01Bnull', '\\x01B["state"]', '\\x01M"n1"')
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..model import Broadcast, Multicast
from ..spec import STATE
from .groups import Group

if TYPE_CHECKING:
    from .task import TaskPlan

__all__ = ["ENVELOPE", "BOUND", "COPY", "COPY_HASH", "BINDINGS", "encode_key", "copy_key", "plain_envelopes", "Routes", "Copies"]

#: Records on their way to a stage: key text, input index (-1: state, -2: a binding), record as JSON, partitioning string.
ENVELOPE = pa.schema([("_key", pa.string()), ("_flow", pa.int32()), ("_rec", pa.string()), ("_r", pa.string())])
BOUND = -2
COPY = "\x01"  # first character of a copy key; a key's JSON text starts with a printable character
COPY_HASH = -(1 << 63)  # the ``_h`` of copies: they sort before every key of the partition
#: The rows of a stage's bindings files: a bound key's text and a multicast address's text.
BINDINGS = pa.schema([("_key", pa.string()), ("_addr", pa.string())])

ROUTE_ROWS = 20000
ROUTE_BYTES = 16 << 20

Logical = Union[Broadcast, Multicast]


def encode_key(key: Any) -> str:
    """The canonical text of a grouping key (JSON), used for routing and stored as ``_key``.

        >>> encode_key(["url", "é"])
        '["url","é"]'
    """
    return json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def copy_key(target: Logical) -> str:
    """The ``_key`` of the copies of a record routed to a broadcast or multicast key."""
    if isinstance(target, Multicast):
        return f"{COPY}M{encode_key(target.address)}"
    return f"{COPY}B{json.dumps(None if target.flows is None else list(target.flows))}"


#: Characters JSON text must escape (Python's ``json`` with ``ensure_ascii=False`` escapes exactly these).
_ESCAPED = r'["\\\x00-\x1f]'


def plain_envelopes(flow_idx: int, field: str, batch: pa.RecordBatch) -> Optional[pa.RecordBatch]:
    """The envelopes of a batch whose RouteBy is the (non-``json``) field ``field``, built by Arrow
    in one pass: the same key and record texts as :func:`encode_key` and ``json.dumps`` give.

    ``None`` when some record needs the per-record path: a float or list field, a string that JSON
    must escape, or a record without a key (which is an error there).

        >>> b = pa.RecordBatch.from_pydict({"url": ["a", "é"], "n": [1, None], "ok": [True, False]})
        >>> plain_envelopes(0, "url", b).to_pydict()["_rec"]
        ['{"url":"a","n":1,"ok":true}', '{"url":"é","n":null,"ok":false}']
        >>> plain_envelopes(0, "url", pa.RecordBatch.from_pydict({"url": ['say "hi"']})) is None
        True
    """
    texts: dict[str, Any] = {}
    for name, col in zip(batch.schema.names, batch.columns):
        t = col.type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            if pc.any(pc.match_substring_regex(col, _ESCAPED)).as_py():
                return None
            texts[name] = pc.binary_join_element_wise('"', col, '"', "")
        elif pa.types.is_integer(t):
            texts[name] = pc.cast(col, pa.string())
        elif pa.types.is_boolean(t):
            texts[name] = pc.if_else(col, "true", "false")
        else:
            return None
    key = texts.get(field)
    if key is None or key.null_count:
        return None
    parts: list[Any] = []
    for i, name in enumerate(batch.schema.names):
        parts += [("{" if i == 0 else ",") + json.dumps(name, ensure_ascii=False) + ":", pc.fill_null(texts[name], "null")]
    rec = pc.binary_join_element_wise(*parts, "}", "")
    n = batch.num_rows
    return pa.RecordBatch.from_arrays([key.cast(pa.string()), pa.array(np.full(n, flow_idx, np.int32)), rec.cast(pa.string()),
                                       key.cast(pa.string())], schema=ENVELOPE)


class Routes:
    """Envelopes of one input flow, emitted in batches of at most :data:`ROUTE_ROWS` rows or about
    :data:`ROUTE_BYTES` of text."""

    def __init__(self, flow_idx: int, probes: list[str]) -> None:
        self.flow_idx, self.probes = flow_idx, probes
        self.keys: list[str] = []
        self.recs: list[str] = []
        self.parts: list[str] = []
        self.size = 0

    def add(self, key: str, text: str, route: Optional[str] = None) -> Optional[pa.RecordBatch]:
        """Queue one envelope; a full batch when one is due."""
        self.keys.append(key)
        self.recs.append(text)
        self.parts.append(key if route is None else route)
        self.size += len(text) + len(key)
        return self.flush() if len(self.keys) >= ROUTE_ROWS or self.size >= ROUTE_BYTES else None

    def add_copies(self, target: Logical, text: str) -> Iterator[pa.RecordBatch]:
        """Queue one copy of the record for each partition."""
        ck = copy_key(target)
        for probe in self.probes:
            b = self.add(ck, text, probe)
            if b is not None:
                yield b

    def flush(self) -> Optional[pa.RecordBatch]:
        if not self.keys:
            return None
        n = len(self.keys)
        b = pa.RecordBatch.from_arrays([pa.array(self.keys, pa.string()), pa.array(np.full(n, self.flow_idx, np.int32)),
                                        pa.array(self.recs, pa.string()), pa.array(self.parts, pa.string())], schema=ENVELOPE)
        self.keys, self.recs, self.parts, self.size = [], [], [], 0
        return b


class Copies:
    """The broadcast and multicast records a grouped task received, and their delivery to key groups."""

    def __init__(self, plan: "TaskPlan") -> None:
        names = [i.flow for i in plan.stage.inputs]
        self._index = {n: i for i, n in enumerate(names)}
        self.where = plan.where()
        #: (input indexes it is limited to or None, whether it goes to stored keys, input index, record text)
        self.broadcast: list[tuple[Optional[frozenset[int]], bool, int, str]] = []
        self.multicast: dict[str, list[tuple[int, str]]] = {}
        self.to_state = False  # a broadcast goes to every stored key: the task must visit them all
        self.stats = {"broadcast_in": 0, "multicast_in": 0, "bindings_in": 0, "delivered": 0}

    def absorb(self, chunks: Iterable[list[Group]]) -> Iterator[list[Group]]:
        """Take the copies off the front of the task's key groups; the remaining chunks.

        Reads ahead to the first chunk with a key group, so that :attr:`to_state` is known before
        the first key is visited.
        """
        it = iter(chunks)
        for chunk in it:
            rest = [g for g in chunk if not self._take(g)]
            if rest:
                return _chain(rest, it)
        return iter(())

    def _take(self, g: Group) -> bool:
        if not g.key.startswith(COPY):
            return False
        kind, body = g.key[1], g.key[2:]
        for idx, texts in enumerate(g.flows):
            for text in texts:
                if kind == "M":
                    self.multicast.setdefault(body, []).append((idx, text))
                    self.stats["multicast_in"] += 1
                else:
                    self._add_broadcast(json.loads(body), idx, text)
        return True

    def _add_broadcast(self, flows: Optional[list[str]], idx: int, text: str) -> None:
        self.stats["broadcast_in"] += 1
        if flows is None:
            self.broadcast.append((None, False, idx, text))
            return
        to_state = STATE in flows
        self.to_state |= to_state
        self.broadcast.append((frozenset(self._index[f] for f in flows if f != STATE), to_state, idx, text))

    def deliver_multicast(self, g: Group) -> None:
        """Add to ``g`` the multicast records of the addresses it is bound to."""
        if not g.bound:
            return
        self.stats["bindings_in"] += len(g.bound)
        for addr in dict.fromkeys(g.bound):
            for idx, text in self.multicast.get(addr, ()):
                g.flows[idx].append(text)
                g.records += 1
                self.stats["delivered"] += 1
        g.bound = []

    def deliver_broadcast(self, g: Group, has_state: bool, outer: bool) -> None:
        """Add to ``g`` the broadcast records it gets: limited ones if it has input on one of their
        flows or (``"state"``) stored state; unlimited ones if the key is called (by input, by outer
        grouping, or by a broadcast to the stored keys)."""
        if not self.broadcast:
            return
        had = [bool(texts) for texts in g.flows]
        called = any(had) or (has_state and (outer or self.to_state))
        for only, to_state, idx, text in self.broadcast:
            if called if only is None else (to_state and has_state) or any(had[i] for i in only):
                g.flows[idx].append(text)
                g.records += 1
                self.stats["delivered"] += 1


def _chain(first: list[Group], rest: Iterator[list[Group]]) -> Iterator[list[Group]]:
    yield first
    yield from rest


def check_target(target: Logical, flows: list[str]) -> Optional[str]:
    """Why a broadcast key cannot be used on a stage with input ``flows`` (``None``: it can)."""
    if isinstance(target, Broadcast) and target.flows is not None:
        bad = [f for f in target.flows if f != STATE and f not in flows]
        if bad:
            return f"broadcast names {', '.join(map(repr, bad))}, not an input flow of the stage ({', '.join(flows)}) nor 'state'"
    if isinstance(target, Multicast):
        try:
            encode_key(target.address)
        except (TypeError, ValueError) as e:
            return f"multicast address {target.address!r:.80} is not a JSON value ({e})"
    return None
