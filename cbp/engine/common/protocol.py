"""What a task of a stage epoch reports to the driver: a typed result row, or a typed failure.

**Results** travel as Arrow rows of :data:`RESULT` (the output schema of every stage-epoch
``mapInArrow``): the files a task wrote as lists of add-action structs, and its stats as maps.
:func:`result_batch` encodes a :class:`TaskResult` in a task, :func:`decode_results` turns the
collected Arrow table back into :class:`TaskResult` objects on the driver.

    >>> r = TaskResult(part=1, state_adds=[{"path": "f", "size": 9, "mtime": 0, "rows": 2, "partition": 1}],
    ...                stats={"in": 3, "seconds": {"translate": 0.5}, "out": {"counts": 2}})
    >>> decode_results(pa.Table.from_batches([result_batch(r)])) == [r]
    True

**Failures.** Spark ships only the text of a task's exception to the driver. A task that fails
for a reason cbp knows (user code, a time limit, the home) raises :class:`TaskFailed`, whose
text ends with its :class:`FailureRecord` in one fixed, versioned encoding: base64 of a JSON
object between ``[[cbp-failure/<version> `` and ``]]``. The driver decodes it with
:func:`decode_failure` (``None`` when there is none, e.g. a worker that died) and never reads
anything else of the message. The encoding, not a file under the home, because the failures
that matter most (a read-only or full home) are exactly those where nothing can be written
there, and because the record then always belongs to the attempt whose failure failed the job.

    >>> msg = "stage 's' epoch 2 key 'k': it broke ]]"
    >>> rec = FailureRecord("user-code", msg, "s", 2, key='"k"', exc_type="ValueError")
    >>> decode_failure("Traceback ...\\nTaskFailed: " + str(TaskFailed(rec))) == rec
    True
    >>> decode_failure("Python worker exited unexpectedly") is None
    True
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import pyarrow as pa

__all__ = [
    "TaskResult",
    "RESULT",
    "ADD",
    "result_batch",
    "decode_results",
    "result_spark_schema",
    "FailureRecord",
    "TaskFailed",
    "encode_failure",
    "decode_failure",
    "EpochTimeout",
    "USER_EXCEPTIONS",
    "USER_FAILURES",
]

#: A future Delta add (or remove) action: a data file the task wrote (or one it replaces).
#: ``frame`` is the framing key (JSON text) of the run of records in a file of a flow framed by a field.
ADD = pa.struct(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("mtime", pa.int64()),
        ("rows", pa.int64()),
        ("partition", pa.int64()),
        ("frame", pa.string()),
    ]
)
#: One row per task. ``counts`` are the integer stats, ``seconds`` the time per phase, ``out`` records per output flow.
RESULT = pa.schema(
    [
        pa.field("part", pa.int32(), nullable=False),
        pa.field("index", pa.string()),
        pa.field("state_adds", pa.list_(ADD)),
        pa.field("state_removes", pa.list_(ADD)),
        pa.field("outputs", pa.map_(pa.string(), pa.list_(ADD))),
        pa.field("counts", pa.map_(pa.string(), pa.int64())),
        pa.field("seconds", pa.map_(pa.string(), pa.float64())),
        pa.field("out", pa.map_(pa.string(), pa.int64())),
        pa.field("executor", pa.string()),
        pa.field("bindings", pa.list_(ADD)),
        pa.field("index_garbage", pa.list_(pa.string())),
    ]
)
_MAPS = ("seconds", "out")  # stats entries that are maps of their own; every other stat is an integer


@dataclass
class TaskResult:
    """One task's result: the files it wrote (future Delta add actions) and what it did.

    ``state_adds``/``state_removes`` are files of the stage's state table, ``outputs`` maps each
    output flow to its new files, ``index`` is the partition's new index file (direct mode).
    ``stats`` holds integer counters plus ``seconds`` (per phase) and ``out`` (records per flow).
    ``executor`` names the executor that ran the task; ``bindings`` are the files of the multicast
    bindings its translate calls made (:mod:`cbp.engine.task.routing`); ``index_garbage`` the index
    files of the partition that its new index no longer stands on.
    """

    part: int
    index: str | None = None
    state_adds: list[dict[str, Any]] = field(default_factory=list)
    state_removes: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    executor: str | None = None  # the executor that ran the task (:func:`cbp.engine.driver.locality.executor_name`)
    bindings: list[dict[str, Any]] = field(
        default_factory=list
    )  # multicast bindings files (paths relative to the home)
    index_garbage: list[str] = field(
        default_factory=list
    )  # index files the new index no longer needs (relative to the home)


def _add(a: dict[str, Any]) -> dict[str, Any]:
    rows = a.get("rows")
    return {
        "path": a["path"],
        "size": int(a["size"]),
        "mtime": int(a.get("mtime") or 0),
        "rows": None if rows is None else int(rows),
        "partition": int(a["partition"]),
        "frame": a.get("frame"),
    }


def _adds(rows: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Decoded add actions; ``frame`` only where there is one."""
    return [a if a.get("frame") is not None else {k: v for k, v in a.items() if k != "frame"} for a in rows or ()]


def result_batch(r: TaskResult) -> pa.RecordBatch:
    """The Arrow row a task yields for its result."""
    counts = {k: int(v) for k, v in r.stats.items() if k not in _MAPS}
    return pa.RecordBatch.from_pylist(
        [
            {
                "part": r.part,
                "index": r.index,
                "state_adds": [_add(a) for a in r.state_adds],
                "state_removes": [_add(a) for a in r.state_removes],
                "outputs": {f: [_add(a) for a in adds] for f, adds in r.outputs.items()},
                "counts": counts,
                "seconds": {k: float(v) for k, v in r.stats.get("seconds", {}).items()},
                "out": {k: int(v) for k, v in r.stats.get("out", {}).items()},
                "executor": r.executor,
                "bindings": [_add(a) for a in r.bindings],
                "index_garbage": list(r.index_garbage),
            }
        ],
        schema=RESULT,
    )


def decode_results(table: pa.Table) -> list[TaskResult]:
    """The driver's side of :func:`result_batch`: every task's row back as a :class:`TaskResult`."""
    out = []
    for row in table.select(RESULT.names).to_pylist():
        stats: dict[str, Any] = dict(row["counts"] or ())
        for m in _MAPS:
            stats[m] = dict(row[m] or ())
        out.append(
            TaskResult(
                part=row["part"],
                index=row["index"],
                state_adds=_adds(row["state_adds"]),
                state_removes=_adds(row["state_removes"]),
                outputs={f: _adds(adds) for f, adds in row["outputs"] or ()},
                stats=stats,
                executor=row["executor"],
                bindings=_adds(row["bindings"]),
                index_garbage=list(row["index_garbage"] or ()),
            )
        )
    return out


def result_spark_schema() -> Any:
    """:data:`RESULT` as a Spark schema (the ``mapInArrow`` output schema)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(RESULT)


# ------------------------------------------------------------------ failures
class EpochTimeout(BaseException):
    """Raised inside a task when its stage epoch's time limit is up (a BaseException, so that a
    translator's ``except Exception`` cannot swallow it)."""


#: What user code may raise that cbp reports as the user's failure: anything, ``SystemExit``,
#: ``KeyboardInterrupt`` and asyncio's ``CancelledError`` included (the handlers, which also catch
#: :class:`EpochTimeout`, tell the time limit apart).
USER_EXCEPTIONS: tuple[type[BaseException], ...] = (BaseException,)
#: :data:`USER_EXCEPTIONS` and :class:`EpochTimeout`: what a handler around user code catches.
USER_FAILURES: tuple[type[BaseException], ...] = (*USER_EXCEPTIONS, EpochTimeout)

FAILURE_VERSION = 1
_FAILURE_RE = re.compile(r"\[\[cbp-failure/(\d+) ([A-Za-z0-9+/=]*)\]\]")
_FIELD_CHARS = 2000  # no field of a record is longer: the record rides in an exception's text


@dataclass
class FailureRecord:
    """Why a task failed, as the driver needs it to raise the right :mod:`cbp.errors` error.

    ``code`` is ``user-code``, ``timeout`` or ``io``; ``message`` names the stage, epoch and key or
    path; ``key`` is the grouping key as JSON text (``None``: no key involved or not known);
    ``location`` the ``file:line`` of the user's code; ``path``/``errno`` those of a failed write.
    """

    code: str
    message: str
    stage: str
    epoch: int
    key: str | None = None
    exc_type: str | None = None
    location: str | None = None
    path: str | None = None
    errno: int | None = None


class TaskFailed(Exception):
    """Raised in a task for a failure cbp knows; its text is the message plus the encoded record."""

    def __init__(self, record: FailureRecord) -> None:
        self.record = record
        super().__init__(f"{record.message} {encode_failure(record)}")


def encode_failure(rec: FailureRecord) -> str:
    """The record in its fixed encoding (long text fields cut to a bound)."""
    d = {k: (v[:_FIELD_CHARS] if isinstance(v, str) else v) for k, v in asdict(rec).items()}
    d["v"] = FAILURE_VERSION
    data = base64.b64encode(json.dumps(d, separators=(",", ":")).encode()).decode("ascii")
    return f"[[cbp-failure/{FAILURE_VERSION} {data}]]"


def decode_failure(text: str) -> FailureRecord | None:
    """The last record encoded in ``text`` (Spark's message of a failed job), or ``None``."""
    for m in reversed(list(_FAILURE_RE.finditer(text))):
        if int(m.group(1)) != FAILURE_VERSION:
            continue
        try:
            d = json.loads(base64.b64decode(m.group(2), validate=True))
            names = {f.name for f in fields(FailureRecord)}
            return FailureRecord(**{k: v for k, v in d.items() if k in names})
        except (binascii.Error, ValueError, TypeError):
            continue
    return None
