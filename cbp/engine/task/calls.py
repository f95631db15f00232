"""The translator's calls in a task: one key at a time, what it writes validated and appended to the
task's output files (:class:`_Calls`), and the typed failures of user code."""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Iterator
from functools import partial
from typing import Any

import pyarrow as pa

from ...errors import UserCodeError
from ...model import Emitter
from ...spec.resolve import safe_str
from ...spec.schema import RecordError
from ...storage import LAYOUT
from ..common.protocol import USER_FAILURES, EpochTimeout, FailureRecord, TaskFailed
from .framing import FramedSink
from .keyedstate import KeyedRows
from .partition import StateRecords
from .plan import TaskPlan
from .routing import BINDINGS, encode_key
from .signed import signed_record, state_record
from .sinks import ParquetSink, RecordSink


class WorkerExit(BaseException):
    """``os._exit`` called by user code while :class:`ExitGuard` is on: raised instead of ending the
    Python worker, so the task can report the stage, partition and key (code ``worker-died``)."""

    def __init__(self, status: Any) -> None:
        super().__init__(status)
        self.status = status


class ExitGuard:
    """While on (``with``), ``os._exit`` in this thread raises :class:`WorkerExit` (other threads,
    e.g. PySpark's own, still exit). Two attribute writes per use: cheap enough per key."""

    def __init__(self) -> None:
        self._real = os._exit
        self._owner = 0

    def _exit(self, status: Any = 0) -> None:
        if threading.get_ident() == self._owner:
            raise WorkerExit(status)
        self._real(status)

    def __enter__(self) -> ExitGuard:
        self._owner = threading.get_ident()
        os._exit = self._exit  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: Any) -> None:
        os._exit = self._real


def worker_exit_failure(
    plan: TaskPlan, where: str, fn_name: str, exc: WorkerExit, key_text: str | None = None
) -> TaskFailed:
    """``worker-died`` for user code that called ``os._exit``: where (stage, epoch, partition,
    key) and the user's line."""
    tb = traceback.extract_tb(exc.__traceback__)
    user = [fr for fr in tb if "/cbp/" not in fr.filename.replace("\\", "/")] or tb[-1:]
    loc = f"{user[-1].filename}:{user[-1].lineno}" if user else None
    message = f"{where}: {fn_name} called os._exit({exc.status!r}), which would have killed the Spark Python worker"
    return _failed(
        plan, "worker-died", message + (f" ({loc})" if loc else ""), key=key_text, exc_type="os._exit", location=loc
    )


def _failed(plan: TaskPlan, code: str, message: str, **fields: Any) -> TaskFailed:
    return TaskFailed(FailureRecord(code, message, plan.stage.name, plan.epoch, **fields))


def _user_failure(
    plan: TaskPlan, where: str, fn_name: str, exc: BaseException, key_text: str | None = None
) -> TaskFailed:
    """The failure of user code ``fn_name`` that raised ``exc`` (or was interrupted by the time limit)."""
    tb = traceback.extract_tb(exc.__traceback__)
    user = [fr for fr in tb if "/cbp/" not in fr.filename.replace("\\", "/")] or tb[-1:]
    loc = f"{user[-1].filename}:{user[-1].lineno}" if user else None
    if isinstance(exc, EpochTimeout):
        return _failed(
            plan,
            "timeout",
            f"{where}: {fn_name} was still running when the epoch's time limit was up; "
            "the key is the one it was called for",
            key=key_text,
            location=loc,
        )
    return _failed(
        plan,
        exc.code if isinstance(exc, UserCodeError) else "user-code",  # a view's own (view-overflow)
        f"{where}: {fn_name} raised {type(exc).__name__}: {safe_str(exc)}" + (f" ({loc})" if loc else ""),
        key=key_text,
        exc_type=type(exc).__name__,
        location=loc,
    )


# ------------------------------------------------------------------ translate calls
class _Calls:
    """Calls the translator for one key at a time; validates what it writes, appends outputs to their files."""

    def __init__(self, plan: TaskPlan, part: int) -> None:
        self.plan = plan
        st = plan.stage
        self.outputs = {
            f: RecordSink(_output_sink(plan, f, part), plan.out_schemas[f].signed().to_arrow, plan.write_rows)
            for f in st.outputs
        }
        self.bindings = RecordSink(
            ParquetSink(
                plan.home, LAYOUT.bindings(st.name), f"{LAYOUT.epoch_prefix(plan.epoch)}-p{part:05d}", BINDINGS, part
            ),
            lambda rows: pa.Table.from_pylist(rows, BINDINGS),
            plan.write_rows,
        )
        self._validators = {f: partial(signed_record, plan.out_schemas[f]) for f in st.outputs}
        if st.state_schema is not None:
            self._validators["state"] = partial(state_record, st.state_schema)
        self.state_out: list[dict[str, Any]] = []
        self.key: Any = None
        self.key_text: str | None = None
        self.emitter = Emitter(
            st.name,
            plan.epoch,
            st.params,
            st.outputs,
            st.state_schema is not None,
            self._sink,
            None if st.record_wise else self.bind,
        )
        self.calls = 0
        self.part = part
        self._guard = ExitGuard()

    def _sink(self, flow: str, record: Any) -> None:
        try:
            rec = self._validators[flow](record)
        except RecordError as e:
            raise _failed(
                self.plan,
                "user-code" if e.code == "bad-record" else e.code,
                f"{self.plan.where(self.key)}: the translator wrote a record to '{flow}' that does not fit its schema: "
                f"{e}; record {record!r:.200}",
                key=self.key_text,
                exc_type=type(e).__name__,
            ) from None
        if flow == "state":
            self.state_out.append(rec)
        else:
            self.outputs[flow].add(rec)

    def bind(self, key: Any, address: Any) -> None:
        """Record a multicast binding (``out.associate``) for the stage's next epoch."""
        try:
            row = {"_key": encode_key(key), "_addr": encode_key(address)}
        except (TypeError, ValueError) as e:
            raise _failed(
                self.plan,
                "user-code",
                f"{self.plan.where(self.key)}: out.associate({key!r:.80}, {address!r:.80}): "
                f"the key and the address must be JSON values ({e})",
                key=self.key_text,
                exc_type=type(e).__name__,
            ) from None
        if address is None:
            raise _failed(
                self.plan,
                "user-code",
                f"{self.plan.where(self.key)}: out.associate({key!r:.80}, None): a multicast address cannot be None",
                key=self.key_text,
                exc_type="TypeError",
            )
        self.bindings.add(row)

    def call(
        self, key_text: str | None, key: Any, state: StateRecords, inputs: list[Iterator[dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        self.key, self.key_text = key, key_text
        self.state_out = []
        self.calls += 1
        st = self.plan.stage
        try:
            with self._guard:
                st.translator(key, state if isinstance(state, KeyedRows) else iter(state), *inputs, out=self.emitter)
        except TaskFailed:
            raise
        except WorkerExit as e:
            where = f"{self.plan.where(key)} (task partition {self.part})"
            raise worker_exit_failure(self.plan, where, f"translator '{st.translator_path}'", e, key_text) from None
        except USER_FAILURES as e:
            raise _user_failure(
                self.plan, self.plan.where(key), f"translator '{st.translator_path}'", e, key_text
            ) from None
        return self.state_out

    @property
    def counts(self) -> dict[str, int]:
        return {f: s.count for f, s in self.outputs.items()}

    def close_bindings(self) -> list[dict[str, Any]]:
        """Finish the bindings file: its add action (path relative to the home), if any binding was made."""
        add = self.bindings.close()
        if not isinstance(add, dict):  # none made (a ParquetSink gives one add action or None)
            return []
        add["path"] = add.pop("rel")
        return [add]

    def close(self) -> dict[str, list[dict[str, Any]]]:
        """Finish the output files; their add actions per flow (paths relative to the flow's table)."""
        result: dict[str, list[dict[str, Any]]] = {}
        for flow, sink in self.outputs.items():
            done = sink.close()
            adds = done if isinstance(done, list) else [] if done is None else [done]
            for add in adds:
                add["path"] = add.pop("rel")[len(LAYOUT.flow(flow)) + 1 :]
            if adds:
                result[flow] = adds
        return result

    def abort(self) -> None:
        for sink in [*self.outputs.values(), self.bindings]:
            sink.sink.abort()


def _output_sink(plan: TaskPlan, flow: str, part: int) -> ParquetSink | FramedSink:
    """Where a task writes its records of output ``flow``: one file in the directory of the
    increment the epoch took for it, or, for a flow framed by a field, one file per run there
    (their increments are told by the driver, :mod:`cbp.engine.task.framing`)."""
    rel_dir, prefix = (
        LAYOUT.increment_dir(flow, plan.out_incs[flow]),
        LAYOUT.output_prefix(plan.stage.name, plan.epoch) + f"-p{part:05d}",
    )
    schema = plan.out_schemas[flow].signed()
    field = plan.out_frames.get(flow)
    if field is None:
        return ParquetSink(plan.home, rel_dir, prefix, schema.arrow, plan.out_incs[flow])
    return FramedSink(
        plan.home,
        rel_dir,
        prefix,
        schema.arrow,
        field,
        json_text=schema.fields[field].scalar == "json" and not schema.fields[field].is_list,
        epoch=plan.epoch,
        partition=plan.out_incs[flow],
    )
