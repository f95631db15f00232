"""The data side of an upgrade: a stage's state and a flow's stored increments in a new shape.

Each function writes new files only (invisible until committed) and returns the Delta commit
(the journal's form, :mod:`.journal`) that makes them the table's live files with the new schema,
under the application transaction ``cbp-upgrade`` of the upgrade's number, so a recovery that
finds the commit made does not make it twice.

Reads: ``live.spec`` (the new schemas, partitions, ``migrate`` functions), the snapshot it is
given (the upgrade's working copy: state and flow table versions), the tables' files. Writes: new
state, index and increment files (not committed: :class:`~.upgrade.Upgrade` commits them); nothing
in the snapshot.

    >>> import pyarrow as pa
    >>> from cbp.spec.schema import RecordSchema
    >>> conform(pa.table({"n": [1], "x": ["gone"]}), RecordSchema.parse({"n": "float", "m": "int?"})).to_pylist()
    [{'n': 1.0, 'm': None}]
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..engine.driver.restate import rewrite_state
from ..engine.task.bipindex import STATE_META
from ..engine.task.keyedstate import RK
from ..engine.task.restate import Job
from ..errors import RuntimeStateError, UserCodeError
from ..spec.schema import DIFF, RecordError, RecordSchema, misfit
from ..storage import INC, LAYOUT, PART, SRC, Home
from .change import Commit, FlowVersion, IncrementVersion, StateVersion, Target
from .landing import flow_schema
from .live import LazySpark, Live, Tuning
from .snapshot import Snapshot

__all__ = ["conform", "conforms", "stored_rows", "upgrade_app", "Migration", "schema_hex"]

APP = "cbp-upgrade"


def upgrade_app(n: int) -> tuple[str, int]:
    """The application transaction of upgrade ``n``'s Delta commits."""
    return APP, n


def schema_hex(schema: pa.Schema) -> str:
    """An Arrow schema as the journal keeps it in a pending record (IPC, hex)."""
    return bytes(schema.serialize()).hex()


def conform(t: pa.Table, schema: RecordSchema, keep: tuple[str, ...] = ()) -> pa.Table:
    """``t`` with exactly the fields of ``schema`` (after the columns ``keep``): fields it lacks
    get their default or null, types are cast (widened), other columns dropped."""
    cols, fields = [t[c] for c in keep], [t.schema.field(c) for c in keep]
    for name, ft in schema.fields.items():
        if name in t.column_names:
            cols.append(t[name].cast(ft.arrow))
        elif name in schema.defaults:
            cols.append(pa.array([schema.to_storage({name: schema.defaults[name]})[name]] * t.num_rows, ft.arrow))
        else:
            cols.append(pa.nulls(t.num_rows, ft.arrow))
        fields.append(pa.field(name, ft.arrow))
    return pa.table(cols, schema=pa.schema(fields))


def conforms(t: pa.Table, schema: RecordSchema) -> bool:
    """Whether :func:`conform` only widens ``t`` into ``schema``: every field there with its type (or
    ``int`` under ``float``), or missing and nullable or defaulted. Not so for increments stored
    before a flow's ``migrate:`` changed its types or fields (they are read as recorded).

        >>> t = pa.table({"n": pa.array([1], pa.int32()), "s": pa.array(["x"], pa.large_string())})
        >>> conforms(t, RecordSchema.parse({"n": "float", "s": "string"}))
        True
        >>> n_int, c_int = RecordSchema.parse({"n": "int"}), RecordSchema.parse({"c": "int"})
        >>> conforms(pa.table({"n": ["1"]}), n_int), conforms(pa.table({"n": [1]}), c_int)
        (False, False)
    """
    for name, ft in schema.fields.items():
        if name not in t.column_names:
            if not ft.nullable and name not in schema.defaults:
                return False
            continue
        have, want = _family(t.schema.field(name).type), _family(ft.arrow)
        if have != want and (have, want) != ("int", "float"):
            return False
    return True


def _family(t: pa.DataType) -> Any:
    """An Arrow type as a schema type sees it (a reader's large or view variants and widths alike)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or str(t) == "string_view":
        return "string"
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return "int" if pa.types.is_integer(t) else "float"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or str(t).startswith("list_view"):
        return ("list", _family(t.value_type))
    return str(t)


def stored_rows(
    t: pa.Table, schema: RecordSchema, meta: tuple[str, ...]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Rows of a stored increment table as (record, the columns ``meta`` present): in ``schema``
    when the table conforms to it, otherwise as recorded (its own fields and types, from before a
    flow migration)."""
    keep = tuple(c for c in meta if c in t.column_names)
    if conforms(t, schema):
        rows = [schema.from_storage(r) for r in conform(t, schema, keep=keep).to_pylist()]
    else:
        rows = t.to_pylist()
    return [({k: v for k, v in r.items() if k not in meta}, {c: r.get(c) for c in keep}) for r in rows]


class Migration:
    """Rewrites a stage's state or a flow's stored increments for an upgrade (new files only)."""

    def __init__(self, home: Home, live: Live, tuning: Tuning, spark: LazySpark) -> None:
        self.home, self.live, self.tuning, self.spark = home, live, tuning, spark

    def state_commit(
        self, st: Snapshot, stage: str, old: RecordSchema, n: int
    ) -> tuple[Commit, dict[str, str], list[str]]:
        """Rewrite ``stage``'s state (at its version in ``st``) into the YAML's schema, partition count
        and row key (one pass, a Spark job).

        Returns the commit, the new index (partition -> index file), and the files written."""
        spec = self.live.spec.stages[stage]
        sst = st.stages[stage]
        rel = LAYOUT.state(stage)
        by_part: dict[int, list[dict[str, Any]]] = {}
        for f in self.home.table_files(rel, sst.state_version):  # type: ignore[arg-type]
            by_part.setdefault(int(f["partition"]), []).append(f)
        new = spec.state_schema
        assert new is not None
        job = Job(
            self.home,
            rel,
            old,
            new,
            spec.migrate,
            spec.partitions,
            sst.epoch,
            f"u{n}",
            self.tuning.state_row_group,
            stage,
            spec.row_key,
        )
        try:
            done, errors = rewrite_state(self.spark.get(), job, by_part)
        except (
            Exception
        ) as e:  # Spark's own failure (a lost worker, a full disk): the files written are invisible orphans
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            raise RuntimeStateError(
                f"cbp upgrade: the Spark job rewriting stage '{stage}''s state failed ({first}); nothing was changed",
                code="upgrade-failed",
            ) from None
        if errors:
            raise UserCodeError(
                f"cbp upgrade: migrating stage '{stage}''s state failed; nothing was changed: " + "; ".join(errors[:5]),
                code="migrate-failed",
                stage=stage,
            )
        adds = [r["add"] for r in done.values()]
        rk = [pa.field(RK, pa.string())] if spec.row_key else []  # keyed rows (cbp.engine.task.keyedstate)
        schema = pa.schema([pa.field(PART, pa.int32())] + list(STATE_META) + rk + list(new.arrow))
        app, version = upgrade_app(n)
        commit = Commit(
            rel, PART, tuple(adds), (), app, version, (StateVersion(stage),), overwrite=True, schema=schema_hex(schema)
        )
        written = [f"{rel}/{a['path']}" for a in adds] + [r["index"] for r in done.values()]
        return commit, {str(q): r["index"] for q, r in done.items()}, written

    def flow_commit(self, st: Snapshot, flow: str, n: int, old: RecordSchema | None = None) -> tuple[Commit, list[str]]:
        """Rewrite every file of ``flow``'s table live at its version in ``st`` into the YAML's schema (the
        increments not yet read, and those of a flow nobody reads): widened, or (``old``: the recorded
        schema) each record through the flow's ``migrate`` function; the commit and the files written.
        Runs in the driver, one increment file at a time."""
        fs = st.flows[flow]
        rel = LAYOUT.flow(flow)
        schema = self.live.spec.flows[flow].schema
        adds, removes, written = [], [], []
        try:
            for f in self.home.table_files(rel, fs.version):  # type: ignore[arg-type]
                t = pq.read_table(self.home.path(f"{rel}/{f['path']}"), filesystem=self.home.fs)
                inc = int(f["partition"])
                if old is not None:
                    t = self._migrated(
                        flow, conform(t, old.signed(), keep=(SRC,) if SRC in t.column_names else ()), old, inc
                    )
                t = conform(
                    t, schema.signed(), keep=(SRC,) if SRC in t.column_names else ()
                )  # _diff stays, last (null: +1)
                # a fed field narrowed (int -> int32): its stored values must fit (a stage's output, a view's,
                # holds what its translator wrote: a view's rows are retracted and rebuilt by the upgrade)
                bad = misfit(schema, t) if self.live.spec.flows[flow].external else None
                if bad is not None:
                    raise UserCodeError(
                        f"cbp upgrade: flow '{flow}' (increment {inc}): {bad}; nothing was changed: restore the "
                        "wider type, or give the flow a migrate: function",
                        code="migrate-failed",
                    )
                add = self.home.write_parquet(LAYOUT.increment_dir(flow, inc), t, f"u{n}", inc)
                written.append(add["rel"])
                adds.append({**add, "path": add.pop("rel")[len(rel) + 1 :]})
                removes.append(f)
        except (
            BaseException
        ):  # a migrate that failed: what this flow's rewrite wrote goes (it would be an invisible orphan)
            for w in written:
                try:
                    self.home.delete_file(w)
                except OSError:
                    pass
            raise
        app, version = upgrade_app(n)
        targets: list[Target] = [FlowVersion(flow), *(IncrementVersion(flow, i) for i in fs.incs)]
        commit = Commit(
            rel,
            INC,
            tuple(adds),
            tuple(removes),
            app,
            version,
            tuple(targets),
            schema=schema_hex(flow_schema(self.live.spec, flow)),
        )
        return commit, written

    def _migrated(self, flow: str, t: pa.Table, old: RecordSchema, inc: int) -> pa.Table:
        """``t`` (records of schema ``old``, ``_diff`` and maybe ``_src``) through the flow's ``migrate``:
        each record's ``_diff`` and ``_src`` kept, the result checked against the new schema; a raise
        or a bad result is ``migrate-failed``."""
        spec = self.live.spec.flows[flow]
        fn, new, meta = spec.migrate, spec.schema, [c for c in (SRC, DIFF) if c in t.column_names]
        assert fn is not None
        out: list[dict[str, Any]] = []
        for row in t.to_pylist():
            rec = old.from_storage({k: row[k] for k in old.fields})
            shown = str(rec)[:200]
            try:
                res = fn(dict(rec))
                if res is None:
                    continue
                out.append({**new.to_storage(new.validate(res)), **{c: row[c] for c in meta}})
            except RecordError as e:
                self._fail(
                    flow, spec.migrate_path, inc, shown, f"returned a record that does not fit the new schema: {e}"
                )
            except Exception as e:  # the user's function
                self._fail(flow, spec.migrate_path, inc, shown, f"raised {type(e).__name__}: {e}")
        cols = (
            [t.schema.field(c) for c in meta if c == SRC]
            + list(new.arrow)
            + [t.schema.field(c) for c in meta if c == DIFF]
        )
        return pa.Table.from_pylist(out, schema=pa.schema(cols))

    @staticmethod
    def _fail(flow: str, fn: str | None, inc: int, record: str, what: str) -> None:
        raise UserCodeError(
            f"cbp upgrade: migrating flow '{flow}' failed; nothing was changed: migrate '{fn}' {what} "
            f"(increment {inc}, record {record})",
            code="migrate-failed",
        )
