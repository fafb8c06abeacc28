"""The device buffer pool: buffers in power-of-two size classes, reused across calls; one logic for
both GPU runtimes (:class:`WebGPUPool` here, ``CUDAPool`` in :mod:`.cuda_runtime`), which only say
how a buffer is created, destroyed and keyed.

A buffer a call no longer needs goes back to its class's free list; a buffer a device array holds
comes back when the array dies (its :class:`~.webgpu.WebGPUBuffer` handle's finalizer queues it,
without a lock, so a finalizer run by the garbage collector inside a pool operation cannot
deadlock; the queue is drained at the next pool operation). Figures follow JAX's
``Device.memory_stats()`` keys where they fit.

Out of memory: when a new buffer would pass the limit (``$EMBER_GPU_MEMORY_LIMIT`` bytes or
:meth:`Pool.set_limit`), or the device refuses to create one, the pool first frees every pooled
buffer and tries again; if that fails too it raises :class:`DeviceOutOfMemory` naming the device,
the request and what is in use.
"""

from __future__ import annotations

import collections
import os
from typing import Any

LIMIT_ENV = "EMBER_GPU_MEMORY_LIMIT"
MIN_CLASS = 256  # bytes: the smallest size class


class DeviceOutOfMemory(MemoryError):
    """A device buffer could not be allocated, even after the pool was emptied."""


def size_class(nbytes: int) -> int:
    """The pool's size class of a request: the next power of two, at least :data:`MIN_CLASS`."""
    return max(MIN_CLASS, 1 << (max(nbytes, 4) - 1).bit_length())


class Pool:
    """Buffers of one device by (size class, kind); ``name`` names the device in messages. A
    runtime's subclass creates (:meth:`_new`), destroys (:meth:`_destroy`) and keys (:meth:`_key`)
    its buffers; the size classes, reuse, limit and out-of-memory handling are here."""

    def __init__(self, name: str):
        self.name = name
        self.free: dict[tuple[int, int], list] = collections.defaultdict(list)
        self.pending: collections.deque = collections.deque()  # buffers finalizers gave back
        raw = os.environ.get(LIMIT_ENV)
        self.limit: int | None = int(raw) if raw else None
        self.in_use = self.peak = self.pooled = 0
        self.num_allocs = self.reused = self.largest = 0

    def set_limit(self, nbytes: int | None) -> None:
        """Cap the bytes the pool holds (in use plus pooled); None: no cap but the device's."""
        self.limit = nbytes

    def _new(self, size: int, kind: int) -> Any:
        """A new device buffer of ``size`` bytes; raises where the device refuses."""
        raise NotImplementedError

    def _destroy(self, buf: Any) -> None:
        """Free a buffer's device memory."""
        raise NotImplementedError

    def _key(self, buf: Any) -> tuple[int, int]:
        """A buffer's (size class, kind)."""
        raise NotImplementedError

    def round(self, nbytes: int) -> int:
        """The bytes a request of ``nbytes`` takes (its size class)."""
        return size_class(nbytes)

    def take(self, nbytes: int, kind: int = 0) -> Any:
        """A buffer of at least ``nbytes`` and of ``kind`` (a runtime's buffer usage), from the
        pool where one of its size class is free."""
        self.drain()
        size = self.round(nbytes)
        usage = kind
        lst = self.free[(size, usage)]
        if lst:
            buf = lst.pop()
            self.pooled -= size
            self.reused += 1
        else:
            buf = self._create(size, usage)
            self.num_allocs += 1
            self.largest = max(self.largest, size)
        self.in_use += size
        self.peak = max(self.peak, self.in_use)
        return buf

    def _create(self, size: int, usage: int) -> Any:
        if self.limit is not None and self.in_use + self.pooled + size > self.limit:
            self.clear()
            if self.in_use + size > self.limit:
                raise self._oom(size, f"the limit is {self.limit} bytes (${LIMIT_ENV})")
        try:
            return self._new(size, usage)
        except Exception as first:  # (wgpu raises its GPUError subclasses synchronously)
            self.clear()
            try:
                return self._new(size, usage)
            except Exception:
                raise self._oom(size, f"the device refused: {str(first).strip().splitlines()[-1]}") from None

    def _oom(self, size: int, why: str) -> DeviceOutOfMemory:
        return DeviceOutOfMemory(f"{self.name}: out of memory allocating {size} bytes ({self.in_use} bytes "
                                 "in use by live arrays and running calls; the pool was emptied first): "
                                 f"{why}. "
                                 "Free device arrays (del, .delete()) or move them to the host with "
                                 "ember.device_get")

    def release(self, buf: Any) -> None:
        """Return a buffer to its free list (the caller holds the runtime's lock)."""
        key = self._key(buf)
        self.free[key].append(buf)
        self.in_use -= key[0]
        self.pooled += key[0]

    def give_back(self, buf: Any) -> None:
        """Queue a buffer for :meth:`release` (a finalizer, any thread, no lock needed)."""
        self.pending.append(buf)

    def drain(self) -> None:
        """Release the buffers finalizers queued."""
        while self.pending:
            try:
                buf = self.pending.popleft()
            except IndexError:
                return
            self.release(buf)

    def clear(self) -> None:
        """Destroy every pooled (free) buffer."""
        self.drain()
        for lst in self.free.values():
            for b in lst:
                self._destroy(b)
        self.free.clear()
        self.pooled = 0

    def stats(self) -> dict[str, int]:
        """``bytes_in_use`` (live arrays and running calls), ``peak_bytes_in_use``, ``pool_bytes``
        (free buffers kept for reuse), ``bytes_reserved`` (both), ``num_allocs`` (buffers created),
        ``reused`` (requests served from the pool), ``largest_alloc_size``, ``bytes_limit`` (when set)."""
        self.drain()
        out = {"bytes_in_use": self.in_use, "peak_bytes_in_use": self.peak, "pool_bytes": self.pooled,
               "bytes_reserved": self.in_use + self.pooled, "num_allocs": self.num_allocs,
               "reused": self.reused, "largest_alloc_size": self.largest}
        if self.limit is not None:
            out["bytes_limit"] = self.limit
        return out


class WebGPUPool(Pool):
    """Storage and staging buffers of one WebGPU device (keyed by size and usage)."""

    def __init__(self, device: Any, wgpu: Any, name: str = "webgpu:0"):
        super().__init__(name)
        self.device, self.wgpu = device, wgpu

    def acquire(self, nbytes: int, staging: bool = False) -> Any:
        """A buffer of at least ``nbytes`` (a storage buffer, or a mappable staging buffer)."""
        bu = self.wgpu.BufferUsage
        usage = int((bu.MAP_READ | bu.COPY_DST) if staging else (bu.STORAGE | bu.COPY_SRC | bu.COPY_DST))
        return self.take(nbytes, usage)

    def _new(self, size: int, kind: int) -> Any:
        return self.device.create_buffer(size=size, usage=kind)

    def _destroy(self, buf: Any) -> None:
        buf.destroy()

    def _key(self, buf: Any) -> tuple[int, int]:
        return buf.size, int(buf.usage)
