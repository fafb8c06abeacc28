"""A pool of 64-byte aligned output buffers bucketed by power-of-two size.

Outputs handed to the user are views of pooled blocks; a block is reused once no view of it is
alive any more (its reference count shows only the pool's own references), so a steady-state
loop ``y = f(x)`` recycles the previous iteration's output instead of allocating.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

ALIGN = 64
MIN_BUCKET = 6  # 64 bytes


class OutputPool:
    def __init__(self, max_per_bucket: int = 16):
        self.max_per_bucket = max_per_bucket
        self._buckets: dict[int, list[tuple[np.ndarray, int, int]]] = {}  # (owner, offset, address)
        self._lock = threading.Lock()
        self.allocations = 0
        self.reuses = 0

    @staticmethod
    def bucket(nbytes: int) -> int:
        return max(MIN_BUCKET, (max(nbytes, 1) - 1).bit_length())

    def take(self, nbytes: int) -> np.ndarray:
        """A writable, 64-byte aligned uint8 array of ``nbytes`` (a view of a pooled block)."""
        raw, off, _ = self._block(nbytes)
        return raw[off:off + nbytes]

    def array(self, shape: tuple, dtype: np.dtype, nbytes: int) -> tuple[np.ndarray, int]:
        """A writable aligned array of ``shape``/``dtype`` from the pool and its data address."""
        raw, off, addr = self._block(nbytes)
        return np.ndarray(shape, dtype, raw, off), addr

    def _block(self, nbytes: int) -> tuple[np.ndarray, int, int]:
        b = self.bucket(nbytes)
        with self._lock:
            blocks = self._buckets.get(b)
            if blocks is None:
                blocks = self._buckets[b] = []
            for entry in blocks:
                raw = entry[0]
                # views keep a reference to the owner; idle: the tuple, `raw`, getrefcount's argument
                if sys.getrefcount(raw) <= 3:
                    self.reuses += 1
                    return entry
            size = 1 << b
            raw = np.empty(size + ALIGN, dtype=np.uint8)
            base = raw.ctypes.data
            off = (-base) % ALIGN
            entry = (raw, off, base + off)
            self.allocations += 1
            if len(blocks) < self.max_per_bucket:
                blocks.append(entry)
            return entry

    def stats(self) -> dict[str, int]:
        with self._lock:
            held = sum(len(v) << k for k, v in self._buckets.items())
            return {"pool_bytes": held, "allocations": self.allocations, "reuses": self.reuses}


POOL = OutputPool()
