"""VArray: a tensor class under trailing-zero padding (variable-shape linear algebra).

Data is stored at capacity ``next_pow2(shape[i])`` per axis with the slack kept at zero. Eagerly (and
under a plain ``ember.jit``) the logical shape is static pytree metadata; under ``vsla.jit`` a VArray
carries its logical sizes as a runtime int32 vector ``lengths`` instead (see ``symbolic.py``), so one
trace serves every shape of a rank and dtype.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import ember.numpy as enp
from ember._src import dtypes as dt
from ember._src.array import Array, aligned_copy, aligned_empty
from ember._src.vsla import accumulate as acc
from ember._src.vsla import convnd
from ember._src.vsla import symbolic as sym
from ember.errors import TracerError
from ember.tree import register_pytree_node

__all__ = ["VArray", "array", "conv", "kron", "stack", "unstack", "next_pow2"]

_MAX_DIM = 2**62


def next_pow2(n: int) -> int:
    """Smallest power of two >= ``n`` (0 for 0)."""
    if n < 0:
        raise ValueError(f"vsla: negative dimension {n}")
    if n > _MAX_DIM:
        raise OverflowError(f"dimension {n} overflows the VSLA capacity limit 2**62")
    return 0 if n == 0 else 1 << (n - 1).bit_length()


def _check_shape(shape: Sequence[int]) -> tuple[int, ...]:
    out = []
    for i, d in enumerate(shape):
        d = int(d)
        if d < 0:
            raise ValueError(f"vsla: negative size {d} on axis {i}")
        if d > _MAX_DIM:
            raise OverflowError(f"vsla: size {d} on axis {i} overflows 2**62")
        out.append(d)
    return tuple(out)


def _zero_slack(data: Any, shape: tuple[int, ...]) -> Any:
    """``data`` with every entry past ``shape`` set to zero (one masked pass where it has slack)."""
    dshape = tuple(data.shape) if hasattr(data, "shape") else np.shape(data)
    if len(dshape) != len(shape) or not all(isinstance(c, (int, np.integer)) for c in dshape) or all(
            c <= d for c, d in zip(dshape, shape)):
        return data
    keep = np.ones((), bool)
    for ax, (c, d) in enumerate(zip(dshape, shape)):
        idx = (np.arange(c) < d).reshape((-1,) + (1,) * (len(dshape) - ax - 1))
        keep = keep & idx
    dtype = data.dtype if hasattr(data, "dtype") else np.asarray(data).dtype
    return enp.where(keep, data, np.zeros((), dtype))


def _make(data: Any, shape: Sequence[int] | None, lengths: Any = None) -> VArray:
    """A VArray of op results whose slack is zero already (no masking pass; internal)."""
    v = VArray.__new__(VArray)
    v.data = data
    v._shape = None if lengths is not None else _check_shape(shape if shape is not None else ())
    v.lengths = lengths
    return v


class VArray:
    """A variable-shape array: an equivalence class of tensors under trailing-zero padding.

    ``VArray(data, shape)`` holds a static logical shape; ``VArray(data, None, lengths)`` holds the
    logical sizes as an int32 vector ``lengths`` (a runtime value: the form ``vsla.jit`` traces).
    The stored entries past the logical shape (the slack) are never data: built with a static
    shape, a VArray holds zeros there whatever ``data`` held (§4.1: the slack may be uninitialised
    and must not be read; ember's kernels rely on a zero slack), so no result, and no derivative,
    depends on it.
    """

    __slots__ = ("data", "_shape", "lengths")

    def __init__(self, data: Any, shape: Sequence[int] | None, lengths: Any = None):
        self.data = data
        self._shape = None if lengths is not None else _check_shape(shape if shape is not None else ())
        self.lengths = lengths
        if self._shape is not None:  # traced data too: a derivative never sees the slack either
            self.data = _zero_slack(data, self._shape)

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape (static; under ``vsla.jit`` it is a runtime value: use ``lengths``)."""
        if self._shape is None:
            raise TracerError("vsla: the logical shape of a VArray under vsla.jit is a runtime value "
                              "(VArray.lengths); it is known once the jitted function returns")
        return self._shape

    @property
    def symbolic(self) -> bool:
        """Whether the logical sizes are a runtime value (``lengths``) rather than static metadata."""
        return self._shape is None

    def pair(self) -> tuple[Any, Any]:
        """``(data, lengths)``: the runtime-length form (``lengths`` built from a static shape)."""
        return self.data, self.lengths if self._shape is None else sym.lengths_const(self._shape)

    @property
    def capacity(self) -> tuple[int, ...]:
        """Stored extent per axis: ``next_pow2`` of each logical size for arrays built by
        :func:`array`, possibly larger (a power of two, or a capacity sum after ``conv``) for the
        results of ``vsla.jit``."""
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def dtype(self) -> Any:
        return self.data.dtype

    def logical(self) -> Any:
        """The stored data sliced to the logical shape (an ember array)."""
        return self.data[tuple(slice(0, d) for d in self.shape)]

    def to_numpy(self) -> np.ndarray:
        """The minimal representative as a NumPy array."""
        return _strip(np.asarray(self.logical()))

    def shrink(self) -> VArray:
        """Strip trailing zero hyperplanes on every axis (explicit).

        Eagerly the result slices this array's data, so gradients flow through it; under
        ``vsla.jit`` the data is kept and the runtime lengths are cut."""
        if self.symbolic:
            return _make(*_pair_args(sym.shrink(self.pair())))
        shape = minimal_shape(np.asarray(self.logical()))
        return array(self.data[tuple(slice(0, d) for d in shape)])

    def __eq__(self, other: object) -> bool:  # class equality
        if not isinstance(other, VArray):
            other = array(other)
        a, b = self.to_numpy(), other.to_numpy()
        return a.shape == b.shape and bool(np.array_equal(a, b))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self.symbolic:
            return f"VArray(lengths={self.lengths}, capacity={self.capacity})"
        return f"VArray(shape={self.shape}, data={np.asarray(self.logical()).tolist()})"

    def _binary(self, other: Any, op: Any) -> VArray:
        if not isinstance(other, VArray):
            if np.ndim(other) == 0:
                if op is _mul:  # masked: a non-finite scalar would turn the zero slack into NaN
                    return self._with_data(self._mask_slack(self.data * other))
                raise TypeError("vsla: only scalar multiply is defined between a VArray and a scalar")
            other = array(other)
        if other.ndim != self.ndim:
            raise ValueError(f"vsla: mixed ranks {self.ndim} and {other.ndim}")
        if self.symbolic or other.symbolic:
            return _make(*_pair_args(sym.binary(self.pair(), other.pair(), op)))
        shape = tuple(max(a, b) for a, b in zip(self.shape, other.shape))
        return _make(op(_to_capacity(self, shape), _to_capacity(other, shape)), shape)

    def __add__(self, other: Any) -> VArray:
        return self._binary(other, _add)

    __radd__ = __add__

    def __sub__(self, other: Any) -> VArray:
        return self._binary(other, _sub)

    def __mul__(self, other: Any) -> VArray:
        return self._binary(other, _mul)

    __rmul__ = __mul__

    def __neg__(self) -> VArray:
        return self._with_data(-self.data)

    def map(self, f: Any) -> VArray:
        """Apply a unary elementwise map to the logical region.

        The slack stays zero whatever ``f(0)`` is: ``exp`` of ``[1, 2, 3]`` is the class of
        ``[e, e^2, e^3]``, and a later zero extension reads zeros past index 2, not ``exp(0)``.
        When ``f(0) != 0`` the result is therefore not the map of the class (whose padding would be
        ``f(0)``); it is the map of this representative, cut to its logical shape."""
        out = f(self.data)
        if tuple(out.shape) != tuple(self.data.shape):
            raise ValueError(f"VArray.map: f must be elementwise (shape {tuple(self.data.shape)} became "
                             f"{tuple(out.shape)})")
        return self._with_data(self._mask_slack(out))

    def _mask_slack(self, out: Any) -> Any:
        """``out`` (stored like this array's data) with everything past the logical shape set to zero."""
        if self.symbolic:
            return enp.where(sym.logical_mask(out, self.lengths), out, sym.zero(out.dtype))
        cap = tuple(out.shape)
        if cap == self.shape:
            return out
        mask = np.zeros(cap, dtype=bool)
        mask[tuple(slice(0, d) for d in self.shape)] = True
        return enp.where(enp.asarray(mask), out, sym.zero(out.dtype))

    def _with_data(self, data: Any) -> VArray:
        return _make(data, self._shape, self.lengths)


def _pair_args(p: tuple[Any, Any]) -> tuple[Any, None, Any]:
    """``VArray`` constructor arguments of a runtime-length pair."""
    return p[0], None, p[1]


def any_symbolic(*vs: VArray) -> bool:
    """Whether any operand carries runtime lengths (then the kernels of ``symbolic.py`` apply)."""
    return any(v.symbolic for v in vs)


def needs_static(v: VArray, what: str) -> None:
    """Raise a clear error for an operation that needs a static logical shape."""
    if v.symbolic:
        raise TracerError(f"{what}: needs a static logical shape, but under vsla.jit the shape is a "
                          "runtime value; call it outside vsla.jit (or with ember.jit, which traces "
                          "per shape)")


def _add(a: Any, b: Any) -> Any:
    return a + b


def _sub(a: Any, b: Any) -> Any:
    return a - b


def _mul(a: Any, b: Any) -> Any:
    return a * b


def _to_capacity(v: VArray, shape: tuple[int, ...]) -> Any:
    cap = tuple(next_pow2(d) for d in shape)
    data = v.data
    if any(s > c for c, s in zip(cap, data.shape)):  # a vsla.jit result stored above its bucket
        data = data[tuple(slice(0, c) for c in cap)]
    pad = [(0, c - s) for c, s in zip(cap, data.shape)]
    return enp.pad(data, pad) if any(p for _, p in pad) else data


def _strip(x: np.ndarray) -> np.ndarray:
    """``x`` cut after its last nonzero hyperplane on every axis (all-zero: every axis empty)."""
    return x[tuple(slice(0, e) for e in minimal_shape(x))]


def minimal_shape(x: np.ndarray) -> tuple[int, ...]:
    """The shape of the minimal representative of ``x``: per axis, one past the last hyperplane
    holding a nonzero (NaN counts as nonzero); all zeros for an all-zero array. Vectorized: one
    ``!= 0`` pass, then one ``any`` reduction per axis."""
    if x.ndim == 0:
        return ()
    mask = x != 0
    ends = [_end(mask if x.ndim == 1 else mask.any(axis=tuple(i for i in range(x.ndim) if i != ax)))
            for ax in range(x.ndim)]
    if 0 in ends:
        return (0,) * x.ndim
    return tuple(ends)


def _end(row: np.ndarray) -> int:
    """One past the last ``True`` of a boolean vector (0 if none): ``argmax`` of the reversed view
    stops at the first ``True`` it meets."""
    if row.size == 0:
        return 0
    back = row[::-1]
    i = int(np.argmax(back))
    return row.size - i if back[i] else 0


def _check_dtype(x: np.ndarray | np.dtype | Any) -> None:
    d = np.dtype(x if isinstance(x, np.dtype) else x.dtype)
    if not (np.issubdtype(d, np.number) or d == np.bool_ or d.name == "bfloat16"):  # ml_dtypes' bfloat16
        raise TypeError(f"vsla: non-numeric dtype {d}")


def array(data: Any, dtype: Any = None) -> VArray:
    """Build a VArray from array-like data; its logical shape is the data's shape, except that a
    scalar becomes the rank-1 VArray ``[s]`` (no rank-0 VArray at the API boundary, §3.2).

    Conversion follows ``ember.numpy.asarray``: 64-bit host data stays 64-bit under
    ``jax_enable_x64`` and becomes 32-bit otherwise; an explicit 64-bit ``dtype`` then warns."""
    if isinstance(data, VArray):
        return data
    if not (hasattr(data, "aval") or type(data).__module__.startswith("ember")):
        _check_dtype(np.asarray(data) if dtype is None else np.dtype(dtype))
    # ember's conversion: 64-bit host data stays 64-bit under jax_enable_x64 and becomes 32-bit
    # otherwise, and an explicit 64-bit dtype warns when it is truncated (as JAX does)
    x = enp.asarray(data, dtype=dt.user_dtype(dtype, "vsla.array"))
    _check_dtype(x)
    if x.ndim == 0:
        x = enp.reshape(x, (1,))
    shape = _check_shape(x.shape)
    cap = tuple(next_pow2(d) for d in shape)
    pad = [(0, c - s) for c, s in zip(cap, shape)]
    return _make(enp.pad(x, pad) if any(p for _, p in pad) else x, shape)


def conv(a: VArray, b: VArray, method: str = "auto", dims: int = 1) -> VArray:
    """Model A product: convolution on the last axis (leading axes are batch, promoted); ``dims=2``
    or ``3`` convolves the last 2 or 3 axes (Conv2D/Conv3D: sizes ``m_i + n_i - 1``, one 1-D conv of
    the flattened operands, ``convnd.py``).

    ``method`` is ``"auto"`` (direct below ``FFT_THRESHOLD`` of ``m * n``, FFT above), ``"direct"``
    or ``"fft"``. Under ``vsla.jit`` the sizes are runtime values and ``"auto"`` decides on the
    capacities ``ca * cb``: while tracing when they are static (``capacity="static"``), else by a
    runtime branch with both paths in the one compiled program; ``"fft"`` transforms at the
    symbolic length ``2 * max(ca, cb)`` there.
    """
    if method not in ("auto", "direct", "fft"):
        raise ValueError(f"vsla.conv: method must be 'auto', 'direct' or 'fft', got {method!r}")
    a, b = array(a), array(b)
    if a.ndim != b.ndim:
        raise ValueError(f"vsla.conv: mixed ranks {a.ndim} and {b.ndim}")
    if a.ndim == 0:
        raise ValueError("vsla.conv: operands need at least one axis")
    if not 1 <= int(dims) <= a.ndim:
        raise ValueError(f"vsla.conv: dims must be between 1 and the rank {a.ndim}, got {dims}")
    if dims > 1:
        return _conv_nd(a, b, method, int(dims))
    if any_symbolic(a, b):
        return _make(*_pair_args(sym.conv(a.pair(), b.pair(), method, FFT_THRESHOLD)))
    m, n = a.shape[-1], b.shape[-1]
    batch = tuple(max(x, y) for x, y in zip(a.shape[:-1], b.shape[:-1]))
    length = 0 if m == 0 or n == 0 else m + n - 1
    shape = batch + (length,)
    cap = tuple(next_pow2(d) for d in shape)
    if length == 0 or 0 in batch:
        return _make(enp.zeros(cap, dtype=enp.result_type(a.dtype, b.dtype)), shape)
    xa = _to_capacity(_make(a.data, batch + (a.shape[-1],)), batch + (a.shape[-1],))
    xb = _to_capacity(_make(b.data, batch + (b.shape[-1],)), batch + (b.shape[-1],))
    lead = tuple(slice(0, d) for d in batch)
    xa, xb = xa[lead + (slice(0, m),)], xb[lead + (slice(0, n),)]
    exact = not enp.issubdtype(enp.result_type(a.dtype, b.dtype), enp.inexact)
    use_fft = method == "fft" or (method == "auto" and m * n > FFT_THRESHOLD and not exact)
    out = _conv_fft(xa, xb, length) if use_fft else _conv_direct(xa, xb, length)
    pad = [(0, c - s) for c, s in zip(cap, shape)]
    return _make(enp.pad(out, pad), shape)


def _conv_nd(a: VArray, b: VArray, method: str, k: int) -> VArray:
    """``conv`` over the last ``k > 1`` axes (:mod:`.convnd`)."""
    if any_symbolic(a, b):
        return _make(*_pair_args(convnd.conv_nd_pairs(a.pair(), b.pair(), k, method, FFT_THRESHOLD)))
    nb = a.ndim - k
    batch = tuple(max(x, y) for x, y in zip(a.shape[:nb], b.shape[:nb]))
    ms, ns = a.shape[nb:], b.shape[nb:]
    empty = 0 in ms or 0 in ns or 0 in batch
    shape = batch + tuple(0 if empty else m + n - 1 for m, n in zip(ms, ns))
    dtype = enp.result_type(a.dtype, b.dtype)
    if empty:
        return _make(enp.zeros(tuple(next_pow2(d) for d in shape), dtype=dtype), shape)
    xa = _logical_to(a, batch + ms)
    xb = _logical_to(b, batch + ns)

    def conv1d(fa: Any, fb: Any) -> Any:
        m, n = fa.shape[-1], fb.shape[-1]
        exact = not enp.issubdtype(dtype, enp.inexact)
        use_fft = method == "fft" or (method == "auto" and m * n > FFT_THRESHOLD and not exact)
        return (_conv_fft if use_fft else _conv_direct)(fa, fb, m + n - 1)

    out = convnd.conv_nd_static(xa, xb, k, conv1d)
    return _make(enp.pad(out, [(0, next_pow2(d) - d) for d in shape]), shape)


def _logical_to(v: VArray, shape: tuple[int, ...]) -> Any:
    """``v``'s logical extent zero-extended to ``shape`` (each entry >= the logical size)."""
    x = v.logical()
    return enp.pad(x, [(0, s - d) for s, d in zip(shape, v.shape)])


FFT_THRESHOLD = 256
"""``m * n`` above which conv uses the FFT path (measured crossover under jit, see docs/vsla.md)."""


def _conv_direct(xa: Any, xb: Any, length: int) -> Any:
    """Direct convolution on the last axis via a Toeplitz gather of ``xb`` (batch axes kept).

    Exact for integers (wrapping as NumPy's integer arithmetic does); floating sums of products
    accumulate wide (:func:`ember._src.vsla.accumulate.dot_sum`). The products outside the
    band are selected away rather than multiplied by zero, so a NaN or infinity reaches only the
    outputs it contributes to (as ``np.convolve``)."""
    m, n = xa.shape[-1], xb.shape[-1]
    k = np.arange(length)[:, None] - np.arange(m)[None, :]
    valid = enp.asarray((k >= 0) & (k < n))
    toe = enp.take(xb, enp.asarray(np.where((k >= 0) & (k < n), k, 0)), axis=-1)
    toe = enp.where(valid, toe, sym.zero(toe.dtype))
    return acc.dot_sum(enp.where(valid, xa[..., None, :], sym.zero(xa.dtype)), toe, -1)


def _conv_fft(xa: Any, xb: Any, length: int) -> Any:
    """FFT convolution with transform length ``next_pow2(length)``: real transforms for real
    operands, complex ones for complex operands; integer operands (``method="fft"`` only) are
    rounded to the nearest integer (exact while the transform's rounding stays below 1/2)."""
    size = next_pow2(length)
    dtype = enp.result_type(xa.dtype, xb.dtype)
    if acc.is_half(dtype):  # float16/bfloat16 storage: transformed in float32, rounded once
        return _conv_fft(xa.astype(np.float32), xb.astype(np.float32), length).astype(dtype)
    if enp.issubdtype(dtype, enp.complexfloating):
        out = enp.fft.ifft(enp.fft.fft(xa.astype(dtype), n=size) * enp.fft.fft(xb.astype(dtype), n=size))
        return out[..., :length]
    out = enp.fft.irfft(enp.fft.rfft(xa, n=size) * enp.fft.rfft(xb, n=size), n=size)[..., :length]
    if not enp.issubdtype(dtype, enp.inexact):
        out = enp.round(out)
    return out.astype(dtype)


def kron(a: VArray, b: VArray) -> VArray:
    """Model B product: Kronecker product of the minimal representatives (``np.kron`` on every axis).

    Under ``vsla.jit`` the minimal lengths are computed at run time and the result is stored at
    capacity ``ca * cb`` per axis."""
    a, b = array(a), array(b)
    if a.ndim != b.ndim:
        raise ValueError(f"vsla.kron: mixed ranks {a.ndim} and {b.ndim}")
    if any_symbolic(a, b):
        return _make(*_pair_args(sym.kron(a.pair(), b.pair())))
    if type(a.data) is Array and type(b.data) is Array:  # concrete operands: one host pass
        return _kron_host(_strip(np.asarray(a.logical())), _strip(np.asarray(b.logical())),
                          np.dtype(enp.result_type(a.dtype, b.dtype)))
    xa = a.data[tuple(slice(0, d) for d in minimal_shape(np.asarray(a.logical())))]
    xb = b.data[tuple(slice(0, d) for d in minimal_shape(np.asarray(b.logical())))]
    return array(enp.kron(xa, xb))


def _kron_host(x: np.ndarray, y: np.ndarray, dtype: np.dtype) -> VArray:
    """``np.kron`` of two host arrays of one rank, written once into a zeroed buffer at capacity
    (the interleaved outer product, then one copy into the logical region)."""
    nd = x.ndim
    shape = tuple(p * q for p, q in zip(x.shape, y.shape))
    xr = x.reshape(tuple(s for p in zip(x.shape, (1,) * nd) for s in p))
    yr = y.reshape(tuple(s for p in zip((1,) * nd, y.shape) for s in p))
    out = aligned_empty(tuple(next_pow2(d) for d in shape), dtype)
    out.fill(0)
    out[tuple(slice(0, d) for d in shape)] = np.multiply(xr, yr, dtype=dtype).reshape(shape)
    return _make(Array(aligned_copy(out, owned=True), False), shape)


def stack(items: Sequence[Any]) -> VArray:
    """Stack VArrays of one rank and different shapes along a new leading axis (zero-extended).

    Works under ``vsla.jit`` too (so do :func:`vsla.window` and :func:`vsla.pyramid`)."""
    vs = [array(v) for v in items]
    if not vs:
        raise ValueError("vsla.stack: need at least one array")
    ranks = {v.ndim for v in vs}
    if len(ranks) != 1:
        raise ValueError(f"vsla.stack: mixed ranks {sorted(ranks)}")
    if any_symbolic(*vs):  # under vsla.jit: leading axis of capacity k, the rest the joint capacity
        return _make(*_pair_args(sym.stack([v.pair() for v in vs])))
    shape = tuple(max(s) for s in zip(*(v.shape for v in vs))) if vs[0].ndim else ()
    rows = enp.stack([_to_capacity(v, shape) for v in vs])
    full = (len(vs),) + shape
    pad = [(0, next_pow2(len(vs)) - len(vs))] + [(0, 0)] * len(shape)
    return _make(enp.pad(rows, pad), full)


def unstack(v: VArray) -> list[VArray]:
    """Split a stacked VArray into its rows' classes (minimal representatives)."""
    needs_static(v, "vsla.unstack")
    rows = v.logical()
    return [array(rows[i]).shrink() for i in range(v.shape[0])]


class _RuntimeLengths:
    """Pytree metadata of a VArray whose logical sizes are the second child (``lengths``)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _RuntimeLengths)

    def __hash__(self) -> int:
        return hash(_RuntimeLengths)

    def __repr__(self) -> str:
        return "runtime-lengths"


_RUNTIME = _RuntimeLengths()


def _flatten(v: VArray) -> tuple[tuple, Any]:
    if v.symbolic:
        return (v.data, v.lengths), _RUNTIME
    return (v.data,), v.shape


def _unflatten(aux: Any, children: Sequence[Any]) -> VArray:
    if isinstance(aux, _RuntimeLengths):
        return _make(children[0], None, children[1])
    ndim = getattr(children[0], "ndim", None)
    if isinstance(ndim, int) and ndim < len(aux):
        raise ValueError(
            f"vsla: a VArray of logical shape {aux} cannot hold data of rank {ndim}. A transformation "
            "that maps over axes (ember.vmap) maps the stored data only, and the logical shape, static "
            "metadata, cannot follow it. To vmap over a batch of VArrays, give the batch its own "
            "leading data axis: VArray(stacked_data, per_example_shape) with stacked_data of shape "
            "(batch,) + capacity (each example's slack zero); or use vsla.stack / vsla.Ragged")
    return _make(children[0], aux)


register_pytree_node(VArray, _flatten, _unflatten)
