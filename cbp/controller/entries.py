"""Typed history entries of stage epochs, feeds, feed ids, feed hashes, collected increments,
rewinds and recorded pipelines.

Each is a frozen record whose JSON (:meth:`~FeedEntry.to_json`) is what every cbp wrote under
``_cbp/history`` (:mod:`.history`); ``from_json`` reads every older form too: a feed entry of a
format-1 home holds only ``incs``, a collected increment's only ``inc`` and ``version``. An entry
that is not JSON of its kind is ``damaged-home``. A change carries its entries typed
(:class:`~.change.Change`); the journal writes their JSON.

Reads: nothing. Writes: nothing (data classes).

    >>> e = FeedEntry((3,), records=2, id="f.csv", seq=5)
    >>> FeedEntry.from_json(e.to_json()) == e, FeedEntry.from_json({"incs": [1]}).records
    (True, None)
    >>> CollectedEntry.from_json({"inc": 4, "version": 2})
    CollectedEntry(inc=4, version=2, meta=None, undone=None, withdrawn=False)
    >>> FeedHashEntry.from_json({"hash": "ab", "feeds": [1, 3]}).without(3).to_json()
    {'hash': 'ab', 'feeds': [1]}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from ..errors import RuntimeStateError
from .snapshot import Increment

__all__ = [
    "CollectedEntry",
    "EpochEntry",
    "FeedEntry",
    "FeedHashEntry",
    "FeedIdEntry",
    "HistoryEntry",
    "PipelineEntry",
    "RewindEntry",
    "UndoneEpoch",
    "Withdrawal",
    "entry_json",
    "parse",
]

JSON = dict[str, Any]
T = TypeVar("T")


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def parse(read: Callable[[Mapping[str, Any]], T], doc: Mapping[str, Any], rel: str) -> T:
    """``read(doc)``, or ``damaged-home`` when the entry at ``rel`` is not what cbp writes there."""
    try:
        return read(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise RuntimeStateError(
            f"the history entry {rel} of the home is damaged ({type(e).__name__}: {str(e)[:80]}); "
            "restore the home from a backup",
            code="damaged-home",
        ) from None


@dataclass(frozen=True)
class EpochEntry:
    """What a committed stage epoch did: the state table version after it, the increment ids it
    read per input flow and wrote per output flow, the records per output flow, where its tasks
    ran (``placement``), its translator's code hash, its change's number (``seq``), the run it was
    part of and when it committed (``at``)."""

    state_version: int | None
    inputs: Mapping[str, list[int]]
    outputs: Mapping[str, list[int]]
    records: Mapping[str, int] = field(default_factory=dict)
    placement: Mapping[str, Any] | None = None
    code: str | None = None
    seq: int | None = None
    run: Mapping[str, Any] | None = None
    at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "state_version": self.state_version,
            "inputs": {f: list(ids) for f, ids in self.inputs.items()},
            "outputs": {f: list(ids) for f, ids in self.outputs.items()},
            "records": dict(self.records),
            "placement": dict(self.placement) if self.placement is not None else None,
            "code": self.code,
            "seq": self.seq,
            "run": dict(self.run) if self.run is not None else None,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> EpochEntry:
        def ids(m: Mapping[str, Any] | None) -> dict[str, list[int]]:
            return {str(f): [int(i) for i in v] for f, v in (m or {}).items()}

        sv, seq, at = doc.get("state_version"), doc.get("seq"), doc.get("at")
        return cls(
            state_version=int(sv) if sv is not None else None,
            inputs=ids(doc.get("inputs")),
            outputs=ids(doc.get("outputs")),
            records={str(f): int(n) for f, n in (doc.get("records") or {}).items()},
            placement=doc.get("placement"),
            code=doc.get("code"),
            seq=int(seq) if seq is not None else None,
            run=doc.get("run"),
            at=float(at) if at is not None else None,
        )


@dataclass(frozen=True)
class Withdrawal:
    """What a withdrawn feed had landed (``cbp unfeed``): its increments and records, the flow
    table version that held them, and the withdrawal's change number."""

    incs: tuple[int, ...]
    records: int | None
    version: int | None
    seq: int

    def to_json(self) -> JSON:
        return {"incs": list(self.incs), "records": self.records, "version": self.version, "seq": self.seq}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Withdrawal:
        incs = tuple(int(i) for i in doc.get("incs", []))
        return cls(incs, _int(doc.get("records")), _int(doc.get("version")), int(doc["seq"]))


@dataclass(frozen=True)
class FeedEntry:
    """Feed N of an external flow: the increments it landed, its records, feed id, change number,
    content hash, the earlier feed it repeats, a keyed flow's keyed table version, its withdrawal."""

    incs: tuple[int, ...]
    records: int | None = None
    id: str | None = None
    seq: int | None = None
    hash: str | None = None
    duplicate_of: int | None = None
    keyed_version: int | None = None
    withdrawn: Withdrawal | None = None

    def to_json(self) -> JSON:
        out: JSON = {"incs": list(self.incs), "records": self.records, "id": self.id, "seq": self.seq}
        if self.hash is not None:
            out["hash"] = self.hash
        if self.duplicate_of is not None:
            out["duplicate_of"] = self.duplicate_of
        if self.keyed_version is not None:
            out["keyed_version"] = self.keyed_version
        if self.withdrawn is not None:
            out["withdrawn"] = self.withdrawn.to_json()
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> FeedEntry:
        w = doc.get("withdrawn")
        return cls(
            incs=tuple(int(i) for i in doc["incs"]),
            records=_int(doc.get("records")),
            id=None if doc.get("id") is None else str(doc["id"]),
            seq=_int(doc.get("seq")),
            hash=doc.get("hash") or None,
            duplicate_of=_int(doc.get("duplicate_of")),
            keyed_version=_int(doc.get("keyed_version")),
            withdrawn=Withdrawal.from_json(w) if isinstance(w, Mapping) else None,
        )


@dataclass(frozen=True)
class FeedIdEntry:
    """The feed that landed with feed id ``id``; once that feed is withdrawn, ``id`` is None and
    ``withdrawn_feed`` its number (the id may land again)."""

    id: str | None
    feed: int | None = None
    incs: tuple[int, ...] = ()
    withdrawn_feed: int | None = None

    def to_json(self) -> JSON:
        if self.withdrawn_feed is not None:
            return {"id": None, "withdrawn_feed": self.withdrawn_feed}
        return {"id": self.id, "feed": self.feed, "incs": list(self.incs)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> FeedIdEntry:
        fid = doc.get("id")
        return cls(
            id=None if fid is None else str(fid),
            feed=_int(doc.get("feed")),
            incs=tuple(int(i) for i in doc.get("incs", [])),
            withdrawn_feed=_int(doc.get("withdrawn_feed")),
        )


@dataclass(frozen=True)
class FeedHashEntry:
    """The feeds of a flow whose records hash to ``hash`` (:meth:`.feeds.Feeds.note`: a repeated
    feed is warned about)."""

    hash: str
    feeds: tuple[int, ...] = ()

    def to_json(self) -> JSON:
        return {"hash": self.hash, "feeds": list(self.feeds)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> FeedHashEntry:
        return cls(str(doc.get("hash") or ""), tuple(int(n) for n in doc.get("feeds") or []))

    def without(self, feed: int) -> FeedHashEntry:
        """The entry once feed ``feed`` is withdrawn."""
        return FeedHashEntry(self.hash, tuple(n for n in self.feeds if n != feed))


@dataclass(frozen=True)
class PipelineEntry:
    """The ``n``-th pipeline a home recorded (:mod:`.evolution`): why (``kind``: ``created``,
    ``adopted``, ``upgrade``), its YAML text and path, the plan's lines that led to it, when, and
    its definition (:func:`.plan.definition`)."""

    n: int
    kind: str
    yaml: str
    path: str | None = None
    plan: tuple[str, ...] = ()
    at: float | None = None
    definition: Mapping[str, Any] | None = None

    def to_json(self) -> JSON:
        return {
            "n": self.n,
            "kind": self.kind,
            "yaml": self.yaml,
            "path": self.path,
            "plan": list(self.plan),
            "at": self.at,
            "definition": self.definition,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PipelineEntry:
        at, d, path = doc.get("at"), doc.get("definition"), doc.get("path")
        return cls(
            n=int(doc["n"]),
            kind=str(doc.get("kind") or ""),
            yaml=str(doc.get("yaml") or ""),
            path=None if path is None else str(path),
            plan=tuple(str(line) for line in doc.get("plan") or []),
            at=None if at is None else float(at),
            definition=dict(d) if isinstance(d, Mapping) else None,
        )


def _increment(m: Mapping[str, Any]) -> Increment:
    srcs = list(m.get("srcs", []))
    return Increment(
        m["frame"], int(m["records"]), _int(m.get("version")), str(m["producer"]), bool(m["complete"]), srcs
    )


@dataclass(frozen=True)
class CollectedEntry:
    """Increment ``inc`` left the snapshot: a flow table version that still holds it (None: the
    flow's current one), what it was (``meta``, None if an older cbp collected it), the change
    that undid it (a rewind or a withdrawal), and whether a withdrawal did."""

    inc: int
    version: int | None
    meta: Increment | None = None
    undone: int | None = None
    withdrawn: bool = False

    @property
    def producer(self) -> str:
        """Its producer (``feed:N``, ``<stage>:<epoch>``, ``backfill:...``); empty if not recorded."""
        return self.meta.producer if self.meta is not None else ""

    def to_json(self) -> JSON:
        out: JSON = {"inc": self.inc, "version": self.version}
        if self.meta is not None:
            out["meta"] = asdict(self.meta)
        if self.undone is not None:
            out["undone"] = self.undone
        if self.withdrawn:
            out["withdrawn"] = True
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> CollectedEntry:
        m = doc.get("meta")
        return cls(
            inc=int(doc["inc"]),
            version=_int(doc.get("version")),
            meta=_increment(m) if m else None,
            undone=_int(doc.get("undone")) or None,
            withdrawn=bool(doc.get("withdrawn", False)),
        )


@dataclass(frozen=True)
class UndoneEpoch:
    """A stage epoch a rewind undid: its entry, and per output flow the table version that still
    holds each increment it wrote."""

    epoch: int
    entry: EpochEntry
    versions: Mapping[str, Mapping[int, int | None]] = field(default_factory=dict)

    def to_json(self) -> JSON:
        doc = {k: v for k, v in self.entry.to_json().items() if k != "placement"}
        vs = {f: {str(i): v for i, v in ids.items()} for f, ids in self.versions.items()}
        return {**doc, "epoch": self.epoch, "versions": vs}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> UndoneEpoch:
        vs = {str(f): {int(i): _int(v) for i, v in ids.items()} for f, ids in (doc.get("versions") or {}).items()}
        return cls(int(doc["epoch"]), EpochEntry.from_json(doc), vs)


@dataclass(frozen=True)
class RewindEntry:
    """A committed rewind (change ``seq``): where it went (``to``: stage, epoch and the target
    snapshot's seq), when, the stage epochs it undid, the collected increments it marked undone
    and the increments it brought back per flow."""

    seq: int
    to: Mapping[str, Any]
    at: float | None
    undone: Mapping[str, tuple[UndoneEpoch, ...]]
    collected_undone: Mapping[str, Mapping[int, CollectedEntry]] = field(default_factory=dict)
    restored: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def to_json(self) -> JSON:
        return {
            "seq": self.seq,
            "to": dict(self.to),
            "at": self.at,
            "undone": {s: [u.to_json() for u in es] for s, es in self.undone.items()},
            "collected_undone": {
                f: {str(i): c.to_json() for i, c in cs.items()} for f, cs in self.collected_undone.items()
            },
            "restored": {f: list(ids) for f, ids in self.restored.items()},
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> RewindEntry:
        at = doc.get("at")
        return cls(
            seq=int(doc["seq"]),
            to=dict(doc.get("to") or {}),
            at=None if at is None else float(at),
            undone={str(s): tuple(UndoneEpoch.from_json(u) for u in es) for s, es in doc["undone"].items()},
            collected_undone={
                str(f): {int(i): CollectedEntry.from_json(c) for i, c in cs.items()}
                for f, cs in (doc.get("collected_undone") or {}).items()
            },
            restored={str(f): tuple(int(i) for i in ids) for f, ids in (doc.get("restored") or {}).items()},
        )


HistoryEntry = EpochEntry | FeedEntry | FeedIdEntry | FeedHashEntry | CollectedEntry | RewindEntry | PipelineEntry


def entry_json(value: HistoryEntry) -> JSON:
    """The JSON of an entry a change writes."""
    return value.to_json()
