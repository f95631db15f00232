"""Internal: the incremental dataflow controller (IDC, paper 001 §4.1-4.3), not public API.

It keeps, per stage input, a *flow connector*: the ordered queue of increments available to
that stage with their framing keys. It asks each stage's Runnable which increments to read and
remove, runs the runnable stages of a possibly cyclic graph round by round until none is
runnable (or an epoch budget is spent), commits each stage epoch durably, and garbage-collects
increments that no connector references.

- :mod:`.snapshot`: the typed, versioned live state (what is live, not history);
- :mod:`.history`: what happened (epochs, feeds, feed ids, collected increments), read on demand;
- :mod:`.journal`: the commit protocol: pending records, Delta commits, recovery;
- :mod:`.landing`: feeds, framing, garbage collection;
- :mod:`.scheduler`: runnability and the round-robin scheduler;
- :mod:`.epoch`: one stage epoch: intention, Spark job, commits;
- :mod:`.reads`: state and output records, epochs, status.

    >>> from cbp.spec import load_spec                                  # doctest: +SKIP
    >>> ctl = Controller(load_spec("flows/url_count.yaml"), Home("state/url_count"))  # doctest: +SKIP
    >>> ctl.feed("urls", [{"url": "http://a/"}]); ctl.run()             # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ..engine.bipindex import ROW_GROUP
from ..errors import CbpError, RuntimeStateError, SpecError, UsageError
from ..spec import PipelineSpec
from ..storage import LAYOUT, Home
from .epoch import Epochs
from .history import History
from .journal import Journal
from .landing import Landing
from .reads import Reads
from .records import Decision, EpochRecord, EpochReport, Landed, signature
from .scheduler import Scheduling
from .snapshot import Snapshot

__all__ = ["Controller", "EpochReport", "EpochRecord", "Decision", "Landed"]


class Controller(Journal, Landing, Scheduling, Epochs, Reads):
    """Connectors, runnability, scheduling and epoch commits for one pipeline in one home."""

    def __init__(self, spec: PipelineSpec, home: Home, *, mode: Optional[str] = None, spark: Any = None,
                 max_state_files: int = 8, backpressure: int = 4, state_row_group: int = ROW_GROUP,
                 state_cache_mb: Optional[float] = None, state_scan_fraction: Optional[float] = None,
                 small_epoch_records: Optional[int] = None, notify: Optional[Callable[[str], None]] = None) -> None:
        self.spec = spec
        self.home = home
        self.mode = mode or spec.mode
        if self.mode not in ("direct", "blackbox"):
            raise CbpError(f"unknown mode '{self.mode}'; use 'direct' or 'blackbox'")
        self._spark = spark
        self.max_state_files = max_state_files
        self.state_row_group = state_row_group
        self.state_cache_mb = state_cache_mb
        self.state_scan_fraction = state_scan_fraction
        self.small_epoch_records = small_epoch_records
        self.backpressure = backpressure
        self._checked_ids: set[str] = set()
        self.notify = notify or (lambda message: None)  # recoveries and lock take-overs are reported here
        self.epoch_timeout: Optional[float] = None  # seconds per stage epoch of the current run (cbp run --epoch-timeout)
        self._interrupted: dict[str, dict[str, Any]] = {}  # stage -> intention of an epoch to finish
        self._entries: dict[str, Any] = {}
        self.history = History(home, LAYOUT)
        self._load(home.read_controller())

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from ..engine.session import get_spark

            self._spark = get_spark()
        return self._spark

    def _fresh(self) -> Snapshot:
        """The snapshot of a new home."""
        s = Snapshot(self.spec.name)
        self.st = s
        self._reconcile()
        return s

    def _reconcile(self) -> None:
        """Adopt YAML changes that keep the pipeline's shape: new flows, stages or inputs start empty."""
        self.st.adopt(self.spec.flows, {s: st.input_flows for s, st in self.spec.stages.items()})
        if self.st.pipeline != self.spec.name:
            raise UsageError(f"home {self.home.location} belongs to pipeline '{self.st.pipeline}', not '{self.spec.name}'; use another --home",
                             code="bad-home")
        for name, fl in self.spec.flows.items():
            self._check_shape(f"flow:{name}", f"flow '{name}'", "increments",
                              {"schema": signature(fl.schema), "framed": fl.frame_by is not None}, self.st.flows[name].version is not None)
        for name, stage in self.spec.stages.items():
            if stage.state_schema is not None:
                self._check_shape(f"state:{name}", f"stage '{name}'", "state",
                                  {"schema": signature(stage.state_schema), "partitions": stage.partitions,
                                   **({"row_key": list(stage.row_key)} if stage.row_key else {})},
                                  self.st.stages[name].state_version is not None)

    def _check_shape(self, key: str, what: str, data: str, now: dict[str, Any], stored: bool) -> None:
        """Refuse a YAML whose schema, framing or partition count no longer fits the data in the home."""
        shapes = self.st.shapes
        before = shapes.get(key)
        if before is None or not stored or before == now:
            shapes[key] = now
            return
        diffs = []
        old_s, new_s = before["schema"], now["schema"]
        diffs += [f"field '{f}' added" for f in new_s if f not in old_s]
        diffs += [f"field '{f}' removed" for f in old_s if f not in new_s]
        diffs += [f"field '{f}' changed from {old_s[f]} to {new_s[f]}" for f in new_s if f in old_s and old_s[f] != new_s[f]]
        if before.get("partitions") != now.get("partitions"):
            diffs.append(f"partitions changed from {before.get('partitions')} to {now.get('partitions')}")
        if before.get("row_key") != now.get("row_key"):
            diffs.append(f"row_key changed from {before.get('row_key')} to {now.get('row_key')}")
        if before.get("framed") != now.get("framed"):
            diffs.append("frame_by " + ("added" if now.get("framed") else "removed"))
        raise SpecError(str(self.spec.path), f"{what} no longer fits its {data} stored in {self.home.location}: {'; '.join(diffs)}. "
                        "cbp does not migrate stored data: restore the previous definition, or start a new --home", code="home-mismatch")
