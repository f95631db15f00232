"""The replay harness: test a pipeline by replaying recorded increments, epoch by epoch.

Each step lands one recorded increment on an input flow and runs the pipeline until no stage is
runnable; the result keeps, per step, every stage epoch that ran, the records each epoch wrote
to each flow, and each stateful stage's state afterwards.

Example (it runs the pipeline on Spark)::

    from cbp.testing import replay, Increment
    r = replay("flows/url_count.yaml", [
        Increment("urls", [{"url": "http://a/"}, {"url": "http://b/"}]),
        Increment("urls", [{"url": "http://a/"}]),
    ])
    r.steps[1].outputs["counts"]
    # [{'url': 'http://a/', 'count': 2}]
    r.steps[1].state["url_count"]
    # [{'url': 'http://a/', 'count': 2}, {'url': 'http://b/', 'count': 1}]
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .controller import EpochReport
from .pipeline import Pipeline

__all__ = ["Increment", "EpochCapture", "Step", "Replay", "replay", "load_recording"]


@dataclass
class Increment:
    """One recorded increment: records (dicts, or a JSON-lines file path) for an input flow.

    ``close=True`` also closes the flow's open frame (for flows with ``frame_by``);
    ``run=False`` lands it without running the pipeline afterwards.
    """

    flow: str
    records: str | os.PathLike[str] | Sequence[Mapping[str, Any]]
    close: bool = False
    run: bool = True


@dataclass
class EpochCapture:
    """One stage epoch of a step: its report and the records it wrote, per output flow."""

    report: EpochReport
    outputs: dict[str, list[dict[str, Any]]]
    state: list[dict[str, Any]] | None = None


@dataclass
class Step:
    """What replaying one increment did."""

    increment: Increment
    epochs: list[EpochCapture] = field(default_factory=list)
    outputs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    state: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


@dataclass
class Replay:
    """All steps of a replay, and the pipeline (its ``home`` holds the Delta tables)."""

    pipeline: Pipeline
    steps: list[Step]

    def outputs(self, flow: str) -> list[dict[str, Any]]:
        """Every record written to ``flow`` over the whole replay, in order."""
        return [r for s in self.steps for r in s.outputs.get(flow, [])]

    def final_state(self, stage: str) -> list[dict[str, Any]]:
        """The stage's state after the last step."""
        return self.pipeline.state(stage)


def replay(
    flow_yaml: str | os.PathLike[str],
    increments: Iterable[Increment | tuple[str, Any]],
    *,
    home: str | None = None,
    mode: str | None = None,
    spark: Any = None,
    max_epochs_per_step: int | None = None,
    state_per_epoch: bool = False,
    max_state_files: int = 8,
) -> Replay:
    """Replay ``increments`` through the pipeline; ``home`` defaults to a new temporary directory.

    With ``state_per_epoch``, each :class:`EpochCapture` also holds its stage's state after that epoch;
    ``max_state_files`` is how many data files a state partition may have before it is compacted.
    """
    home = home or tempfile.mkdtemp(prefix="cbp-replay-")
    pipe = Pipeline(flow_yaml, home, mode=mode, spark=spark, max_state_files=max_state_files)
    stateful = [s for s, st in pipe.spec.stages.items() if st.state_schema is not None]
    steps: list[Step] = []
    for inc in increments:
        if not isinstance(inc, Increment):
            inc = Increment(*inc)
        pipe.feed(inc.flow, inc.records, close=inc.close)
        step = Step(inc)
        if inc.run:
            for rep in pipe.run(max_epochs_per_step):
                stage = pipe.spec.stages[rep.stage]
                outs = {f: pipe.output(f, epoch=rep.epoch) for f in stage.outputs}
                st = pipe.state(rep.stage, rep.epoch) if state_per_epoch and stage.state_schema is not None else None
                step.epochs.append(EpochCapture(rep, outs, st))
                for f, recs in outs.items():
                    step.outputs.setdefault(f, []).extend(recs)
        step.state = {s: pipe.state(s) for s in stateful}
        steps.append(step)
    return Replay(pipe, steps)


_REC = re.compile(r"^(\d+)[-_](\w+?)(_close)?\.jsonl$")


def load_recording(directory: str | os.PathLike[str]) -> list[Increment]:
    """Increments recorded as files ``<step>-<flow>.jsonl`` (``...-<flow>_close.jsonl`` closes the frame).

    Example (a directory holding ``001-urls.jsonl``)::

        load_recording("tests/recordings/url_count")
        # [Increment(flow='urls', records='tests/recordings/url_count/001-urls.jsonl', ...)]
    """
    found = []
    for name in os.listdir(directory):
        m = _REC.match(name)
        if m:
            found.append(
                (
                    int(m.group(1)),
                    Increment(m.group(2), os.path.join(os.fspath(directory), name), close=bool(m.group(3))),
                )
            )
    return [inc for _, inc in sorted(found, key=lambda x: x[0])]
