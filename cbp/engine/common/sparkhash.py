"""Spark's two string hashes, computed in the driver without a Spark job.

A stage's state partition ``p`` holds the keys whose text ``k`` has ``pmod(hash(k), P) == p``
(Spark's ``hash``: its Murmur3 variant, seed 42, as ``repartition(P, col)`` uses), and its rows are
sorted by ``xxhash64(k)`` (seed 42). The engine's small-epoch path (:mod:`cbp.engine.driver.smallepoch`)
routes a small increment in the driver, so it must give exactly Spark's values:
``tests/test_sparkhash.py`` compares them with Spark's own on random Unicode strings.

Spark's Murmur3 of a string is not the reference Murmur3 x86_32: its trailing 1-3 bytes are
each mixed as a whole (sign-extended) block (``Murmur3_x86_32.hashUnsafeBytes``, kept by Spark
for compatibility). Its XXH64 is the reference algorithm (the ``xxhash`` library's).

    >>> spark_hash(["a", "é", ""]).tolist(), partition_of(["a", "é", ""], 4).tolist()
    ([1485273170, 2119106806, 142593372], [2, 2, 0])
    >>> spark_xxhash64(["a"]).tolist()
    [-8582455328737087284]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import xxhash

__all__ = ["spark_hash", "spark_xxhash64", "partition_of", "partition_probes", "SEED"]

SEED = 42
_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    out: np.ndarray = (x << np.uint32(r)) | (x >> np.uint32(32 - r))
    return out


def _mix(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    k1 = _rotl(k1 * _C1, 15) * _C2
    h1 = _rotl(h1 ^ k1, 13)
    out: np.ndarray = h1 * np.uint32(5) + np.uint32(0xE6546B64)
    return out


def _fmix(h1: np.ndarray, length: np.ndarray) -> np.ndarray:
    h: np.ndarray = h1 ^ length.astype(np.uint32)
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    out: np.ndarray = h ^ (h >> np.uint32(16))
    return out


def _utf8(keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 bytes of all keys, one after the other, and the offset of each key (plus the end)."""
    arr = keys if isinstance(keys, pa.Array) else pa.array(keys, pa.large_string())
    arr = arr.cast(pa.large_string())
    if arr.offset or not len(arr):
        arr = pa.concat_arrays([arr])  # its buffers start at its first key
    offsets = np.frombuffer(arr.buffers()[1], np.int64, count=len(arr) + 1) if len(arr) else np.zeros(1, np.int64)
    data = arr.buffers()[2]
    return (np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)), offsets


def _murmur3(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Spark's ``Murmur3_x86_32.hashUnsafeBytes(b, 42)`` of each byte string (``data[offsets[i]:offsets[i + 1]]``),
    as uint32: one numpy pass per 4-byte block position over the keys that are that long."""
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    n = starts.size
    padded = np.concatenate([data, np.zeros(4, np.uint8)])  # a block read never runs past the end

    def block(sel: np.ndarray, at: np.ndarray) -> np.ndarray:
        b = [padded[at + t].astype(np.uint32) for t in range(4)]
        out: np.ndarray = (
            b[0] | (b[1] << np.uint32(8)) | (b[2] << np.uint32(16)) | (b[3] << np.uint32(24))
        )  # little-endian, as Spark reads
        return out

    aligned = lengths // 4
    h1 = np.full(n, SEED, dtype=np.uint32)
    with np.errstate(over="ignore"):
        j = 0
        sel = np.flatnonzero(aligned > 0)
        while sel.size:
            h1[sel] = _mix(h1[sel], block(sel, starts[sel] + 4 * j))
            j += 1
            sel = sel[aligned[sel] > j]
        for t in range(3):  # the tail: each byte sign-extended and mixed as a block
            pos = aligned * 4 + t
            sel = np.flatnonzero(pos < lengths)
            if not sel.size:
                break
            byte = padded[starts[sel] + pos[sel]].astype(np.int8).astype(np.int32).astype(np.uint32)
            h1[sel] = _mix(h1[sel], byte)
        return _fmix(h1, lengths)


def spark_hash(keys: Sequence[str]) -> np.ndarray:
    """Spark SQL's ``hash(k)`` (Murmur3, seed 42) of each string, as int32."""
    return _murmur3(*_utf8(keys)).view(np.int32)


def partition_of(keys: Sequence[str], partitions: int) -> np.ndarray:
    """``pmod(hash(k), partitions)``: the partition ``repartition(partitions, k)`` sends each key to."""
    return np.mod(spark_hash(keys).astype(np.int64), partitions)


@functools.lru_cache(maxsize=64)
def partition_probes(n: int) -> tuple[str, ...]:
    """For each of ``n`` partitions a string that ``repartition(n, col)`` puts in it: where the
    copies of a broadcast or multicast record are sent (:mod:`cbp.engine.task.routing`).

        >>> [int(p) for p in partition_of(list(partition_probes(4)), 4)]
        [0, 1, 2, 3]
    """
    found: dict[int, str] = {}
    size = 16 * n
    while len(found) < n:
        cands = [f"cbp-probe-{i}" for i in range(size)]
        for s, p in zip(cands, partition_of(cands, n).tolist()):
            found.setdefault(int(p), s)
        size *= 4
    return tuple(found[p] for p in range(n))


def spark_xxhash64(keys: Sequence[str]) -> np.ndarray:
    """Spark SQL's ``xxhash64(k)`` (seed 42) of each string, as int64."""
    return np.array([xxhash.xxh64_intdigest(k.encode("utf-8"), SEED) for k in keys], dtype=np.uint64).view(np.int64)
