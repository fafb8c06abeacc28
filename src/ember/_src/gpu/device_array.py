"""Device-resident arrays: an ember :class:`~ember._src.array.Array` whose buffer lives on a GPU.

A :class:`DeviceArray` holds a runtime's buffer handle (:class:`~.webgpu.WebGPUBuffer`,
:class:`~.cuda_runtime.CUDABuffer`), never a host copy until one is asked for: ``np.asarray(x)``,
``x.value``, printing, ``float(x)``, ``ember.device_get`` copy the buffer back (once; the copy is
kept, the array being immutable). The handle's finalizer returns the buffer to the device's pool
when the last array holding it dies (or at :meth:`DeviceArray.delete`).

It is a subclass of ``Array``, so the exact-type checks of the eager and ``jit`` fast paths (and
the C dispatcher) miss it and the general paths route it: ``core.device_eager_hook`` and
``jit.device_call_hook``, both set by :mod:`.residency`.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from ember._src import array, devices
from ember._src.array import Array, aligned_copy
from ember._src.core import ShapedArray
from ember._src.devices import Device
from ember.errors import DeletedArrayError


class BufferHandle(Protocol):
    """What a runtime's buffer handle provides."""

    device: Device

    def download(self, shape: tuple, dtype: np.dtype) -> np.ndarray: ...
    def sync(self) -> None: ...


class DeviceArray(Array):
    """An immutable array in a GPU buffer (``x.device`` says which)."""

    __slots__ = ("_buf", "_host")
    _device_resident = True

    def __init__(self, buf: BufferHandle, aval: ShapedArray):
        self._value = None  # no host buffer: Array's statistics count host bytes only
        self._weak = aval.weak_type
        self._nbytes = 0
        self._aval = aval
        self._buf: BufferHandle | None = buf
        self._host: np.ndarray | None = None
        if array._stats.trackers:  # a check_leaks block is open: it sees device arrays too
            array._record_tracked(self, aval)

    def __del__(self) -> None:  # the handle's own finalizer returns the buffer
        pass

    @property
    def handle(self) -> BufferHandle:
        """The runtime's buffer handle (DeletedArrayError after :meth:`delete`)."""
        b = self._buf
        if b is None:
            raise DeletedArrayError("device array was deleted (delete() or a `with` block released it)")
        return b

    @property
    def value(self) -> np.ndarray:
        """The values on the host: copied back from the device on first use."""
        h = self._host
        if h is None:
            a = self._aval
            h = self._host = aligned_copy(self.handle.download(a.shape, a.dtype), owned=True)
        return h

    @property
    def aval(self) -> ShapedArray:
        if self._buf is None:
            raise DeletedArrayError("device array was deleted (delete() or a `with` block released it)")
        return self._aval

    shape = property(lambda self: self._aval.shape)
    dtype = property(lambda self: self._aval.dtype)
    ndim = property(lambda self: len(self._aval.shape))
    size = property(lambda self: math.prod(self._aval.shape))
    nbytes = property(lambda self: math.prod(self._aval.shape) * self._aval.dtype.itemsize)
    itemsize = property(lambda self: self._aval.dtype.itemsize)

    @property
    def device(self) -> Device:  # type: ignore[override]
        """The :class:`~ember._src.devices.Device` the buffer lives on."""
        return self.handle.device

    def devices(self) -> set[Device]:
        """``{self.device}`` (JAX's ``Array.devices()``)."""
        return {self.device}

    def to_device(self, device: Any, /, *, stream: Any = None) -> Array:
        """This array on ``device`` (``"cpu"``: a host copy)."""
        dev = devices.parse_device(device)
        if dev is None or dev == self.device:
            return self
        if dev.platform == "cpu":
            return Array(self.value, self._weak)
        return devices.platform(dev).put(self.value, self._weak)

    def block_until_ready(self) -> DeviceArray:
        """Wait for the device work that computes this array."""
        self.handle.sync()
        return self

    def is_deleted(self) -> bool:
        return self._buf is None

    def delete(self) -> None:
        """Drop the buffer now (back to the pool once no other array holds it)."""
        self._buf = None
        self._host = None

    def __repr__(self) -> str:
        if self._buf is None:
            return "Array(<deleted>)"
        body = np.array2string(self.value, separator=", ", prefix="Array(")
        return f"Array({body}, dtype={self.dtype}, device={self.device})"

    def __reduce__(self) -> Any:  # pickles as a host array
        return Array.__reduce__(Array(self.value, self._weak))

    def __dlpack__(self, **kw: Any) -> Any:
        return np.array(self.value).__dlpack__(**kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU: DLPack exports the host copy
