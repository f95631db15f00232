"""Which stage inputs take signed records (``signed: true``), and the refusal of a record that is
not +1 bound for one that does not.

A translator that counts records instead of summing ``_diff`` gives a wrong result, silently, on a
retraction (``_diff: -1``) or a record standing for several copies (``_diff: 3``). So a stage
receives such records only on an input it declares signed (``signed: true`` on the stage, or on
the input); any other is refused with code ``retraction-refused``: at feed time for an external
flow (:meth:`cbp.controller.landing.Landing.feed`, nothing of the feed lands), and at the epoch
for a flow a stage writes (:mod:`cbp.engine.driver.signedinputs`, nothing of the epoch is
committed). ``cbp validate`` warns (code ``unsigned-reader``) where a flow that is signed by
nature feeds an unsigned input (:func:`unsigned_readers`).

    >>> import pyarrow as pa
    >>> first_unsigned(pa.chunked_array([[1, None, 1], [1, -1, 2]]))
    4
    >>> first_unsigned(pa.chunked_array([[1, None]])) is None
    True
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from . import PipelineSpec

__all__ = ["REFUSED", "UnsignedReader", "unsigned_inputs", "first_unsigned", "refusal", "unsigned_readers"]

REFUSED = "retraction-refused"
FIX = (
    "sum _diff in the translator (sum(r['_diff'] for r in records), not a count of records) "
    "and add 'signed: true' to the stage"
)


@dataclass(frozen=True)
class UnsignedReader:
    """A warning of ``cbp validate``: a flow that can carry retractions feeds an unsigned input."""

    stage: str
    code: str
    message: str

    def __str__(self) -> str:
        return self.message


def unsigned_inputs(spec: PipelineSpec, flow: str) -> list[str]:
    """The stages that read ``flow`` on an input that is not signed (in the order of the spec)."""
    return [s.name for s in spec.stages.values() if any(i.flow == flow and not i.signed for i in s.inputs)]


def first_unsigned(diff: pa.ChunkedArray | pa.Array) -> int | None:
    """The index of the first ``_diff`` that is neither +1 nor null (null is +1), or None.

    One Arrow ``min_max`` decides the common case (every record +1); only a column that holds
    another value is searched."""
    if len(diff) == 0 or diff.null_count == len(diff):
        return None
    mm = pc.min_max(diff)
    if mm["min"].as_py() == 1 and mm["max"].as_py() == 1:
        return None
    bad = pc.fill_null(pc.not_equal(diff, 1), False)
    return int(pc.index(bad, True).as_py())


def shown(record: dict[str, Any]) -> str:
    """A record as JSON text for a message (at most 200 characters)."""
    text = json.dumps(record, default=str, ensure_ascii=False)
    return text if len(text) <= 200 else text[:200] + "..."


def refusal(flow: str, stage: str, where: str, record: dict[str, Any], diff: int, landed: str) -> str:
    """The message of a ``retraction-refused`` error: the flow, the stage, the record, and the fix."""
    kind = "a retraction" if diff < 0 else f"{diff} copies of a record"
    return (
        f"{where} of flow '{flow}' {shown(record)} has _diff {diff} ({kind}), but stage '{stage}' does not say it "
        f"handles signed records on input '{flow}'; {FIX} (or on its input '{flow}'). {landed}"
    )


def unsigned_readers(spec: PipelineSpec) -> list[UnsignedReader]:
    """Warnings (code ``unsigned-reader``) where a flow that carries signed records by its nature (a
    Delta source, a keyed flow, the output of a signed stage) feeds an input that is not signed."""
    out = []
    for name, fl in spec.flows.items():
        if fl.source is not None:
            why = f"a Delta source ({fl.source}): its deletes and updates are retractions"
        elif fl.key:
            why = "a keyed flow: its upserts and deletes land as retractions of the old rows"
        elif fl.producer is not None and spec.stages[fl.producer].signed:
            why = f"written by signed stage '{fl.producer}', which may pass retractions on"
        else:
            continue
        for stage in unsigned_inputs(spec, name):
            message = (
                f"flow '{name}' is {why}; stage '{stage}' reads it without 'signed: true', so the "
                f"first retraction will be refused ({REFUSED}): {FIX}"
            )
            out.append(UnsignedReader(stage, "unsigned-reader", message))
    return out
