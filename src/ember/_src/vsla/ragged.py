"""Ragged batches: many 1-D VSLA classes stored back to back in one flat array, no padding.

A :class:`Ragged` holds ``values`` (one 1-D ember array, the rows concatenated) and host metadata
``lengths`` / ``offsets`` (NumPy int64, like a VArray's static shape). Row-wise ``+``, ``-`` and
Hadamard ``*`` follow VSLA zero extension per row (row ``i`` of the result has length
``max(la_i, lb_i)``); each is ONE native call over all rows (the ``ragged_binary`` primitive's call
step), through a jitted function whose flat lengths and row count are named dynamic axes, so one C
compile serves every set of lengths. The result's layout (offsets) is computed on the host from
the lengths. Gradients flow through ``ember.grad``/``vjp`` (the transpose of zero extension is the
slice back to each operand's rows: the primitive again with other roles of the same row table).

Under ``vsla.jit`` a Ragged argument enters as its values (a named axis) and its lengths as an int32
vector (a runtime value, its row count a named axis), so a whole function of Ragged values is one
native program for every set of lengths. There the layouts are computed in the program (exclusive
cumulative sums of the lengths) and a row-wise result is stored at capacity ``len(a.values) +
len(b.values)`` (a symbolic bound of ``sum(max(la_i, lb_i))``; the slack past the rows is never
written or read).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

import ember.numpy as enp
from ember._src.core import Tracer
from ember._src.jit import jit as ember_jit
from ember._src.prims.ragged import ragged_binary, ragged_rowsum
from ember._src.vsla.varray import VArray, array, stack
from ember.errors import TracerError
from ember.tree import register_pytree_node

__all__ = ["Ragged", "ragged"]

_INDEX_MAX = np.iinfo(np.int32).max
_ROLES = (0, 1, 2)  # table columns: the lengths of a's rows, of b's rows, of the result's rows


def _check_values_dtype(dtype: Any, what: str) -> None:
    dt = np.dtype(dtype)
    if dt == np.bool_ or not np.issubdtype(dt, np.number):
        raise TypeError(f"{what}: Ragged values need a numeric dtype, got {dt}")


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _check_lengths(lengths: Any, what: str) -> np.ndarray:
    ln = np.asarray(lengths)
    if ln.ndim != 1 or not (ln.size == 0 or np.issubdtype(ln.dtype, np.integer)):
        raise TypeError(f"{what}: lengths must be a 1-D sequence of integers, got dtype {ln.dtype} "
                        f"and shape {ln.shape}")
    ln = ln.astype(np.int64)
    if ln.size and ln.min() < 0:
        raise ValueError(f"{what}: lengths must be >= 0, got {int(ln.min())} for row {int(ln.argmin())}")
    if int(ln.sum()) > _INDEX_MAX:
        raise OverflowError(f"{what}: {int(ln.sum())} stored elements exceed the ragged limit 2**31 - 1")
    return ln


class Ragged:
    """A batch of 1-D VSLA classes stored back to back: row ``i`` is
    ``values[offsets[i]:offsets[i + 1]]`` (length ``lengths[i]``). Build one with :func:`ragged` or
    :meth:`from_lengths`. ``values`` may extend past the last row (the results of ``vsla.jit``
    are stored at a capacity); that slack is never read.

    Under ``vsla.jit`` the lengths are a runtime int32 vector and ``offsets`` is None (the layout is
    computed in the program); the shape-reading methods (``len``, ``row``, ``to_padded``, ...) then
    raise a ``TracerError``.
    """

    __slots__ = ("values", "lengths", "offsets")

    def __init__(self, values: Any, lengths: Any, offsets: np.ndarray | None = None):
        self.values = values
        self.lengths = lengths
        if isinstance(lengths, np.ndarray):
            self.offsets = _offsets(lengths) if offsets is None else offsets
        else:  # runtime lengths (under vsla.jit)
            self.offsets = None

    @property
    def symbolic(self) -> bool:
        """Whether the lengths are a runtime value (inside ``vsla.jit``) rather than host metadata."""
        return self.offsets is None

    def _static(self, what: str) -> None:
        if self.symbolic:
            raise TracerError(f"vsla.Ragged.{what}: needs the row lengths on the host, but under vsla.jit "
                              "they are a runtime value; call it outside vsla.jit")

    @classmethod
    def from_lengths(cls, values: Any, lengths: Sequence[int] | np.ndarray) -> Ragged:
        """Rows of ``lengths`` cut from the flat 1-D ``values`` (``sum(lengths) == len(values)``)."""
        ln = _check_lengths(lengths, "vsla.Ragged.from_lengths")
        if not isinstance(values, Tracer) and not hasattr(values, "aval"):
            values = np.asarray(values)
        if values.ndim != 1:
            raise ValueError(f"vsla.Ragged.from_lengths: values must be 1-D, got shape {tuple(values.shape)}")
        _check_values_dtype(values.dtype, "vsla.Ragged.from_lengths")
        if values.shape[0] != int(ln.sum()):
            raise ValueError(f"vsla.Ragged.from_lengths: lengths sum to {int(ln.sum())} but values has "
                             f"{values.shape[0]} elements")
        return cls(enp.asarray(values), ln)

    def __len__(self) -> int:
        self._static("__len__")
        return int(self.lengths.size)

    @property
    def dtype(self) -> Any:
        return self.values.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the stored rows (``values`` up to the last row; the host metadata is not counted)."""
        self._static("nbytes")
        return int(self.offsets[-1]) * np.dtype(self.values.dtype).itemsize

    def row(self, i: int) -> VArray:
        """Row ``i`` as a VArray of its stored length."""
        self._static("row")
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"vsla.Ragged.row: index {i} out of range for {n} rows")
        i %= n
        return array(self.values[int(self.offsets[i]):int(self.offsets[i + 1])])

    def to_list(self) -> list[VArray]:
        """Every row as a VArray (of its stored length)."""
        return [self.row(i) for i in range(len(self))]

    unstack = to_list

    def to_padded(self) -> VArray:
        """The rows stacked into one rank-2 VArray padded to the longest row (``vsla.stack``)."""
        self._static("to_padded")
        if len(self) == 0:
            return stack([])  # the same error as vsla.stack
        width = int(self.lengths.max())
        if width == 0:
            return stack([array(np.zeros(0, np.dtype(self.values.dtype)))] * len(self))
        pos = np.arange(width)[None, :]
        keep = pos < self.lengths[:, None]
        idx = np.where(keep, self.offsets[:-1, None] + pos, 0).astype(np.int32)
        rows = enp.where(keep, enp.take(self.values, idx), enp.zeros((), self.values.dtype))
        return array(rows)

    def __repr__(self) -> str:
        if self.symbolic:
            return f"Ragged(lengths={self.lengths}, values={self.values})"
        return f"Ragged(rows={len(self)}, lengths={self.lengths.tolist()}, dtype={np.dtype(self.dtype)})"

    # ---- row-wise algebra ----

    def _binary(self, other: Any, op: str, name: str) -> Ragged:
        if not isinstance(other, Ragged):
            if op == "mul" and np.ndim(other) == 0 and not isinstance(other, VArray):
                return Ragged(self.values * other, self.lengths, self.offsets)
            raise TypeError(f"vsla.Ragged {name}: other must be a Ragged with the same number of rows"
                            + (" (or a scalar)" if op == "mul" else "") + f", got {type(other).__name__}")
        ra, rb = _rows(self), _rows(other)
        if not ra == rb:
            raise ValueError(f"vsla.Ragged {name}: the operands have {ra} and {rb} rows")
        if self.symbolic or other.symbolic:
            return _rowwise_runtime(self, other, op)
        return _rowwise(self, other, op)

    def __add__(self, other: Any) -> Ragged:
        return self._binary(other, "add", "+")

    def __sub__(self, other: Any) -> Ragged:
        return self._binary(other, "sub", "-")

    def __mul__(self, other: Any) -> Ragged:
        return self._binary(other, "mul", "*")

    def __rmul__(self, other: Any) -> Ragged:
        return self._binary(other, "mul", "*")

    def __neg__(self) -> Ragged:
        return Ragged(-self.values, self.lengths, self.offsets)

    def map(self, f: Any) -> Ragged:
        """A unary map with ``f(0) == 0`` (relu, tanh, sin, ...) applied to every stored element."""
        return Ragged(f(self.values), self.lengths, self.offsets)

    def sum(self) -> Any:
        """The sum of each row: a 1-D array of ``len(self)`` values (0 for an empty row)."""
        return _rowsum(self)

    def mean(self) -> Any:
        """The mean of each row over its stored length (0 for an empty row)."""
        dt = np.dtype(self.values.dtype)
        if self.symbolic:
            return _rowsum(self) / enp.maximum(self.lengths, 1).astype(dt)
        return _rowsum(self) * enp.asarray((1.0 / np.maximum(self.lengths, 1)).astype(dt))


def ragged(rows: Sequence[Any], dtype: Any = None) -> Ragged:
    """A :class:`Ragged` of ``rows`` (1-D array-likes or VArrays, each its logical extent); float64
    host data becomes float32 unless ``dtype`` says otherwise (as :func:`vsla.array`)."""
    if isinstance(rows, Ragged):
        return rows
    parts, lengths = [], []
    for i, r in enumerate(rows):
        x = np.asarray(r.to_numpy() if isinstance(r, VArray) and not r.symbolic else r)
        if x.ndim != 1:
            raise ValueError(f"vsla.ragged: row {i} has rank {x.ndim} (shape {x.shape}); Ragged rows are 1-D")
        _check_values_dtype(x.dtype, f"vsla.ragged: row {i}")
        parts.append(x)
        lengths.append(x.size)
    if dtype is None:
        dtype = np.result_type(*parts) if parts else np.float32
        dtype = np.float32 if dtype == np.float64 else dtype
    _check_values_dtype(dtype, "vsla.ragged")
    flat = np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)
    return Ragged(enp.asarray(flat), _check_lengths(np.array(lengths, np.int64), "vsla.ragged"))


@functools.cache
def _binary_fn(op: str) -> Any:
    """The jitted row-wise op: flat lengths, row count and result length are named axes (the result
    length is read from a zero-size argument of that shape), so one compile serves every layout."""
    def fn(x: Any, y: Any, table: Any, carrier: Any) -> Any:
        return ragged_binary(x, y, table, op=op, roles=_ROLES, total=carrier.shape[0])

    fn.__name__ = f"ragged_{op}"
    return ember_jit(fn, dynamic_axes=[("ta",), ("tb",), ("rows", None), ("to", None)])


@functools.cache
def _rowsum_fn() -> Any:
    return ember_jit(lambda x, table: ragged_rowsum(x, table, roles=(0,)),
                     dynamic_axes=[("t",), ("rows", None)])


def _flat(values: Any, n: int) -> Any:
    """``values``, or one zero when the batch stores nothing (a named axis binds sizes >= 1)."""
    return values if n else enp.zeros((1,), values.dtype)


def _rowwise(a: Ragged, b: Ragged, op: str) -> Ragged:
    da, db = np.dtype(a.values.dtype), np.dtype(b.values.dtype)
    dt = da if da == db else np.dtype(enp.result_type(da, db))
    xa = a.values if da == dt else a.values.astype(dt)
    xb = b.values if db == dt else b.values.astype(dt)
    lo = np.maximum(a.lengths, b.lengths)
    oo = _offsets(lo)
    total = int(oo[-1])
    if total == 0:
        return Ragged(enp.zeros((0,), dt), lo, oo)
    table = np.empty((lo.size, 3), np.int32)
    table[:, 0], table[:, 1], table[:, 2] = a.lengths, b.lengths, lo
    out = _binary_fn(op)(_flat(xa, int(a.offsets[-1])), _flat(xb, int(b.offsets[-1])), table,
                         np.empty((total, 0), np.int8))
    return Ragged(out, lo, oo)


def _rows(r: Ragged) -> Any:
    """The row count (a symbolic dim under vsla.jit)."""
    return r.lengths.shape[0]


def _runtime_lengths(r: Ragged) -> Any:
    """The row lengths as an int32 array of the program (under vsla.jit)."""
    return (r.lengths if r.symbolic else enp.asarray(r.lengths)).astype(np.int32)


def _rowwise_runtime(a: Ragged, b: Ragged, op: str) -> Ragged:
    """``_rowwise`` with the lengths a runtime value; the result at capacity
    ``len(a.values) + len(b.values)``."""
    dt = np.dtype(enp.result_type(a.values.dtype, b.values.dtype))
    la, lb = _runtime_lengths(a), _runtime_lengths(b)
    lo = enp.maximum(la, lb)
    table = enp.stack([la, lb, lo], axis=1)
    out = ragged_binary(a.values.astype(dt), b.values.astype(dt), table, op=op, roles=_ROLES,
                        total=a.values.shape[0] + b.values.shape[0])
    return Ragged(out, lo)


def _rowsum(a: Ragged) -> Any:
    dt = np.dtype(a.values.dtype)
    if a.symbolic:
        return ragged_rowsum(a.values, _runtime_lengths(a)[:, None], roles=(0,))
    if len(a) == 0:
        return enp.zeros((0,), dt)
    table = a.lengths.astype(np.int32)[:, None]
    return _rowsum_fn()(_flat(a.values, int(a.offsets[-1])), table)


class _Lengths:
    """Pytree metadata of a Ragged: its row lengths (hashable, compared by value)."""

    __slots__ = ("lengths", "_key")

    def __init__(self, lengths: np.ndarray):
        self.lengths = lengths
        self._key = lengths.tobytes()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Lengths) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"lengths={self.lengths.tolist()}"


_RUNTIME = "runtime-lengths"


def _flatten(r: Ragged) -> tuple[tuple, Any]:
    if r.symbolic:
        return (r.values, r.lengths), _RUNTIME
    return (r.values,), _Lengths(r.lengths)


def _unflatten(aux: Any, ch: Any) -> Ragged:
    return Ragged(ch[0], ch[1]) if aux == _RUNTIME else Ragged(ch[0], aux.lengths)


register_pytree_node(Ragged, _flatten, _unflatten)


def jit_leaves(r: Ragged, what: str) -> tuple[Any, Any]:
    """The two leaves a Ragged argument of ``vsla.jit`` enters as: its values (at least one element:
    a named axis binds sizes >= 1) and its lengths as int32 (a runtime value)."""
    if r.symbolic:
        return r.values, r.lengths
    if len(r) == 0:
        raise ValueError(f"{what}: a Ragged argument needs at least one row")
    return _flat(r.values, r.values.shape[0]), r.lengths.astype(np.int32)


def from_runtime(r: Ragged) -> Ragged:
    """A result of ``vsla.jit``: its lengths are concrete now, so they become host metadata again
    (under an enclosing transformation they stay traced)."""
    if not r.symbolic or isinstance(r.lengths, Tracer):
        return r
    return Ragged(r.values, np.asarray(r.lengths).astype(np.int64).reshape(-1))
