"""Output buffers of native programs: a shared pool bucketed by power-of-two size, per-output
reuse slots of one executable, and a fast data-address lookup for NumPy arrays.

Outputs handed to the user are read-only views of 64-byte aligned blocks; a block is reused once
no view of it is alive any more (its reference count shows only the owner's own references), so
a steady-state loop ``y = f(x)`` recycles the previous iteration's output instead of allocating.
"""

from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np

ALIGN = 64
MIN_BUCKET = 6  # 64 bytes
SLOT_MAX_BYTES = 64 * 1024  # outputs up to this size are recycled per executable (OutputSlots)
SLOT_DEPTH = 3  # blocks kept per output of one executable

_getrefcount = sys.getrefcount


def _aligned_block(nbytes: int) -> tuple[np.ndarray, int, int]:
    """A fresh uint8 block with room for ``nbytes`` at a 64-byte aligned offset: (raw, offset, address)."""
    raw = np.empty(max(nbytes, 1) + ALIGN, dtype=np.uint8)
    base = raw.ctypes.data
    off = (-base) % ALIGN
    return raw, off, base + off


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
                # views keep a reference to the owner; idle: the tuple and getrefcount's argument
                if _getrefcount(entry[0]) <= 2:
                    self.reuses += 1
                    return entry
            entry = _aligned_block(1 << b)
            self.allocations += 1
            if len(blocks) < self.max_per_bucket:
                blocks.append(entry)
            return entry

    def clear(self) -> None:
        """Forget every pooled block (views handed out stay valid: they own their block)."""
        with self._lock:
            self._buckets.clear()

    def stats(self) -> dict[str, int]:
        with self._lock:
            held = sum(len(v) << k for k, v in self._buckets.items())
            return {"pool_bytes": held, "allocations": self.allocations, "reuses": self.reuses}


POOL = OutputPool()


class OutputSlots:
    """Recycled output arrays of one executable: for each output buffer up to ``SLOT_DEPTH``
    read-only arrays of its exact shape and dtype. An array is handed out again (the same object,
    no allocation, no view construction) once neither it nor any view of its block is referenced
    outside the slot. Outputs above :data:`SLOT_MAX_BYTES` come from the shared :data:`POOL`.
    The caller holds the executable's lock.
    """

    __slots__ = ("specs", "slots")

    def __init__(self, specs: list[tuple[tuple, np.dtype, int]]):
        self.specs = specs
        self.slots: list[list | None] = [[] if n <= SLOT_MAX_BYTES else None for _, _, n in specs]

    def take(self) -> list[tuple[np.ndarray, int]]:
        """One (read-only array, data address) per output buffer, each free for the program to write."""
        out = []
        for k, slot in enumerate(self.slots):
            if slot is not None:
                for ent in slot:
                    # idle: referenced by `ent` only (+1 argument); its block by `ent` and arr.base (+1)
                    if _getrefcount(ent[0]) == 2 and _getrefcount(ent[1]) == 3:
                        out.append((ent[0], ent[2]))
                        break
                else:
                    out.append(self.take_new(k))
            else:
                out.append(self.take_new(k))
        return out

    def take_new(self, k: int) -> tuple[np.ndarray, int]:
        """A buffer for output ``k`` when none of its recycled ones is idle (kept for reuse while
        the slot has room; outputs above the slot size come from the shared pool)."""
        shape, dtype, n = self.specs[k]
        slot = self.slots[k]
        if slot is None:
            arr, addr = POOL.array(shape, dtype, n)
            arr.flags.writeable = False
            return arr, addr
        raw, off, addr = _aligned_block(n)
        arr = np.ndarray(shape, dtype, raw, off)
        arr.flags.writeable = False
        if len(slot) < SLOT_DEPTH:
            slot.append((arr, raw, addr))
        return arr, addr


def _probe_data_offset() -> int | None:
    """Offset of the data pointer inside a NumPy array object (PyArrayObject.data follows the
    object header), verified on probe arrays; None when the layout does not match."""
    off = 2 * ctypes.sizeof(ctypes.c_void_p)
    try:
        for probe in (np.zeros(3), np.zeros((2, 2), np.int8)[1:], np.empty(0, np.float32)):
            if ctypes.c_void_p.from_address(id(probe) + off).value != probe.ctypes.data:
                return None
    except Exception:  # noqa: BLE001 - any surprise: use the portable path
        return None
    return off


_DATA_OFFSET = _probe_data_offset()


def data_address(a: np.ndarray) -> int:
    """The address of ``a``'s first element (``a.ctypes.data``, about 5x faster where the NumPy
    object layout was verified at import)."""
    if _DATA_OFFSET is not None and type(a) is np.ndarray:
        return ctypes.c_void_p.from_address(id(a) + _DATA_OFFSET).value or 0
    return a.ctypes.data
