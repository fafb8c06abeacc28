"""Eager arrays: immutable values in 64-byte aligned host buffers, with leak tracking.

Operators and NumPy-style methods are attached by :mod:`ember.numpy` (to :class:`Array` and to
every tracer alike), so an expression behaves the same eagerly, under ``jit`` and under the
transformations.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import sys
import threading
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember._src import devices
from ember._src import dtypes as dt
from ember._src.core import ShapedArray, Tracer, install_eager_array
from ember.errors import DeletedArrayError

ALIGNMENT = 64


@dataclass
class _MemoryStats:
    live_arrays: int = 0
    live_bytes: int = 0
    peak_bytes: int = 0
    total_allocated: int = 0
    trackers: list = field(default_factory=list)


_stats: Any = _MemoryStats()  # becomes the C dispatcher's Stats object once it loads (install_native)


_SRC_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _user_frames() -> str:
    """The innermost three stack frames outside ember's implementation, formatted (where a tracked
    array was created, for :func:`check_leaks`)."""
    frames = [f for f in traceback.extract_stack(limit=24)[:-2] if not f.filename.startswith(_SRC_DIR)]
    return "".join(traceback.format_list(frames[-3:]))


# Small buffers (up to SMALL_MAX bytes) are carved from 4 KiB slabs, one per size class (64, 128,
# 256, 512 bytes): a slab is 64-byte aligned, so chunk i of class c starts at an aligned address
# known without asking NumPy for it (reading an array's address costs microseconds, more than
# copying a few floats). A chunk keeps its slab alive (the array's ``base``), so one long-lived small
# array holds at most one slab: 4 KiB. ``next()`` on an ``itertools.count`` is atomic, so two
# threads never get the same chunk; a full slab is replaced (a race between threads only wastes
# the rest of one slab).
_SLAB_BYTES = 4096
SMALL_MAX = 512


class _Slab:
    __slots__ = ("raw", "next", "chunks")

    def __init__(self, chunk: int):
        raw = np.empty(_SLAB_BYTES + ALIGNMENT, dtype=np.uint8)
        off = (-raw.__array_interface__["data"][0]) % ALIGNMENT
        self.raw = raw[off:off + _SLAB_BYTES]
        self.next = itertools.count().__next__
        self.chunks = _SLAB_BYTES // chunk


_SLABS: dict[int, _Slab] = {}


def small_buffer(shape: tuple, dtype: np.dtype, nbytes: int) -> np.ndarray:
    """A writable, C-contiguous, 64-byte aligned array of ``0 < nbytes <= SMALL_MAX`` bytes."""
    chunk = ALIGNMENT << ((nbytes - 1) >> 6).bit_length()
    slab = _SLABS.get(chunk)
    i = slab.next() if slab is not None else slab
    if slab is None or i >= slab.chunks:
        slab = _SLABS[chunk] = _Slab(chunk)
        i = slab.next()
    return np.ndarray(shape, dtype, slab.raw, i * chunk)


# Large buffers from aligned_empty (results an implementation computes in place, e.g. a matrix
# product's output) are recognised by their owner, so wrap_result freezes them instead of copying.
_FRESH: dict[int, weakref.ref] = {}
_FRESH_MIN = 1 << 16


def aligned_empty(shape: tuple, dtype: Any) -> np.ndarray:
    """A new writable, C-contiguous, 64-byte aligned array that :func:`wrap_result` (and
    :func:`aligned_copy` with ``owned=True``) takes over without a copy."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < _FRESH_MIN:
        return np.empty(shape, dtype)  # small: the copy costs less than the bookkeeping
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    off = (-raw.__array_interface__["data"][0]) % ALIGNMENT
    key = id(raw)
    _FRESH[key] = weakref.ref(raw, lambda _r, key=key: _FRESH.pop(key, None))
    return np.ndarray(shape, dtype, raw, off)


def _is_fresh(x: np.ndarray) -> bool:
    base = x.base
    ref = _FRESH.get(id(base)) if base is not None else None
    return ref is not None and ref() is base


def aligned_copy(x: np.ndarray, owned: bool = False, share: bool = True) -> np.ndarray:
    """A C-contiguous, 64-byte aligned, read-only copy of ``x``.

    ``x`` itself is returned when it already is all that (unless not ``share``: a caller's read-only
    array may be a view of memory the caller can still write, and an Array's data must not
    change), or when ``owned`` (a fresh buffer nobody else references: one NumPy allocated for the
    result, or one from :func:`aligned_empty`) and aligned, in which case it is frozen in place. A
    caller's array is never frozen. Arrays of at most 512 bytes are always copied, into a chunk of
    a shared aligned slab (cheaper than finding out whether they are aligned).
    """
    nbytes = x.nbytes
    if 0 < nbytes <= SMALL_MAX:
        out = small_buffer(x.shape, x.dtype, nbytes)
        out[...] = x
        out.flags.writeable = False
        return out
    if x.flags.c_contiguous and (x.size == 0 or x.__array_interface__["data"][0] % ALIGNMENT == 0):
        if not x.flags.writeable and share:
            return x
        if owned and (x.base is None or _is_fresh(x)):  # a fresh buffer we own: freeze it in place
            x.flags.writeable = False
            return x
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    off = (-raw.__array_interface__["data"][0]) % ALIGNMENT
    out = raw[off:off + nbytes].view(x.dtype).reshape(x.shape)
    np.copyto(out, x, casting="unsafe")
    out.flags.writeable = False
    return out


class Array:
    """An immutable n-dimensional array (the eager value type of ember)."""

    __slots__ = ("_value", "_weak", "_nbytes", "_aval", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, value: np.ndarray, weak_type: bool = False):
        self._value = value
        self._weak = weak_type
        self._nbytes = value.nbytes
        self._aval = None
        s = _stats
        s.live_arrays += 1
        s.live_bytes += self._nbytes
        s.total_allocated += self._nbytes
        if s.live_bytes > s.peak_bytes:
            s.peak_bytes = s.live_bytes
        if s.trackers:
            _record_tracked(self, value)

    def __del__(self) -> None:
        if self._value is not None:
            _stats.live_arrays -= 1
            _stats.live_bytes -= self._nbytes

    # -- value access -----------------------------------------------------------------------
    @property
    def value(self) -> np.ndarray:
        v = self._value
        if v is None:
            raise DeletedArrayError("array was deleted (delete() or a `with` block released it)")
        return v

    @property
    def aval(self) -> ShapedArray:
        a = self._aval
        if a is None:
            v = self.value
            a = self._aval = ShapedArray(v.shape, v.dtype, self._weak)
        return a

    shape = property(lambda self: self.value.shape)
    dtype = property(lambda self: self.value.dtype)
    ndim = property(lambda self: self.value.ndim)
    size = property(lambda self: self.value.size)
    nbytes = property(lambda self: self.value.nbytes)
    weak_type = property(lambda self: self._weak)
    itemsize = property(lambda self: self.value.itemsize)

    @property
    def device(self) -> str:
        return "cpu"

    def to_device(self, device: Any, /, *, stream: Any = None) -> Array:
        if device not in ("cpu", None):
            raise ValueError(f"unknown device {device!r}; ember arrays live on 'cpu'")
        return self

    def block_until_ready(self) -> Array:
        return self

    def is_deleted(self) -> bool:
        return self._value is None

    def delete(self) -> None:
        """Release the buffer now; any later use raises :class:`DeletedArrayError`."""
        if self._value is not None:
            _stats.live_arrays -= 1
            _stats.live_bytes -= self._nbytes
            self._value = None
            self._aval = None

    def __enter__(self) -> Array:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.delete()

    # -- conversions ------------------------------------------------------------------------
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        v = self.value
        if dtype is not None and np.dtype(dtype) != v.dtype:
            return v.astype(dtype)
        return v.copy() if copy else v

    def to_concrete(self) -> np.ndarray:
        return self.value

    def tolist(self) -> Any:
        return self.value.tolist()

    def item(self, *args: Any) -> Any:
        return self.value.item(*args)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def __float__(self) -> float:
        return float(self.value)

    def __complex__(self) -> complex:
        return complex(self.value)

    def __index__(self) -> int:
        v = self.value
        if v.dtype.kind not in "iub":
            raise TypeError(f"only integer arrays can be used as an index, got {v.dtype}")
        return int(v)

    def __len__(self) -> int:
        if self.value.ndim == 0:
            raise TypeError("len() of a 0-d array")
        return self.value.shape[0]

    def __iter__(self) -> Iterator[Any]:
        v = self.value
        if v.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(v.shape[0]))

    def __hash__(self) -> int:
        raise TypeError("unhashable type: 'Array' (ember arrays are not hashable)")

    def __repr__(self) -> str:
        if self._value is None:
            return "Array(<deleted>)"
        body = np.array2string(self._value, separator=", ", prefix="Array(")
        return f"Array({body}, dtype={self._value.dtype})"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value.item() if self.value.ndim == 0 else self.value, spec)

    def __reduce__(self) -> Any:
        return (_rebuild, (np.array(self.value), self._weak))

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: Any = None, copy: bool | None = None) -> Any:
        """Export the buffer through DLPack (zero-copy, marked read-only for DLPack >= 1.0
        consumers). A consumer of the older protocol cannot be told the buffer is read-only, so it
        gets a copy unless ``copy=False`` (then ``BufferError``)."""
        kw = {k: v for k, v in (("stream", stream), ("max_version", max_version), ("dl_device", dl_device),
                                ("copy", copy)) if v is not None}
        try:
            return self.value.__dlpack__(**kw)
        except BufferError:
            if copy is False or not self.value.flags.c_contiguous or self.value.flags.writeable:
                raise
            return np.array(self.value).__dlpack__(**kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.value.__dlpack_device__()


def _record_tracked(arr: Array, value: np.ndarray) -> None:
    """Record a new Array with the :func:`check_leaks` blocks of this thread (while any is active)."""
    tid = threading.get_ident()
    mine = [tr for t, tr in _stats.trackers if t == tid]
    if mine:
        where = _user_frames()
        for tr in mine:
            tr.append((weakref.ref(arr), where, value.shape, value.dtype))


def install_native(install: Callable[[type, Any, Callable], Any]) -> None:
    """Let the C call dispatcher make and free Arrays: ``install`` (its ``install_array``) moves the
    memory statistics into a C object (carrying the counts over, replacing ``_stats``) and makes
    ``Array.__init__``/``__del__`` C functions that update it; the Python methods above stay the
    reference (and what runs until the extension loads, or with ``EMBER_DISPATCH=0``)."""
    install(Array, sys.modules[__name__], _record_tracked)


def _rebuild(value: np.ndarray, weak: bool) -> Array:
    return Array(aligned_copy(value), weak)


def wrap_result(value: Any, aval: ShapedArray) -> Array:
    """Wrap a NumPy result as an Array with the dtype and weak type abstract evaluation inferred."""
    v = np.asarray(value)
    if v.dtype != aval.dtype:
        v = v.astype(aval.dtype)
    if v.shape != aval.shape:
        raise AssertionError(f"internal error: implementation returned shape {v.shape}, "
                             f"abstract evaluation said {aval.shape}")
    return Array(aligned_copy(v, owned=True), aval.weak_type)


install_eager_array(Array, wrap_result)

_PY_DEFAULTS = {np.dtype(np.float64): dt.float32, np.dtype(np.int64): dt.int32,
                np.dtype(np.complex128): dt.complex64}


def asarray_eager(x: Any, dtype: Any = None) -> Array:
    """Convert ``x`` (Array, NumPy array, Python scalar or nested list) to an eager Array."""
    if isinstance(x, Array):
        if dtype is None or x.dtype == dt.canonicalize(dtype):
            return x
        return Array(aligned_copy(x.value.astype(dt.canonicalize(dtype))), False)
    if isinstance(x, Tracer):
        raise TypeError("a traced value cannot be converted to an eager array here")
    weak = False
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        want = dt.python_scalar_dtype(x) if dtype is None else dt.canonicalize(dtype)
        weak = dtype is None and not isinstance(x, bool)
        v = np.asarray(x, dtype=want)
    elif isinstance(x, (np.ndarray, np.generic)):
        v = np.asarray(x)
        want = dt.canonicalize(v.dtype if dtype is None else dtype)
    elif hasattr(x, "__array__") or hasattr(x, "__array_interface__"):
        v = np.asarray(x)
        want = dt.canonicalize(v.dtype if dtype is None else dtype)
    else:
        v = _from_nested(x)
        want = dt.canonicalize(_PY_DEFAULTS.get(v.dtype, v.dtype) if dtype is None else dtype)
        if dtype is None and v.dtype == np.int64 and v.size and (v.max() >= 2**31 or v.min() < -(2**31)):
            if not dt.x64_enabled():
                raise OverflowError(f"Python int {v.max() if v.max() >= 2**31 else v.min()} too large "
                                    "to convert to int32 (64-bit integers need "
                                    "ember.config.update('jax_enable_x64', True))")
            want = dt.int64
    if v.dtype != want:
        v = v.astype(want)
    # the caller's data is always copied (JAX's device_put does too): a read-only array of theirs
    # may view memory they still write, and compiled programs rely on an Array never changing
    return Array(aligned_copy(v, owned=v is not x and v.base is None, share=False), weak)


def _from_nested(x: Any) -> np.ndarray:
    if isinstance(x, (list, tuple)):
        leaves = []

        def walk(y: Any) -> None:
            if isinstance(y, (list, tuple)):
                for z in y:
                    walk(z)
            else:
                leaves.append(y)

        walk(x)
        if any(isinstance(y, Tracer) for y in leaves):
            raise TypeError("nested lists containing traced values: use ember.numpy.stack")
        conv = [y.value if isinstance(y, Array) else y for y in leaves]
        if any(isinstance(y, np.ndarray) for y in conv):
            return np.array(_replace_leaves(x, iter(conv)))
        return np.array(x)
    try:
        return np.asarray(x)
    except Exception as e:  # pragma: no cover - depends on foreign types
        raise TypeError(f"cannot convert {type(x).__name__} to an ember array") from e


def _replace_leaves(x: Any, it: Iterator[Any]) -> Any:
    if isinstance(x, (list, tuple)):
        return [_replace_leaves(y, it) for y in x]
    return next(it)


# ---------------------------------------------------------------------------------------------
# Memory inspection
# ---------------------------------------------------------------------------------------------


_REPORTERS: dict[str, Callable[[], dict[str, int]]] = {}


def register_memory_reporter(name: str, report: Callable[[], dict[str, int]]) -> None:
    """Add the figures ``report()`` returns to :func:`memory_stats` (a backend registers what its
    executables hold: arenas, output pools, loaded libraries)."""
    _REPORTERS[name] = report


def memory_stats(device: Any = None) -> dict[str, int]:
    """Live eager arrays and bytes, their peak and total, and what the backends' caches hold.

    Backend figures: ``arena_bytes`` (planned arenas of cached executables), ``output_slot_bytes`` and
    ``output_pool_bytes`` (recycled output buffers), ``loaded_libraries`` /
    ``loaded_library_bytes`` (compiled code in the process). ``ember.clear_caches()`` releases what
    the caches hold. With a GPU ``device`` (``"webgpu:0"``, ...): that device's buffer pool
    (``bytes_in_use``, ``peak_bytes_in_use``, ``pool_bytes``, ... as JAX's ``Device.memory_stats()``)."""
    if device is not None and str(device) != "cpu":
        return devices.memory_stats(device)
    s = _stats
    out = {"live_arrays": s.live_arrays, "live_bytes": s.live_bytes, "peak_bytes": s.peak_bytes,
           "total_allocated_bytes": s.total_allocated}
    for report in list(_REPORTERS.values()):
        out.update(report())
    return out


class LeakReport(list):
    """The arrays created inside a :func:`check_leaks` block that were still alive at its end."""

    def __str__(self) -> str:
        if not self:
            return "no leaked arrays"
        lines = [f"{len(self)} array(s) created in the block are still alive:"]
        for shape, dtype, where in self:
            lines.append(f"  {dtype}{list(shape)} created at:\n{where}")
        return "\n".join(lines)


@contextlib.contextmanager
def check_leaks(raise_on_leak: bool = False) -> Iterator[LeakReport]:
    """Report arrays created in the block, by this thread, that are still alive when it ends.

    ``with ember.check_leaks() as leaks: ...`` then ``leaks`` lists ``(shape, dtype, where)``;
    with ``raise_on_leak=True`` a leak raises ``RuntimeError`` with the report. Arrays other
    threads create meanwhile are not counted (each thread checks its own).
    """

    created: list = []
    report = LeakReport()
    entry = (threading.get_ident(), created)
    _stats.trackers.append(entry)
    try:
        yield report
    finally:
        _stats.trackers[:] = [e for e in _stats.trackers if e is not entry]
        gc.collect()
        for ref, where, shape, dtype in created:
            arr = ref()
            if arr is not None and not arr.is_deleted():
                report.append((shape, dtype, where))
    if raise_on_leak and report:
        raise RuntimeError(str(report))
