"""A SQL view's current rows as a plain Delta table: what an epoch's signed records change in it.

The table (``views/<view>``, :meth:`cbp.storage.layout.Layout.view_table`) has the view's columns
only, no ``_diff``: a row of multiplicity n is stored n times, so Spark's Delta reader and delta-rs
read exactly the view. It is unpartitioned (a partition column would be a column readers see);
instead each data file holds the rows of one *bucket* (a hash of the whole row, modulo the number
of buckets), and its name says which, of how many: ``b<bucket>n<buckets>-<tag>-<uuid>.parquet``.
An epoch's records touch a few buckets; its commit removes those buckets' files and adds one
rewritten file per bucket, or only adds a file of new rows to a bucket that loses none
(:func:`apply_delta`), so its cost follows the change, not the view's size. The number of
buckets grows with the table (:func:`buckets_for`: about :data:`ROWS_PER_BUCKET` rows a file).
A file whose name names no bucket of that many (another writer's: ``OPTIMIZE`` compacts files
into ``part-...`` ones) is read whole at the next change and its rows go back into bucket files.
:func:`rebuild` writes the whole contents (a home an older cbp wrote, a rewind).

Reads: the table's live files. Writes: new data files (the caller commits them).

    >>> bucket_of_name("b00007n32-c12-1f2e3d4c5b6a.parquet", 32), bucket_of_name("part-00001-c000.parquet", 32)
    (7, None)
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from .home import Home

__all__ = [
    "BUCKETS",
    "MAX_FILES",
    "ROWS_PER_BUCKET",
    "ViewCommit",
    "Diverged",
    "apply_delta",
    "bucket_of_name",
    "buckets_for",
    "rebuild",
    "table_buckets",
]

BUCKETS = 32  # buckets a view table's rows hash to, at least
ROWS_PER_BUCKET = 10_000  # rows a bucket holds at most, about (a table that grows gets more buckets)
MAX_FILES = 8  # files a bucket may hold (rows added by epochs) before the next change rewrites them into one
_DIFF = "_diff"
_NAME = re.compile(r"^b(\d{5})n(\d+)-")


class Diverged(Exception):
    """The table lacks a row the change retracts: someone changed its contents (it is rebuilt)."""


@dataclass
class ViewCommit:
    """A view table's next commit: files to add and remove (Delta actions, paths relative to the
    table), whether it replaces every file, the files written for it, the rows read to plan it."""

    adds: list[dict[str, Any]] = field(default_factory=list)
    removes: list[dict[str, Any]] = field(default_factory=list)
    overwrite: bool = False
    written: list[str] = field(default_factory=list)
    rows_read: int = 0


def bucket_of_name(path: str, n: int) -> int | None:
    """The bucket of ``n`` a data file's name says it holds, or None (a file another writer made)."""
    m = _NAME.match(path.rsplit("/", 1)[-1])
    return int(m.group(1)) if m and int(m.group(2)) == n and int(m.group(1)) < n else None


def _keys(t: pa.Table) -> list[str]:
    """Each row's identity: the repr of its values (the same for equal rows of the same schema)."""
    cols = [c.to_pylist() for c in t.columns]
    return [repr(vals) for vals in zip(*cols)] if cols else [""] * t.num_rows


def _ix(idx: list[int]) -> pa.Array:
    return pa.array(idx, pa.int64())


def _buckets(keys: list[str], n: int) -> list[int]:
    return [zlib.crc32(k.encode("utf-8", "surrogatepass")) % n for k in keys]


def _read(home: Home, rel: str, files: Iterable[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    parts = [pq.read_table(home.path(rel, f["path"]), filesystem=home.fs).select(schema.names) for f in files]
    return pa.concat_tables([p.cast(schema) for p in parts]) if parts else schema.empty_table()


def _write(home: Home, rel: str, t: pa.Table, bucket: int, n: int, tag: str, out: ViewCommit) -> None:
    add = home.write_parquet(rel, t, f"b{bucket:05d}n{n}-{tag}", None)
    out.written.append(add["rel"])
    out.adds.append({**add, "path": add.pop("rel")[len(rel) + 1 :]})


def _net(delta: pa.Table, schema: pa.Schema) -> tuple[pa.Table, list[str], list[int]]:
    """``delta`` consolidated: one row per distinct record with a non-zero sum, its key and sum."""
    rows = delta.select(schema.names).cast(schema)
    diffs = delta.column(_DIFF).to_pylist() if _DIFF in delta.column_names else [1] * delta.num_rows
    first: dict[str, int] = {}
    total: dict[str, int] = {}
    for i, k in enumerate(_keys(rows)):
        first.setdefault(k, i)
        total[k] = total.get(k, 0) + (1 if diffs[i] is None else int(diffs[i]))
    kept = [k for k in first if total[k]]
    return rows.take(_ix([first[k] for k in kept])), kept, [total[k] for k in kept]


def buckets_for(rows: int) -> int:
    """How many buckets a table of ``rows`` rows gets: :data:`BUCKETS` at least, about
    :data:`ROWS_PER_BUCKET` rows each (a power of 2).

        >>> buckets_for(10), buckets_for(10**6)
        (32, 128)
    """
    n = BUCKETS
    while n * ROWS_PER_BUCKET < rows:
        n *= 2
    return n


def table_buckets(files: list[dict[str, Any]]) -> int:
    """The number of buckets the table's rows hash to now: what most of its files' names say
    (:data:`BUCKETS` if none does), or more once it has grown 4 times past that many (then
    every file is split again, once)."""
    seen = Counter(int(m.group(2)) for f in files if (m := _NAME.match(f["path"].rsplit("/", 1)[-1])))
    have = seen.most_common(1)[0][0] if seen else BUCKETS
    want = buckets_for(sum(int(f.get("rows") or 0) for f in files))
    return want if want >= 4 * have else have


def apply_delta(
    home: Home, rel: str, schema: pa.Schema, files: list[dict[str, Any]], delta: pa.Table, tag: str
) -> ViewCommit:
    """The commit that applies signed records ``delta`` (the view's columns and ``_diff``) to the
    table at ``rel`` whose live files are ``files``: a bucket that only gains rows gets a file of
    them (until it holds :data:`MAX_FILES`), one that loses some has its files rewritten (and
    every file of another writer's is split back into buckets). :class:`Diverged` if a
    retracted row is not there.

        >>> import tempfile
        >>> from cbp.storage import Home
        >>> h, s = Home(tempfile.mkdtemp()), pa.schema([("v", pa.string())])
        >>> c = apply_delta(h, "v", s, [], pa.table({"v": ["a", "a"], "_diff": [1, 1]}), "c1")
        >>> [a["rows"] for a in c.adds], c.removes
        ([2], [])
    """
    rows, keys, sums = _net(delta, schema)
    out = ViewCommit()
    if not keys:
        return out
    n = table_buckets(files)
    by_bucket: dict[int, list[int]] = {}
    for i, b in enumerate(_buckets(keys, n)):
        by_bucket.setdefault(b, []).append(i)
    held = _split_foreign(home, rel, schema, files, n, out)
    for b in held:
        by_bucket.setdefault(b, [])
    for b, idx in sorted(by_bucket.items()):
        mine = [f for f in files if bucket_of_name(f["path"], n) == b]
        changed = rows.take(_ix(idx)), [keys[i] for i in idx], [sums[i] for i in idx]
        if b not in held and min(changed[2], default=0) > 0 and len(mine) < MAX_FILES:  # rows added only
            _write(home, rel, _changed(schema.empty_table(), *changed), b, n, tag, out)
            continue
        t = pa.concat_tables([_read(home, rel, mine, schema), *held.get(b, [])])
        out.rows_read += t.num_rows
        out.removes += mine
        try:
            t = _changed(t, *changed)
        except Diverged:
            for rel_written in out.written:  # nothing of this commit stays
                home.delete_file(rel_written)
            raise
        if t.num_rows:
            _write(home, rel, t, b, n, tag, out)
    return out


def _split_foreign(
    home: Home, rel: str, schema: pa.Schema, files: list[dict[str, Any]], n: int, out: ViewCommit
) -> dict[int, list[pa.Table]]:
    """The rows of the files no bucket of ``n`` names (another writer's, or of another number of
    buckets) by bucket; the files are removed by ``out``."""
    foreign = [f for f in files if bucket_of_name(f["path"], n) is None]
    if not foreign:
        return {}
    t = _read(home, rel, foreign, schema)
    out.rows_read += t.num_rows
    out.removes += foreign
    fb = pa.array(_buckets(_keys(t), n), pa.int64())
    return {b: [t.filter(pc.equal(fb, b))] for b in set(fb.to_pylist())}


def _changed(t: pa.Table, rows: pa.Table, keys: list[str], sums: list[int]) -> pa.Table:
    """Bucket rows ``t`` with each of ``rows`` (``keys``) added ``sum`` times (removed, if negative)."""
    drop = {k: -s for k, s in zip(keys, sums) if s < 0}
    keep = []
    for k in _keys(t) if drop else []:
        left = drop.get(k, 0)
        keep.append(left <= 0)
        if left > 0:
            drop[k] = left - 1
    if any(v > 0 for v in drop.values()):
        raise Diverged(next(k for k, v in drop.items() if v > 0))
    if drop:
        t = t.filter(pa.array(keep, pa.bool_()))
    more = [i for i, s in enumerate(sums) for _ in range(max(s, 0))]
    return pa.concat_tables([t, rows.take(_ix(more))]) if more else t


def rebuild(home: Home, rel: str, schema: pa.Schema, contents: pa.Table, tag: str) -> ViewCommit:
    """The commit that replaces the table's every file by ``contents`` (the view's columns and
    ``_diff``, each row's multiplicity), a file per bucket."""
    rows, keys, sums = _net(contents, schema)
    out = ViewCommit(overwrite=True)
    n = buckets_for(sum(max(x, 0) for x in sums))
    if any(s < 0 for s in sums):
        raise Diverged(keys[sums.index(min(sums))])
    by_bucket: dict[int, list[int]] = {}
    for i, b in enumerate(_buckets(keys, n)):
        by_bucket.setdefault(b, []).extend([i] * sums[i])
    for b, idx in sorted(by_bucket.items()):
        _write(home, rel, rows.take(_ix(idx)), b, n, tag, out)
    return out
