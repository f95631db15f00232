"""Reading a Delta table that feeds a source flow: its versions, its rows, its change data feed.

A source table belongs to someone else (their jobs append, MERGE and DELETE): cbp only reads it,
with delta-rs, through the same object-store settings as homes (:mod:`.objectstore`). What each
version changed comes from the table's change data feed (``delta.enableChangeDataFeed``) as
signed rows: ``insert`` and ``update_postimage`` are +1, ``delete`` and ``update_preimage`` -1.

    >>> SIGNS["update_preimage"], SIGNS["insert"]
    (-1, 1)
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from . import objectstore
from .location import local_file_uri

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = ["SourceTable", "SIGNS", "CDF_PROPERTY", "DIFF"]

CDF_PROPERTY = "delta.enableChangeDataFeed"
DIFF = "_diff"
SIGNS = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}
_CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


class SourceTable:
    """A Delta table read as a source: ``SourceTable(uri).version()``, ``.rows(v)``, ``.changes(v)``.

    Errors name the table and the version (:class:`~cbp.errors.InputError`): ``source-missing``
    (no Delta table there, or no such version), ``source-no-cdf`` (the change data feed is not
    enabled), ``source-cdf-missing`` (a version's change data is gone: vacuumed, or its log
    cleaned up), ``source-reader-feature`` (a reader feature delta-rs lacks: ``typeWidening``).
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._dt: DeltaTable | None = None

    def _open(self, version: int | None = None) -> DeltaTable:
        from deltalake import DeltaTable

        where = local_file_uri(self.uri)
        try:
            if self._dt is None:
                self._dt = DeltaTable(where, storage_options=objectstore.storage_options(where))
            elif version is None:
                self._dt.update_incremental()
            if version is not None and self._dt.version() != version:
                self._dt.load_as_version(version)
        except Exception as e:  # noqa: BLE001 - delta-rs raises its own and OSError kinds
            at = f" version {version}" if version is not None else ""
            raise InputError(
                f"source table {self.uri}{at}: cannot open it as a Delta table: {str(e).splitlines()[0][:300]}; "
                "nothing was landed",
                code="source-missing",
            ) from None
        return self._dt

    def arrow_schema(self) -> pa.Schema:
        """The table's columns as of its newest version, as Arrow types (delta-rs maps Delta's:
        ``short`` is int16, ``timestamp`` is UTC microseconds, ``timestamp_ntz`` has no zone ...)."""
        return pa.schema(self._open().schema().to_arrow())

    def version(self) -> int:
        """The table's newest version."""
        return int(self._open().version())

    def cdf_enabled(self, version: int) -> bool:
        """Whether the change data feed is on as of ``version``."""
        conf = self._open(version).metadata().configuration
        return str(conf.get(CDF_PROPERTY, "false")).strip().lower() == "true"

    def check_cdf(self, version: int, reland: str = "cbp sync PIPELINE.yaml --reland FLOW") -> None:
        """Refuse (``source-no-cdf``) a version whose changes cbp cannot read (``reland``: how to re-land)."""
        if not self.cdf_enabled(version):
            raise InputError(
                f"source table {self.uri} version {version}: the version was written without a change "
                "data feed, so cbp cannot tell what it changed (enabling the feed later does not bring "
                f"it back). Enable it with ALTER TABLE ... SET TBLPROPERTIES ({CDF_PROPERTY} = true) "
                "(delta-rs: DeltaTable.alter.set_table_properties), then re-land the flow from the table "
                f"as it is now: {reland}; later versions sync from there. Nothing was landed",
                code="source-no-cdf",
            )

    def rows(self, version: int, columns: list[str]) -> pa.Table:
        """The table's rows as of ``version`` (the columns of ``columns`` it has)."""
        dt = self._open(version)
        have = [c for c in columns if c in set(dt.schema().to_arrow().names)]
        try:
            return _plain(pa.table(dt.to_pyarrow_dataset().to_table(columns=have)))
        except Exception as e:  # noqa: BLE001
            if "deletionVectors" not in str(e):  # (deletion vectors: their own code, below)
                self._refuse_feature(version, e)
            if "deletionVectors" in str(e):  # delta-rs reads their change data feed, not their rows
                raise InputError(
                    f"source table {self.uri} version {version}: the table has deletion vectors, and cbp's Delta "
                    "reader (delta-rs) cannot read its rows as of a version (its change data feed it can). Drop "
                    "the feature in Spark (ALTER TABLE ... DROP FEATURE deletionVectors: the rows they delete "
                    "are purged) and sync again; nothing was landed",
                    code="source-deletion-vectors",
                ) from None
            raise InputError(
                f"source table {self.uri} version {version}: cannot read its rows: {str(e).splitlines()[0][:300]}; "
                "nothing was landed",
                code="source-missing",
            ) from None

    def changes(self, version: int, columns: list[str]) -> pa.Table:
        """What ``version`` changed: the columns of ``columns`` the table has, and ``_diff`` (+1/-1)."""
        dt = self._open()
        try:
            reader = dt.load_cdf(starting_version=version, ending_version=version, columns=None)
            data = pa.table(reader)
        except Exception as e:  # noqa: BLE001
            self._refuse_feature(version, e)
            raise InputError(
                f"source table {self.uri} version {version}: its change data cannot be read "
                f"({str(e).splitlines()[0][:300]}); it was vacuumed or its log cleaned up. Land the table "
                "anew in a new home, or keep change data longer (delta.deletedFileRetentionDuration, "
                "delta.logRetentionDuration); nothing was landed",
                code="source-cdf-missing",
            ) from None
        kinds = pc.cast(data.column("_change_type"), pa.string())
        signs = pc.if_else(pc.is_in(kinds, pa.array(["insert", "update_postimage"])), 1, -1).cast(pa.int64())
        keep = pc.is_in(kinds, pa.array(list(SIGNS)))
        body = _plain(data.select([c for c in data.schema.names if c in set(columns)]))
        return body.append_column(DIFF, signs).filter(keep)

    def _refuse_feature(self, version: int, e: Exception) -> None:
        """Raise ``source-reader-feature`` when delta-rs refused the table for a reader feature it lacks."""
        said = _UNSUPPORTED.search(str(e))
        if said is None:
            return
        named = {n.strip(" '\"").lower() for n in said.group(1).split(",")}
        try:  # Delta's own spelling (delta-rs says TypeWidening in one message, typeWidening in another)
            have = list(self._open().protocol().reader_features or [])
        except InputError:
            have = []
        features = [f for f in have if f.lower() in named] or sorted(named)
        drop = "; ".join(f"ALTER TABLE ... DROP FEATURE {f}" for f in features)
        raise InputError(
            f"source table {self.uri} version {version}: the table uses the Delta reader feature "
            f"{', '.join(features)}, which cbp's Delta reader (delta-rs) cannot read: neither its rows nor its "
            f"change data (its data was not vacuumed). Drop the feature in Spark ({drop}; for typeWidening it "
            "rewrites the files written before a column's type was widened), then sync again; nothing was landed",
            code="source-reader-feature",
        ) from None


#: delta-rs's refusals of a table for a reader feature it lacks: "Unsupported table features required:
#: [TypeWidening]" (reading change data), "... reader features: {'typeWidening'} but these are not yet supported"
_UNSUPPORTED = re.compile(r"(?:Unsupported table features required: \[|reader features: \{)([^\]}]*)")


def _plain(t: pa.Table) -> pa.Table:
    """Arrow types delta-rs reads (string views, large strings) as the plain ones cbp stores."""
    fields = []
    for f in t.schema:
        if pa.types.is_string_view(f.type) or pa.types.is_large_string(f.type):
            fields.append(pa.field(f.name, pa.string(), f.nullable))
        elif pa.types.is_binary_view(f.type) or pa.types.is_large_binary(f.type):
            fields.append(pa.field(f.name, pa.binary(), f.nullable))
        else:
            fields.append(f)
    target = pa.schema(fields)
    return t if target == t.schema else t.cast(target)
