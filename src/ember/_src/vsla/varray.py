"""VArray: a tensor class under trailing-zero padding (variable-shape linear algebra).

Data is stored at capacity ``next_pow2(shape[i])`` per axis with the slack kept at zero; the logical
shape is static pytree metadata (so a jit retraces per logical shape in this first version).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import ember.numpy as enp
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


class VArray:
    """A variable-shape array: an equivalence class of tensors under trailing-zero padding."""

    __slots__ = ("data", "shape")

    def __init__(self, data: Any, shape: Sequence[int]):
        self.data = data
        self.shape = _check_shape(shape)

    @property
    def capacity(self) -> tuple[int, ...]:
        """Stored extent per axis (``next_pow2`` of each logical size)."""
        return tuple(next_pow2(d) for d in self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

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
        """Strip trailing zero hyperplanes on every axis (explicit; needs concrete data).

        The result slices this array's data, so gradients flow through it."""
        shape = _strip(np.asarray(self.logical())).shape
        return array(self.data[tuple(slice(0, d) for d in shape)])

    def __eq__(self, other: object) -> bool:  # class equality
        if not isinstance(other, VArray):
            other = array(other)
        a, b = self.to_numpy(), other.to_numpy()
        return a.shape == b.shape and bool(np.array_equal(a, b))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"VArray(shape={self.shape}, data={np.asarray(self.logical()).tolist()})"

    def _binary(self, other: Any, op: Any) -> VArray:
        if not isinstance(other, VArray):
            if np.ndim(other) == 0:
                if op is _mul:
                    return VArray(self.data * other, self.shape)
                raise TypeError("vsla: only scalar multiply is defined between a VArray and a scalar")
            other = array(other)
        if other.ndim != self.ndim:
            raise ValueError(f"vsla: mixed ranks {self.ndim} and {other.ndim}")
        shape = tuple(max(a, b) for a, b in zip(self.shape, other.shape))
        return VArray(op(_to_capacity(self, shape), _to_capacity(other, shape)), shape)

    def __add__(self, other: Any) -> VArray:
        return self._binary(other, _add)

    __radd__ = __add__

    def __sub__(self, other: Any) -> VArray:
        return self._binary(other, _sub)

    def __mul__(self, other: Any) -> VArray:
        return self._binary(other, _mul)

    __rmul__ = __mul__

    def __neg__(self) -> VArray:
        return VArray(-self.data, self.shape)

    def map(self, f: Any) -> VArray:
        """Apply a unary map with ``f(0) == 0`` (relu, tanh, sin, ...) to the class."""
        return VArray(f(self.data), self.shape)


def _add(a: Any, b: Any) -> Any:
    return a + b


def _sub(a: Any, b: Any) -> Any:
    return a - b


def _mul(a: Any, b: Any) -> Any:
    return a * b


def _to_capacity(v: VArray, shape: tuple[int, ...]) -> Any:
    cap = tuple(next_pow2(d) for d in shape)
    pad = [(0, c - s) for c, s in zip(cap, v.data.shape)]
    return enp.pad(v.data, pad) if any(p for _, p in pad) else v.data


def _strip(x: np.ndarray) -> np.ndarray:
    for ax in range(x.ndim):
        moved = np.moveaxis(x, ax, 0)
        nz = [i for i in range(moved.shape[0]) if np.any(moved[i] != 0)]
        x = np.moveaxis(moved[: (nz[-1] + 1 if nz else 0)], 0, ax)
    return x


def _check_dtype(x: np.ndarray | Any) -> None:
    if not (np.issubdtype(np.dtype(x.dtype), np.number) or np.dtype(x.dtype) == np.bool_):
        raise TypeError(f"vsla: non-numeric dtype {x.dtype}")


def array(data: Any, dtype: Any = None) -> VArray:
    """Build a VArray from array-like data; its logical shape is the data's shape."""
    if isinstance(data, VArray):
        return data
    if hasattr(data, "aval") or type(data).__module__.startswith("ember"):
        x = data if dtype is None else data.astype(dtype)
    else:
        x = np.asarray(data, dtype=dtype)
        if x.dtype == np.float64 and dtype is None:
            x = x.astype(np.float32)
    _check_dtype(x)
    shape = _check_shape(x.shape)
    cap = tuple(next_pow2(d) for d in shape)
    pad = [(0, c - s) for c, s in zip(cap, shape)]
    x = enp.asarray(x)
    return VArray(enp.pad(x, pad) if any(p for _, p in pad) else x, shape)


def conv(a: VArray, b: VArray, method: str = "auto") -> VArray:
    """Model A product: convolution on the last axis (leading axes are batch, promoted).

    ``method`` is ``"auto"`` (direct below ``FFT_THRESHOLD`` of ``m * n``, FFT above), ``"direct"``
    or ``"fft"``.
    """
    if method not in ("auto", "direct", "fft"):
        raise ValueError(f"vsla.conv: method must be 'auto', 'direct' or 'fft', got {method!r}")
    a, b = array(a), array(b)
    if a.ndim != b.ndim:
        raise ValueError(f"vsla.conv: mixed ranks {a.ndim} and {b.ndim}")
    m, n = a.shape[-1], b.shape[-1]
    if a.ndim == 0:
        raise ValueError("vsla.conv: operands need at least one axis")
    batch = tuple(max(x, y) for x, y in zip(a.shape[:-1], b.shape[:-1]))
    length = 0 if m == 0 or n == 0 else m + n - 1
    shape = batch + (length,)
    cap = tuple(next_pow2(d) for d in shape)
    if length == 0 or 0 in batch:
        return VArray(enp.zeros(cap, dtype=enp.result_type(a.dtype, b.dtype)), shape)
    xa = _to_capacity(VArray(a.data, batch + (a.shape[-1],)), batch + (a.shape[-1],))
    xb = _to_capacity(VArray(b.data, batch + (b.shape[-1],)), batch + (b.shape[-1],))
    lead = tuple(slice(0, d) for d in batch)
    xa, xb = xa[lead + (slice(0, m),)], xb[lead + (slice(0, n),)]
    use_fft = method == "fft" or (method == "auto" and m * n > FFT_THRESHOLD)
    out = _conv_fft(xa, xb, length) if use_fft else _conv_direct(xa, xb, length)
    pad = [(0, c - s) for c, s in zip(cap, shape)]
    return VArray(enp.pad(out, pad), shape)


FFT_THRESHOLD = 4096
"""``m * n`` above which conv uses the FFT path (measured crossover under jit, see docs/vsla.md)."""


def _conv_direct(xa: Any, xb: Any, length: int) -> Any:
    """Direct convolution on the last axis via a Toeplitz gather of ``xb`` (batch axes kept)."""
    m, n = xa.shape[-1], xb.shape[-1]
    k = np.arange(length)[:, None] - np.arange(m)[None, :]
    valid = (k >= 0) & (k < n)
    toe = enp.take(xb, enp.asarray(np.where(valid, k, 0)), axis=-1)
    toe = toe * enp.asarray(valid.astype(np.dtype(toe.dtype)))
    return enp.einsum("...i,...ki->...k", xa, toe)


def _conv_fft(xa: Any, xb: Any, length: int) -> Any:
    """FFT convolution with transform length ``next_pow2(length)``."""
    size = next_pow2(length)
    out = enp.fft.irfft(enp.fft.rfft(xa, n=size) * enp.fft.rfft(xb, n=size), n=size)
    return out[..., :length].astype(enp.result_type(xa.dtype, xb.dtype))


def kron(a: VArray, b: VArray) -> VArray:
    """Model B product: Kronecker product of the minimal representatives (1-D)."""
    a, b = array(a), array(b)
    if a.ndim != b.ndim:
        raise ValueError(f"vsla.kron: mixed ranks {a.ndim} and {b.ndim}")
    a, b = a.shrink(), b.shrink()
    return array(enp.kron(a.logical(), b.logical()))


def stack(items: Sequence[Any]) -> VArray:
    """Stack VArrays of one rank and different shapes along a new leading axis (zero-extended)."""
    vs = [array(v) for v in items]
    if not vs:
        raise ValueError("vsla.stack: need at least one array")
    ranks = {v.ndim for v in vs}
    if len(ranks) != 1:
        raise ValueError(f"vsla.stack: mixed ranks {sorted(ranks)}")
    shape = tuple(max(s) for s in zip(*(v.shape for v in vs))) if vs[0].ndim else ()
    rows = enp.stack([_to_capacity(v, shape) for v in vs])
    full = (len(vs),) + shape
    pad = [(0, next_pow2(len(vs)) - len(vs))] + [(0, 0)] * len(shape)
    return VArray(enp.pad(rows, pad), full)


def unstack(v: VArray) -> list[VArray]:
    """Split a stacked VArray into its rows' classes (minimal representatives)."""
    rows = v.logical()
    return [array(rows[i]).shrink() for i in range(v.shape[0])]


register_pytree_node(VArray, lambda v: ((v.data,), v.shape), lambda shape, ch: VArray(ch[0], shape))
