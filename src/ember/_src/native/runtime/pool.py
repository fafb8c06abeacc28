"""Output buffers of native programs: a shared pool bucketed by power-of-two size, per-output
reuse slots of one executable, and a fast data-address lookup for NumPy arrays.

Outputs handed to the user are read-only views of 64-byte aligned blocks; a block is reused once
no view of it is alive any more (its reference count shows only the owner's own references), so
a steady-state loop ``y = f(x)`` recycles the previous iteration's output instead of allocating.

Large outputs (above :data:`~ember._src.native.pagecolor.COLOR_MIN` bytes) have a page of slack,
and each take puts the output where its page offset is farthest from the call's inputs
(:mod:`ember._src.native.pagecolor`: 4K aliasing).
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src.native.pagecolor import COLOR_MIN, PAGE, far_page_offset

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


def _colored_block(nbytes: int) -> tuple[np.ndarray, int, int]:
    """A fresh uint8 block with a page of slack, so that ``nbytes`` fit at any page offset:
    (raw, 0, its address)."""
    raw = np.empty(nbytes + PAGE, dtype=np.uint8)
    return raw, 0, raw.ctypes.data


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
        return self.array((nbytes,), np.dtype(np.uint8), nbytes)[0]

    def array(self, shape: tuple, dtype: np.dtype, nbytes: int,
              avoid: Sequence[int] = ()) -> tuple[np.ndarray, int]:
        """A writable aligned array of ``shape``/``dtype`` from the pool and its data address; a
        large one (above :data:`COLOR_MIN` bytes) starts at the page offset farthest from the
        addresses in ``avoid`` (the arrays the program reads while it writes this one)."""
        raw, off, addr = self._block(nbytes)
        if self.colored(nbytes):
            off = (far_page_offset(avoid) - addr) & (PAGE - 1)
            addr += off
        return np.ndarray(shape, dtype, raw, off), addr

    def colored(self, nbytes: int) -> bool:
        """Whether blocks for ``nbytes`` have a page of slack (their bucket exceeds :data:`COLOR_MIN`)."""
        return (1 << self.bucket(nbytes)) > COLOR_MIN

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
            entry = _colored_block(1 << b) if (1 << b) > COLOR_MIN else _aligned_block(1 << b)
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
    outside the slot. Outputs above :data:`SLOT_MAX_BYTES` come from the shared :data:`POOL`,
    page-coloured away from the addresses in ``bufs[:n_read]`` (the call's inputs and constants,
    set before the outputs are taken) and the outputs taken before them.
    The caller holds the executable's lock.
    """

    __slots__ = ("specs", "slots", "bufs", "n_read")

    def __init__(self, specs: list[tuple[tuple, np.dtype, int]], bufs: Any = None, n_read: int = 0):
        self.specs = specs
        self.bufs, self.n_read = bufs, n_read
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
            bufs = self.bufs
            arr, addr = POOL.array(shape, dtype, n, bufs[:self.n_read + k] if bufs is not None else ())
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
