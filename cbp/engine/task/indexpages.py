"""The base of a partition's index (:mod:`cbp.engine.task.partindex`): in memory, or read page by page.

A whole index file is sorted by hash and written in row groups of :data:`PAGE` entries (a
*page*); its footer's statistics (the smallest and largest hash of each page) are the sparse top
level. A worker that opens the file reads the footer only; a lookup of k hashes reads the pages
that may hold them (at most about k), and a range lookup (the rows of one key of a keyed stage)
the pages of the range. Pages read are kept in the worker's :class:`PageCache`, one LRU bounded
in bytes for every partition the worker serves (``state_index_mb``, ``CBP_STATE_INDEX_MB``,
default :data:`INDEX_MB`), so an index costs a worker what its tasks touched, up to that bound,
not the partition's live keys. Files written before pages (one row group of up to 1M entries,
no ``cbp.counts``) are read the same way, with larger pages.

    >>> base = ArrayBase(np.array([1, 4, 4, 9]), np.array([0, 0, 1, 0], np.int32), np.zeros(4, np.int32))
    >>> [a.tolist() for a in base.lookup(np.array([4, 5]))]
    [[1, 2], [4, 4], [0, 1], [0, 0]]
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ... import settings
from ...storage import Home

__all__ = [
    "PAGE",
    "INDEX_MB",
    "CACHE",
    "ArrayBase",
    "PagedBase",
    "PageCache",
    "index_budget",
    "write_whole",
    "matches",
    "in_ranges",
]

#: Entries per page (row group) of a whole index file: 1 MiB of hashes. A keyed-row lookup of
#: 10 rows reads at most 10 pages; a file of 25M entries has 382 pages (a footer of ~100 KB).
PAGE = 65536
#: Default bytes (MiB) of index a Spark Python worker keeps (pages read, plus the entries of
#: the newest epochs not yet written whole), for every partition it serves together.
INDEX_MB = 1024.0

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray]
_I64 = np.empty(0, np.int64)
_I32 = np.empty(0, np.int32)


def matches(sorted_h: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """Positions in ``sorted_h`` of every element equal to one of ``hashes`` (sorted)."""
    return in_ranges(sorted_h, hashes, hashes)


def in_ranges(sorted_h: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Positions in ``sorted_h`` of every element ``x`` with ``lo[i] <= x <= hi[i]`` for some ``i``
    (the ranges sorted and disjoint).

        >>> in_ranges(np.array([1, 3, 5, 7, 9]), np.array([2, 7]), np.array([5, 8])).tolist()
        [1, 2, 3]
    """
    lo = np.searchsorted(sorted_h, lo, side="left")
    hi = np.searchsorted(sorted_h, hi, side="right")
    lens = hi - lo
    if not lens.any():
        return np.empty(0, np.int64)
    out: np.ndarray = np.repeat(lo, lens) + (np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens))
    return out


class PageCache:
    """Index pages a worker keeps (LRU, bounded in bytes together with ``held``: the bytes the
    worker's kept indexes hold in memory besides their pages)."""

    def __init__(self, budget: int) -> None:
        self.budget, self.used, self.held = budget, 0, 0
        self.reads = 0  # pages read from files (not found here)
        self.pages: OrderedDict[str, Arrays] = OrderedDict()

    def get(self, key: str) -> Arrays | None:
        hit = self.pages.get(key)
        if hit is not None:
            self.pages.move_to_end(key)
        return hit

    def put(self, key: str, page: Arrays) -> None:
        size = sum(a.nbytes for a in page)
        if key in self.pages or size + self.held > self.budget:
            return
        self.pages[key] = page
        self.used += size
        self.trim()

    def trim(self) -> None:
        while self.pages and self.used + self.held > self.budget:
            _, old = self.pages.popitem(last=False)
            self.used -= sum(a.nbytes for a in old)


#: The worker's page cache (one per Python process).
CACHE = PageCache(int(INDEX_MB * 2**20))
_CACHE = CACHE


def index_budget(budget_mb: float | None = None) -> int:
    """Set the worker's index budget (bytes) to ``budget_mb`` (a pipeline's ``state_index_mb``),
    else ``CBP_STATE_INDEX_MB``, else :data:`INDEX_MB`; pages beyond it are dropped, oldest first."""
    if budget_mb is None:
        env = settings.current().state_index_mb
        budget_mb = INDEX_MB if env is None else env
    CACHE.budget = int(budget_mb * 2**20)
    CACHE.trim()
    return CACHE.budget


class ArrayBase:
    """A base held in memory: sorted, aligned arrays (an index just built, or read from deltas
    of the earlier releases, which renumbered file ids)."""

    def __init__(self, h: np.ndarray, f: np.ndarray, g: np.ndarray) -> None:
        self.h, self.f, self.g = h, f, g

    @property
    def size(self) -> int:
        return int(self.h.size)

    @property
    def nbytes(self) -> int:
        return int(self.h.nbytes + self.f.nbytes + self.g.nbytes)

    def lookup(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(position, hash, file id, row group) of every entry whose hash is in ``hashes`` (sorted)."""
        pos = matches(self.h, hashes)
        return pos, self.h[pos], self.f[pos], self.g[pos]

    def between(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position, hash) of every entry in one of the ranges ``[lo[i], hi[i]]`` (sorted, disjoint)."""
        pos = in_ranges(self.h, lo, hi)
        return pos, self.h[pos]

    def f_at(self, pos: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.f[pos]
        return out

    def pages(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        for a in range(0, self.size, PAGE):
            yield a, self.h[a : a + PAGE], self.f[a : a + PAGE], self.g[a : a + PAGE]

    def arrays(self) -> Arrays:
        return self.h, self.f, self.g

    def counts(self, files: int) -> np.ndarray:
        return np.bincount(self.f, minlength=files)


class PagedBase:
    """A whole index file read page by page through the worker's :class:`PageCache` (see the module)."""

    def __init__(
        self,
        home: Home,
        rel: str,
        starts: np.ndarray,
        mins: np.ndarray,
        maxs: np.ndarray,
        counts: np.ndarray | None,
        pf: pq.ParquetFile | None = None,
    ) -> None:
        self.home, self.rel = home, rel
        self.starts, self.mins, self.maxs = starts, mins, maxs  # per page: first position; hashes
        self._counts, self._pf = counts, pf
        self.key = f"{home.location}|{rel}"

    @classmethod
    def open(cls, home: Home, rel: str, pf: pq.ParquetFile) -> PagedBase | None:
        """The file's pages from its footer; None when a page has no statistics (read it whole then)."""
        md = pf.metadata
        n = md.num_row_groups
        col = pf.schema_arrow.get_field_index("h")
        mins, maxs, rows = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        for i in range(n):
            rg = md.row_group(i)
            st = rg.column(col).statistics
            rows[i] = rg.num_rows
            if rg.num_rows and (st is None or not st.has_min_max):
                return None
            mins[i], maxs[i] = (st.min, st.max) if rg.num_rows else (np.iinfo(np.int64).max, np.iinfo(np.int64).max)
        meta = pf.schema_arrow.metadata or {}
        counts = np.array(json.loads(meta[b"cbp.counts"]), np.int64) if b"cbp.counts" in meta else None
        return cls(home, rel, np.concatenate([[0], np.cumsum(rows)]), mins, maxs, counts, pf)

    @property
    def size(self) -> int:
        return int(self.starts[-1])

    @property
    def nbytes(self) -> int:
        return int(self.starts.nbytes + self.mins.nbytes + self.maxs.nbytes)

    def _file(self) -> pq.ParquetFile:
        if self._pf is None:
            self._pf = pq.ParquetFile(self.home.fs.open_input_file(self.home.path(self.rel)))
        return self._pf

    def page(self, i: int, keep: bool = True) -> Arrays:
        """Page ``i``'s (hashes, file ids, row groups), from the cache or the file (then kept, with ``keep``)."""
        key = f"{self.key}|{i}"
        hit = _CACHE.get(key)
        if hit is not None:
            return hit
        t = self._file().read_row_group(i, columns=["h", "f", "g"])
        _CACHE.reads += 1
        page = (
            t["h"].to_numpy(),
            t["f"].to_numpy().astype(np.int32, copy=False),
            t["g"].to_numpy().astype(np.int32, copy=False),
        )
        if keep:
            _CACHE.put(key, page)
        return page

    def _spans(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The pages that may hold a hash in any of the ranges ``[lo, hi]`` (sorted)."""
        a = np.searchsorted(self.maxs, lo, side="left")
        b = np.searchsorted(self.mins, hi, side="right")
        ok = b > a
        if not ok.any():
            return _I64
        a, b = a[ok], b[ok]
        lens = b - a
        return np.unique(np.repeat(a, lens) + (np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)))

    def lookup(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(position, hash, file id, row group) of every entry whose hash is in ``hashes`` (sorted)."""
        parts = []
        for i in self._spans(hashes, hashes).tolist():
            h, f, g = self.page(i)
            a, b = (
                (np.searchsorted(hashes, [h[0], h[-1]], side="left")[0], np.searchsorted(hashes, h[-1], side="right"))
                if h.size
                else (0, 0)
            )
            pos = matches(h, hashes[a:b]) if b > a else _I64
            if pos.size:
                parts.append((pos + self.starts[i], h[pos], f[pos], g[pos]))
        if not parts:
            return _I64, _I64, _I32, _I32
        return tuple(np.concatenate(c) for c in zip(*parts))  # type: ignore[return-value]

    def between(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position, hash) of every entry in one of the ranges ``[lo[i], hi[i]]`` (sorted, disjoint)."""
        pos, hs = [], []
        for i in self._spans(lo, hi).tolist():
            h = self.page(i)[0]
            at = in_ranges(h, lo, hi)
            pos.append(at + self.starts[i])
            hs.append(h[at])
        return (np.concatenate(pos), np.concatenate(hs)) if pos else (_I64, _I64)

    def f_at(self, pos: np.ndarray) -> np.ndarray:
        out = np.empty(pos.size, np.int32)
        page = np.searchsorted(self.starts, pos, side="right") - 1
        for i in np.unique(page).tolist():
            sel = page == i
            out[sel] = self.page(i)[1][pos[sel] - self.starts[i]]
        return out

    def pages(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Every page in order (a scan: pages not already cached are not kept)."""
        for i in range(self.starts.size - 1):
            yield (int(self.starts[i]), *self.page(i, keep=False))

    def arrays(self) -> Arrays:
        parts = list(self.pages())
        if not parts:
            return _I64, _I32, _I32
        return tuple(np.concatenate([p[k] for p in parts]) for k in (1, 2, 3))  # type: ignore[return-value]

    def counts(self, files: int) -> np.ndarray:
        """Entries per file id: from the footer (``cbp.counts``), else counted once, page by page."""
        if self._counts is None:
            c = np.zeros(files, np.int64)
            pf = self._file()
            for i in range(self.starts.size - 1):
                f = pf.read_row_group(i, columns=["f"])["f"].to_numpy()
                c += np.bincount(f, minlength=files)[:files]
            self._counts = c
        out = np.zeros(files, np.int64)
        out[: min(files, self._counts.size)] = self._counts[:files]
        return out


def write_whole(home: Home, rel: str, chunks: Iterator[Arrays], files: list[str], counts: np.ndarray) -> PagedBase:
    """Write a whole index file, page by page, from ``chunks`` (live entries in hash order, file
    ids already those of ``files``); its pages go into the worker's cache as they are written."""
    schema = pa.schema(
        [("h", pa.int64()), ("f", pa.int32()), ("g", pa.int32())],
        metadata={
            "cbp.files": json.dumps(files),
            "cbp.hash": "spark-xxhash64",
            "cbp.counts": json.dumps(counts.tolist()),
            "cbp.format": "paged",
            "cbp.page": str(PAGE),
        },
    )
    path = home.path(rel)
    home.make_parent(path)
    starts: list[int] = [0]
    mins: list[int] = []
    maxs: list[int] = []
    held: list[Arrays] = []
    n_held = 0
    base = PagedBase(home, rel, np.zeros(1, np.int64), _I64, _I64, counts)
    with pq.ParquetWriter(
        path, schema, filesystem=home.fs, compression={"h": "none", "f": "zstd", "g": "zstd"}, use_dictionary=False
    ) as w:

        def emit(h: np.ndarray, f: np.ndarray, g: np.ndarray) -> None:
            w.write_table(
                pa.table([pa.array(h, pa.int64()), pa.array(f, pa.int32()), pa.array(g, pa.int32())], schema=schema),
                row_group_size=PAGE,
            )
            _CACHE.put(f"{base.key}|{len(mins)}", (h.copy(), f.astype(np.int32), g.astype(np.int32)))
            starts.append(starts[-1] + h.size)
            mins.append(int(h[0]))
            maxs.append(int(h[-1]))

        for chunk in chunks:
            if not chunk[0].size:
                continue
            held.append(chunk)
            n_held += chunk[0].size
            while n_held >= PAGE:
                h, f, g = (np.concatenate([c[k] for c in held]) for k in range(3))
                emit(h[:PAGE], f[:PAGE], g[:PAGE])
                held, n_held = [(h[PAGE:], f[PAGE:], g[PAGE:])], h.size - PAGE
        if n_held:
            emit(*(np.concatenate([c[k] for c in held]) for k in range(3)))
        if not mins:  # an empty index: one empty row group, as before
            w.write_table(schema.empty_table())
    base.starts, base.mins, base.maxs = np.array(starts, np.int64), np.array(mins, np.int64), np.array(maxs, np.int64)
    return base
