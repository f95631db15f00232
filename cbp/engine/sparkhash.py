"""Spark's two string hashes, computed in the driver without a Spark job.

A stage's state partition ``p`` holds the keys whose text ``k`` has ``pmod(hash(k), P) == p``
(Spark's ``hash``: its Murmur3 variant, seed 42, as ``repartition(P, col)`` uses), and its rows are
sorted by ``xxhash64(k)`` (seed 42). The engine's small-epoch path (:mod:`cbp.engine.smallepoch`)
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

from typing import Sequence

import numpy as np
import xxhash

__all__ = ["spark_hash", "spark_xxhash64", "partition_of", "SEED"]

SEED = 42
_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)
#: Keys longer than this are hashed one by one (a padded matrix of all keys would grow with the longest).
_MATRIX_MAX = 256


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    k1 = _rotl(k1 * _C1, 15) * _C2
    h1 = _rotl(h1 ^ k1, 13)
    return h1 * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1: np.ndarray, length: np.ndarray) -> np.ndarray:
    h1 = h1 ^ length.astype(np.uint32)
    h1 ^= h1 >> np.uint32(16)
    h1 *= np.uint32(0x85EBCA6B)
    h1 ^= h1 >> np.uint32(13)
    h1 *= np.uint32(0xC2B2AE35)
    h1 ^= h1 >> np.uint32(16)
    return h1


def _murmur3(data: list[bytes]) -> np.ndarray:
    """Spark's ``Murmur3_x86_32.hashUnsafeBytes(b, 42)`` of each byte string, as uint32."""
    n = len(data)
    lengths = np.fromiter((len(b) for b in data), dtype=np.int64, count=n)
    width = (int(lengths.max()) + 3) // 4 * 4 if n else 0
    m = np.zeros((n, max(width, 4)), dtype=np.uint8)
    for i, b in enumerate(data):
        m[i, : len(b)] = np.frombuffer(b, dtype=np.uint8)
    words = m.view("<u4")  # little-endian 4-byte blocks, as Spark reads them on x86 and ARM
    aligned = lengths // 4
    h1 = np.full(n, SEED, dtype=np.uint32)
    with np.errstate(over="ignore"):
        for j in range(width // 4):
            live = aligned > j
            if not live.any():
                break
            h1 = np.where(live, _mix(h1, words[:, j]), h1)
        for t in range(3):  # the tail: each byte sign-extended and mixed as a block
            pos = aligned * 4 + t
            live = pos < lengths
            if not live.any():
                break
            byte = m[np.arange(n), np.minimum(pos, m.shape[1] - 1)].astype(np.int8).astype(np.int32).astype(np.uint32)
            h1 = np.where(live, _mix(h1, byte), h1)
        return _fmix(h1, lengths)


def spark_hash(keys: Sequence[str]) -> np.ndarray:
    """Spark SQL's ``hash(k)`` (Murmur3, seed 42) of each string, as int32."""
    data = [k.encode("utf-8") for k in keys]
    out = np.empty(len(data), dtype=np.uint32)
    short = [i for i, b in enumerate(data) if len(b) <= _MATRIX_MAX]
    if short:
        out[short] = _murmur3([data[i] for i in short])
    for i, b in enumerate(data):
        if len(b) > _MATRIX_MAX:
            out[i] = _murmur3([b])[0]
    return out.view(np.int32)


def partition_of(keys: Sequence[str], partitions: int) -> np.ndarray:
    """``pmod(hash(k), partitions)``: the partition ``repartition(partitions, k)`` sends each key to."""
    return np.mod(spark_hash(keys).astype(np.int64), partitions)


def spark_xxhash64(keys: Sequence[str]) -> np.ndarray:
    """Spark SQL's ``xxhash64(k)`` (seed 42) of each string, as int64."""
    return np.array([xxhash.xxh64_intdigest(k.encode("utf-8"), SEED) for k in keys], dtype=np.uint64).view(np.int64)
