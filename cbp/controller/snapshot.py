"""The controller's live state: a typed, versioned snapshot that holds what is live, not history.

What is live: per flow the increments not yet garbage-collected, its framing state and counters;
per stage input the connector (queue of increment ids); per stage its epoch, runnable state,
state table version and index; the scheduler's position. What happened (each stage epoch's
inputs and outputs, each feed, feed ids, increments already collected) goes to the history log
(:mod:`cbp.controller.history`) as the change that made it commits, and is read on demand. So
the snapshot, and what a change writes, do not grow with the epochs a pipeline has run.

A change is written as a :func:`diff` of the snapshot's JSON form (see :mod:`cbp.controller.journal`).

Reads: nothing (JSON it is given). Writes: nothing (the journal stores snapshots; parts change
the live one, :class:`~.live.Live`).

    >>> s = Snapshot.new("p", {"urls": False}, {"count": ["urls"]})
    >>> s2 = Snapshot.from_json(s.to_json()); s2.stages["count"].epoch, s2.connector("count", "urls")
    (0, [])
    >>> ops = diff({"a": 1, "b": {"c": [1]}}, {"a": 1, "b": {"c": [1, 2]}, "d": 0}); ops
    [['set', ['b', 'c'], [1, 2]], ['set', ['d'], 0]]
    >>> patch({"a": 1, "b": {"c": [1]}}, ops)
    {'a': 1, 'b': {'c': [1, 2]}, 'd': 0}
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

from ..errors import RuntimeStateError

__all__ = ["FORMAT", "Snapshot", "FlowState", "StageState", "Increment", "Sched", "diff", "patch", "conn"]

FORMAT = 2  # format 1 (cbp 0.1.0) kept history in the snapshot; see Snapshot.from_json


def conn(stage: str, flow: str) -> str:
    """The name of the connector of ``stage``'s input ``flow``."""
    return f"{stage}.{flow}"


@dataclass
class Increment:
    """A live increment of a flow: its framing key, records, the table version that holds it."""

    frame: Any
    records: int
    version: int | None
    producer: str  # "feed:N" or "<stage>:<epoch>"
    complete: bool
    srcs: list[Any] = field(default_factory=list)  # feeds / producing epochs whose records it holds


@dataclass
class FlowState:
    next_inc: int = 1
    version: int | None = None
    feeds: int = 0
    frame_state: Any = None
    incs: dict[int, Increment] = field(default_factory=dict)

    def open_increment(self) -> int | None:
        """The increment still being framed (not complete), if any."""
        return next((i for i, m in self.incs.items() if not m.complete), None)


@dataclass
class StageState:
    epoch: int = 0
    runnable_state: Any = None
    state_version: int | None = None
    layout: str = "direct"  # how the state table was last written: direct (indexed) or blackbox
    index: dict[str, str] = field(default_factory=dict)  # partition -> index file
    bindings: list[str] = field(
        default_factory=list
    )  # multicast bindings files of the last epoch and of epochs whose loopback increments are unread


@dataclass
class Sched:
    """The scheduler's position: pass 0 visits every stage in dataflow order (honouring
    backpressure); pass 1 visits the stages held back, if nothing else ran."""

    pass_: int = 0
    pos: int = 0
    held: list[str] = field(default_factory=list)
    ran: bool = False


_SCALARS = (str, int, float, bool, type(None))


def _value(v: Any, json: bool = False) -> Any:
    """``v`` itself if an immutable scalar; JSON's dicts and lists rebuilt; with ``json`` (the JSON form
    :func:`dataclasses.asdict` gives a field's value) tuples rebuilt and dataclasses as dicts; anything
    else deep-copied."""
    if isinstance(v, _SCALARS):
        return v
    if type(v) is dict:
        return {k: _value(x, json) for k, x in v.items()}
    if type(v) is list:
        return [_value(x, json) for x in v]
    if json and type(v) is tuple:
        return tuple(_value(x, json) for x in v)
    if json and is_dataclass(v) and not isinstance(v, type):
        return asdict(v)
    return copy.deepcopy(v)


def _json_value(v: Any) -> Any:
    """``v`` in a JSON form of its own (:func:`_value` with ``json``)."""
    return _value(v, json=True)


def _increment_json(m: Increment) -> dict[str, Any]:
    """``asdict(m)`` without its generic walk (the journal writes a snapshot's JSON form at every change)."""
    return {
        "frame": _json_value(m.frame),
        "records": m.records,
        "version": m.version,
        "producer": m.producer,
        "complete": m.complete,
        "srcs": [_json_value(x) for x in m.srcs],
    }


def _stage_json(ss: StageState) -> dict[str, Any]:
    """``asdict(ss)``, field by field."""
    return {
        "epoch": ss.epoch,
        "runnable_state": _json_value(ss.runnable_state),
        "state_version": ss.state_version,
        "layout": ss.layout,
        "index": dict(ss.index),
        "bindings": list(ss.bindings),
    }


def _flow_copy(fs: FlowState) -> FlowState:
    incs = {
        i: Increment(_value(m.frame), m.records, m.version, m.producer, m.complete, [_value(x) for x in m.srcs])
        for i, m in fs.incs.items()
    }
    return FlowState(fs.next_inc, fs.version, fs.feeds, _value(fs.frame_state), incs)


def _stage_copy(ss: StageState) -> StageState:
    return StageState(
        ss.epoch, _value(ss.runnable_state), ss.state_version, ss.layout, dict(ss.index), list(ss.bindings)
    )


@dataclass
class Snapshot:
    pipeline: str
    seq: int = 0
    flows: dict[str, FlowState] = field(default_factory=dict)
    connectors: dict[str, list[int]] = field(default_factory=dict)
    stages: dict[str, StageState] = field(default_factory=dict)
    sched: Sched = field(default_factory=Sched)
    gc_runs: int = 0
    shapes: dict[str, Any] = field(default_factory=dict)  # what the stored data was written with

    @classmethod
    def new(cls, pipeline: str, flows: dict[str, bool], inputs: dict[str, list[str]]) -> Snapshot:
        """An empty snapshot for flows (name -> external) and stages (name -> input flows)."""
        s = cls(pipeline)
        s.adopt(flows, inputs)
        return s

    def adopt(self, flows: dict[str, Any], inputs: dict[str, list[str]]) -> None:
        """Add the flows, stages and connectors it lacks (a YAML that grew), empty."""
        for f in flows:
            self.flows.setdefault(f, FlowState())
        for s, fl in inputs.items():
            self.stages.setdefault(s, StageState())
            for f in fl:
                self.connectors.setdefault(conn(s, f), [])
        if any(s not in inputs for s in self.sched.held):
            self.sched = Sched()

    def connector(self, stage: str, flow: str) -> list[int]:
        return self.connectors[conn(stage, flow)]

    def copy(self) -> Snapshot:
        """A copy that shares nothing mutable with this one: its containers rebuilt field by field, the values
        of ``Any`` fields (framing keys and states, a runnable's state, shapes) deep-copied unless immutable
        scalars (a tenth of ``copy.deepcopy``'s time, which the journal pays two or three times a feed).

        >>> s = Snapshot.new("p", {"urls": False}, {"count": ["urls"]})
        >>> c = s.copy(); c.flows["urls"].incs[1] = Increment(None, 3, 1, "feed:1", True, [1])
        >>> s.flows["urls"].incs, c.to_json() == copy.deepcopy(c).to_json()
        ({}, True)
        """
        return Snapshot(
            self.pipeline,
            self.seq,
            {f: _flow_copy(fs) for f, fs in self.flows.items()},
            {k: list(v) for k, v in self.connectors.items()},
            {s: _stage_copy(ss) for s, ss in self.stages.items()},
            Sched(self.sched.pass_, self.sched.pos, list(self.sched.held), self.sched.ran),
            self.gc_runs,
            {k: _value(v) for k, v in self.shapes.items()},
        )

    # ---------------------------------------------------------------- JSON form
    def to_json(self) -> dict[str, Any]:
        """The JSON form (the journal writes it and its :func:`diff` at every change). Increments and
        stages are written field by field, as :func:`dataclasses.asdict` would, a tenth of its time:

        >>> s = Snapshot.new("p", {"urls": False}, {"count": ["urls"]})
        >>> s.flows["urls"].incs[1] = Increment({"k": [1, (2, 3)]}, 3, 1, "feed:1", True, [1])
        >>> s.stages["count"].runnable_state = {"seen": [Sched(1, 2)]}
        >>> j = s.to_json(); j["flows"]["urls"]["incs"]["1"] == asdict(s.flows["urls"].incs[1])
        True
        >>> j["stages"]["count"] == asdict(s.stages["count"]), j["stages"]["count"]["runnable_state"]["seen"][0]["pos"]
        (True, 2)
        >>> j["flows"]["urls"]["incs"]["1"]["frame"] is s.flows["urls"].incs[1].frame  # shares nothing
        False
        """
        return {
            "format": FORMAT,
            "seq": self.seq,
            "pipeline": self.pipeline,
            "gc_runs": self.gc_runs,
            "shapes": self.shapes,
            "sched": {
                "pass": self.sched.pass_,
                "pos": self.sched.pos,
                "held": list(self.sched.held),
                "ran": self.sched.ran,
            },
            "flows": {
                n: {
                    "next_inc": f.next_inc,
                    "version": f.version,
                    "feeds": f.feeds,
                    "frame_state": f.frame_state,
                    "incs": {str(i): _increment_json(m) for i, m in f.incs.items()},
                }
                for n, f in self.flows.items()
            },
            "connectors": {k: list(v) for k, v in self.connectors.items()},
            "stages": {n: _stage_json(s) for n, s in self.stages.items()},
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Snapshot:
        """Read a snapshot of this format, or of format 1 (its history is left out: see :func:`legacy_history`);
        one of another shape is ``damaged-home``."""
        try:
            return cls._from_json(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise RuntimeStateError(
                f"the controller snapshot of the home is damaged ({type(e).__name__}: {str(e)[:80]}); "
                "restore the home from a backup",
                code="damaged-home",
            ) from None

    @classmethod
    def _from_json(cls, doc: dict[str, Any]) -> Snapshot:
        fmt = int(doc.get("format", 1))
        if fmt > FORMAT:
            raise RuntimeStateError(
                f"the controller snapshot has format {fmt}, newer than this cbp reads ({FORMAT}); "
                "upgrade cbp to use this home",
                code="home-format",
            )
        sc = doc.get("sched") or {}
        flows = {}
        for n, f in doc["flows"].items():
            incs = {
                int(i): Increment(
                    m["frame"], m["records"], m["version"], m["producer"], m["complete"], list(m.get("srcs", []))
                )
                for i, m in f["incs"].items()
                if not m.get("gc", False)
            }
            flows[n] = FlowState(f["next_inc"], f["version"], f["feeds"], f.get("frame_state"), incs)
        stages = {
            n: StageState(
                s["epoch"],
                s.get("runnable_state"),
                s.get("state_version"),
                s.get("layout", "direct"),
                dict(s.get("index", {})),
                [str(b) for b in s.get("bindings", [])],
            )
            for n, s in doc["stages"].items()
        }
        return cls(
            pipeline=doc["pipeline"],
            seq=int(doc["seq"]),
            flows=flows,
            connectors={k: [int(i) for i in v] for k, v in doc["connectors"].items()},
            stages=stages,
            sched=Sched(sc.get("pass", 0), sc.get("pos", 0), list(sc.get("held", [])), sc.get("ran", False)),
            gc_runs=int(doc.get("gc_runs", 0)),
            shapes=dict(doc.get("shapes", {})),
        )


def diff(a: Any, b: Any, path: list[str] | None = None) -> list[list[Any]]:
    """Operations that turn JSON value ``a`` into ``b``: ``["set", path, value]`` and ``["del", path]``."""
    path = path or []
    if isinstance(a, dict) and isinstance(b, dict):
        ops: list[list[Any]] = []
        for k, v in b.items():
            if k not in a:
                ops.append(["set", path + [k], v])
            elif a[k] != v:
                ops += diff(a[k], v, path + [k])
        ops += [["del", path + [k]] for k in a if k not in b]
        return ops
    return [] if a == b else [["set", path, b]]


def patch(doc: Any, ops: list[list[Any]]) -> Any:
    """Apply :func:`diff` operations to a JSON value (in place where it can) and return it."""
    for op in ops:
        kind, p = op[0], op[1]
        if not p:
            doc = copy.deepcopy(op[2])
            continue
        node = doc
        for k in p[:-1]:
            node = node[k]
        if kind == "set":
            node[p[-1]] = copy.deepcopy(op[2])
        else:
            node.pop(p[-1], None)
    return doc
