"""Ragged batches: many VSLA classes of one rank stored back to back in one flat array, no padding.

A :class:`Ragged` holds ``values`` (one 1-D ember array, the rows concatenated, each row C-ordered)
and host metadata ``shapes`` (``(rows, rank)``), ``lengths`` (elements per row: the row lengths of
1-D rows) and ``offsets`` (NumPy int64, like a VArray's static shape). Row-wise ``+``, ``-`` and
Hadamard ``*`` follow VSLA zero extension per row (row ``i`` of the result has the shape
``max(sa_i, sb_i)`` per axis); each is ONE native call over all rows (the ``ragged_binary``
primitive's call step), through a jitted function whose flat lengths and row count are named
dynamic axes, so one C compile serves every set of shapes. The result's layout is computed on the
host from the shapes. Gradients flow through ``ember.grad``/``vjp`` (the transpose of zero
extension is the slice back to each operand's rows: the primitive again with other roles of the
same row table).

Under ``vsla.jit`` a Ragged argument of 1-D rows enters as its values (a named axis) and its row
lengths as an int32 ``(rows, 1)`` matrix (a runtime value, its row count a named axis), so a whole
function of Ragged values is one native program for every set of lengths. There a row-wise result
is stored at capacity ``len(a.values) + len(b.values)`` (a symbolic bound of ``sum(max(la_i,
lb_i))``; the slack past the rows is never written or read). Rows of rank > 1 have no such bound
(``(1, 5)`` and ``(5, 1)`` promote to 25 elements), so they run eagerly (one native call per op).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

import ember.numpy as enp
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import Tracer
from ember._src.jit import jit as ember_jit
from ember._src.prims.ragged import MAX_RANK, ragged_binary, ragged_rowsum
from ember._src.vsla import ragged_products as rp
from ember._src.vsla.varray import FFT_THRESHOLD, VArray, array, conv, stack
from ember.errors import TracerError
from ember.tree import register_pytree_node

__all__ = ["Ragged", "ragged"]

_INDEX_MAX = np.iinfo(np.int32).max


def _check_values_dtype(dtype: Any, what: str) -> None:
    dt = np.dtype(dtype)
    if dt == np.bool_ or not np.issubdtype(dt, np.number):
        raise TypeError(f"{what}: Ragged values need a numeric dtype, got {dt}")


def _offsets(sizes: np.ndarray) -> np.ndarray:
    out = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def _sizes(shapes: np.ndarray) -> np.ndarray:
    return shapes[:, 0] if shapes.shape[1] == 1 else np.prod(shapes, axis=1)


def _check_shapes(shapes: Any, what: str, name: str = "shapes") -> np.ndarray:
    """``shapes`` as an int64 ``(rows, rank)`` matrix, checked (non-negative, total within int32)."""
    sp = np.asarray(shapes)
    if sp.ndim != 2 or not (sp.size == 0 or np.issubdtype(sp.dtype, np.integer)):
        raise TypeError(f"{what}: {name} must be integers, one row per Ragged row, got dtype {sp.dtype} "
                        f"and shape {sp.shape}")
    if not 1 <= sp.shape[1] <= MAX_RANK:
        raise ValueError(f"{what}: rows of rank {sp.shape[1]} are not supported (1..{MAX_RANK})")
    sp = sp.astype(np.int64)
    if sp.size and sp.min() < 0:
        row = int(np.argwhere(sp < 0)[0][0])
        got = sp[row].tolist() if sp.shape[1] > 1 else int(sp[row, 0])
        raise ValueError(f"{what}: {name} must be >= 0, got {got} for row {row}")
    total = sum(int(np.prod(s, dtype=object)) for s in sp) if sp.shape[1] > 1 else int(sp.sum())
    if total > _INDEX_MAX:
        raise OverflowError(f"{what}: {total} stored elements exceed the ragged limit 2**31 - 1")
    return sp


def _check_lengths(lengths: Any, what: str) -> np.ndarray:
    ln = np.asarray(lengths)
    if ln.ndim != 1:
        raise TypeError(f"{what}: lengths must be a 1-D sequence of integers, got shape {ln.shape}")
    return _check_shapes(ln.reshape(-1, 1), what, "lengths")


class Ragged:
    """A batch of VSLA classes of one rank stored back to back: row ``i`` is
    ``values[offsets[i]:offsets[i + 1]]`` reshaped to ``shapes[i]`` (``lengths[i]`` elements).
    Build one with :func:`ragged`, :meth:`from_lengths` or :meth:`from_shapes`. ``values`` may
    extend past the last row (the results of ``vsla.jit`` are stored at a capacity); that slack is
    never read.

    Under ``vsla.jit`` the shapes are a runtime int32 matrix and ``offsets`` is None (the layout is
    computed in the native step); the shape-reading methods (``len``, ``row``, ``to_padded``, ...)
    then raise a ``TracerError``.
    """

    __slots__ = ("values", "shapes", "offsets", "row_cap")

    def __init__(self, values: Any, shapes: Any, offsets: np.ndarray | None = None, row_cap: Any = None):
        """``shapes``: host int64 ``(rows, rank)`` (1-D: the row lengths of 1-D rows) or, under
        ``vsla.jit``, a runtime int32 matrix; ``offsets``: the host offsets, when known; ``row_cap``:
        under ``vsla.jit``, a bound on the rows' sizes (a symbolic dim; None: the stored size).
        Unchecked: use :func:`ragged`, :meth:`from_lengths` or :meth:`from_shapes` to build from
        data."""
        if isinstance(shapes, np.ndarray) and shapes.ndim == 1:
            shapes = shapes.reshape(-1, 1)
        self.values = values
        self.shapes = shapes
        self.row_cap = row_cap
        if isinstance(shapes, np.ndarray):
            self.offsets = _offsets(_sizes(shapes)) if offsets is None else offsets
        else:  # runtime shapes (under vsla.jit)
            self.offsets = None

    @property
    def symbolic(self) -> bool:
        """Whether the shapes are a runtime value (inside ``vsla.jit``) rather than host metadata."""
        return self.offsets is None

    @property
    def rank(self) -> int:
        """The rank of every row."""
        return int(self.shapes.shape[1])

    @property
    def lengths(self) -> Any:
        """Elements stored per row (the row lengths of 1-D rows): host int64 (a runtime int32 vector
        under ``vsla.jit``)."""
        if self.symbolic:
            return self.shapes[:, 0] if self.rank == 1 else enp.prod(self.shapes, axis=1)
        return _sizes(self.shapes)

    def _static(self, what: str) -> None:
        if self.symbolic:
            raise TracerError(f"vsla.Ragged.{what}: needs the row shapes on the host, but under vsla.jit "
                              "they are a runtime value; call it outside vsla.jit")

    @classmethod
    def from_lengths(cls, values: Any, lengths: Sequence[int] | np.ndarray) -> Ragged:
        """1-D rows of ``lengths`` cut from the flat 1-D ``values`` (``sum(lengths) == len(values)``)."""
        return cls._from(values, _check_lengths(lengths, "vsla.Ragged.from_lengths"), "from_lengths")

    @classmethod
    def from_shapes(cls, values: Any, shapes: Any) -> Ragged:
        """Rows of ``shapes`` (an integer ``(rows, rank)`` matrix) cut from the flat 1-D ``values``,
        each C-ordered (``values`` holds exactly the rows' elements)."""
        return cls._from(values, _check_shapes(shapes, "vsla.Ragged.from_shapes"), "from_shapes")

    @classmethod
    def _from(cls, values: Any, shapes: np.ndarray, what: str) -> Ragged:
        if not isinstance(values, Tracer) and not hasattr(values, "aval"):
            values = np.asarray(values)
        if values.ndim != 1:
            raise ValueError(f"vsla.Ragged.{what}: values must be 1-D, got shape {tuple(values.shape)}")
        _check_values_dtype(values.dtype, f"vsla.Ragged.{what}")
        n = int(_sizes(shapes).sum())
        if values.shape[0] != n:
            raise ValueError(f"vsla.Ragged.{what}: the rows hold {n} elements but values has "
                             f"{values.shape[0]}")
        return cls(enp.asarray(values), shapes)

    def __len__(self) -> int:
        self._static("__len__")
        return int(self.shapes.shape[0])

    @property
    def dtype(self) -> Any:
        return self.values.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the stored rows (``values`` up to the last row; the host metadata is not counted)."""
        self._static("nbytes")
        return int(self.offsets[-1]) * np.dtype(self.values.dtype).itemsize

    def row(self, i: int) -> VArray:
        """Row ``i`` as a VArray of its stored shape."""
        self._static("row")
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"vsla.Ragged.row: index {i} out of range for {n} rows")
        i %= n
        flat = self.values[int(self.offsets[i]):int(self.offsets[i + 1])]
        return array(flat if self.rank == 1 else enp.reshape(flat, tuple(int(d) for d in self.shapes[i])))

    def to_list(self) -> list[VArray]:
        """Every row as a VArray (of its stored shape)."""
        return [self.row(i) for i in range(len(self))]

    unstack = to_list

    def to_padded(self) -> VArray:
        """The rows stacked into one VArray of rank ``rank + 1``, each padded to the largest size per
        axis (``vsla.stack``)."""
        self._static("to_padded")
        if len(self) == 0 or self.rank > 1:
            return stack(self.to_list())  # (no rows: the same error as vsla.stack)
        lengths = self.shapes[:, 0]
        width = int(lengths.max())
        if width == 0:
            return stack([array(np.zeros(0, np.dtype(self.values.dtype)))] * len(self))
        pos = np.arange(width)[None, :]
        keep = pos < lengths[:, None]
        idx = np.where(keep, self.offsets[:-1, None] + pos, 0).astype(np.int32)
        rows = enp.where(keep, enp.take(self.values, idx), enp.zeros((), self.values.dtype))
        return array(rows)

    def __repr__(self) -> str:
        if self.symbolic:
            return f"Ragged(shapes={self.shapes}, values={self.values})"
        what = (f"lengths={self.shapes[:, 0].tolist()}" if self.rank == 1
                else f"shapes={self.shapes.tolist()}")
        return f"Ragged(rows={len(self)}, {what}, dtype={np.dtype(self.dtype)})"

    # ---- row-wise algebra ----

    def _binary(self, other: Any, op: str, name: str) -> Ragged:
        if not isinstance(other, Ragged):
            if op == "mul" and np.ndim(other) == 0 and not isinstance(other, VArray):
                return self._with_values(self.values * other)
            raise TypeError(f"vsla.Ragged {name}: other must be a Ragged with the same number of rows"
                            + (" (or a scalar)" if op == "mul" else "") + f", got {type(other).__name__}")
        ra, rb = row_count(self), row_count(other)
        if not ra == rb:
            raise ValueError(f"vsla.Ragged {name}: the operands have {ra} and {rb} rows")
        if self.rank != other.rank:
            raise ValueError(f"vsla.Ragged {name}: the operands' rows have ranks {self.rank} and "
                             f"{other.rank}")
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
        return self._with_values(-self.values)

    def _with_values(self, values: Any) -> Ragged:
        return Ragged(values, self.shapes, self.offsets, self.row_cap)

    def map(self, f: Any) -> Ragged:
        """A unary map with ``f(0) == 0`` (relu, tanh, sin, ...) applied to every stored element."""
        return self._with_values(f(self.values))

    def _pair_check(self, other: Any, name: str) -> None:
        if not isinstance(other, Ragged):
            raise TypeError(f"vsla.Ragged.{name}: other must be a Ragged, got {type(other).__name__}")
        self._static(name)
        other._static(name)
        if len(self) != len(other):
            raise ValueError(f"vsla.Ragged.{name}: the operands have {len(self)} and {len(other)} rows")
        if self.rank != 1 or other.rank != 1:
            raise ValueError(f"vsla.Ragged.{name}: defined for rows of rank 1, got ranks {self.rank} and "
                             f"{other.rank}")

    def _runtime_check(self, other: Any, name: str) -> bool:
        """Whether a row-wise product runs on runtime shapes (under ``vsla.jit``), checked."""
        if not isinstance(other, Ragged):
            raise TypeError(f"vsla.Ragged.{name}: other must be a Ragged, got {type(other).__name__}")
        if not (self.symbolic or other.symbolic):
            return False
        if self.rank != 1 or other.rank != 1:
            raise ValueError(f"vsla.Ragged.{name}: defined for rows of rank 1, got ranks {self.rank} and "
                             f"{other.rank}")
        return True

    def conv(self, other: Ragged, method: str = "auto") -> Ragged:
        """Row-wise Model A product: row ``i`` is ``vsla.conv`` of row ``i`` of each operand, of length
        ``la_i + lb_i - 1`` (0 when either row is empty). One batched ``vsla.conv`` of the rows
        padded to the longest (``method`` as there), then one gather of the rows' results. Under
        ``vsla.jit`` the same steps run on the runtime lengths (``ragged_products.py``): one compile
        for every set of lengths."""
        if method not in ("auto", "direct", "fft"):
            raise ValueError(f"vsla.Ragged.conv: method must be 'auto', 'direct' or 'fft', got {method!r}")
        if self._runtime_check(other, "conv"):
            values, shapes, cap = rp.conv_runtime(self, other, method, FFT_THRESHOLD)
            return Ragged(values, shapes, row_cap=cap)
        self._pair_check(other, "conv")
        la, lb = self.shapes[:, 0], other.shapes[:, 0]
        lo = np.where((la > 0) & (lb > 0), la + lb - 1, 0)
        dtype = np.dtype(enp.result_type(self.dtype, other.dtype))
        if len(self) == 0 or not lo.any():
            return Ragged(enp.zeros((0,), dtype), lo)
        full = conv(self.to_padded(), other.to_padded(), method=method).logical()
        width = int(full.shape[-1])
        out_off = _offsets(lo)
        rows = np.repeat(np.arange(len(lo)), lo)
        pos = np.arange(int(out_off[-1])) - np.repeat(out_off[:-1], lo)
        flat = enp.reshape(full, (-1,))
        return Ragged(enp.take(flat, enp.asarray((rows * width + pos).astype(np.int64))), lo, out_off)

    def kron(self, other: Ragged) -> Ragged:
        """Row-wise Model B product: row ``i`` is ``vsla.kron`` of row ``i`` of each operand (``np.kron``
        of the rows' minimal representatives, length ``ma_i * mb_i``). Two gathers and one
        multiply over the flat values (gradients flow to both). Under ``vsla.jit`` the minimal
        lengths are found at run time (``ragged_products.py``; the result is stored at capacity
        ``len(self.values) * row_cap(other)``)."""
        if self._runtime_check(other, "kron"):
            values, shapes, cap = rp.kron_runtime(self, other)
            return Ragged(values, shapes, row_cap=cap)
        self._pair_check(other, "kron")
        ma, mb = _minimal_lengths(self), _minimal_lengths(other)
        lo = ma * mb
        out_off = _offsets(lo)
        rows = np.repeat(np.arange(len(lo)), lo)
        k = np.arange(int(out_off[-1])) - np.repeat(out_off[:-1], lo)
        step = np.maximum(mb[rows], 1)
        ia = self.offsets[:-1][rows] + k // step
        ib = other.offsets[:-1][rows] + k % step
        va = enp.take(self.values, enp.asarray(ia.astype(np.int64)))
        vb = enp.take(other.values, enp.asarray(ib.astype(np.int64)))
        return Ragged(va * vb, lo, out_off)

    def sum(self) -> Any:
        """The sum of each row (over all its elements): a 1-D array of one value per row (0 for an
        empty row)."""
        return _rowsum(self)

    def mean(self) -> Any:
        """The mean of each row over its stored elements (0 for an empty row)."""
        dt = np.dtype(self.values.dtype)
        if self.symbolic:
            return _rowsum(self) / enp.maximum(self.lengths, 1).astype(dt)
        return _rowsum(self) * enp.asarray((1.0 / np.maximum(self.lengths, 1)).astype(dt))


def _minimal_lengths(r: Ragged) -> np.ndarray:
    """Per 1-D row, one past its last nonzero (the minimal representative's length), from the values."""
    vals = np.asarray(r.values)[: int(r.offsets[-1])]
    out = np.zeros(len(r), np.int64)
    nz = np.flatnonzero(vals != 0)
    if nz.size:
        row = np.searchsorted(r.offsets, nz, side="right") - 1
        np.maximum.at(out, row, nz - r.offsets[row] + 1)
    return out


def ragged(rows: Sequence[Any], dtype: Any = None) -> Ragged:
    """A :class:`Ragged` of ``rows`` (array-likes or VArrays of one rank >= 1, each its logical
    extent); 64-bit host data becomes 32-bit unless ``jax_enable_x64`` is on, and an explicit 64-bit
    ``dtype`` warns when it is truncated (as :func:`vsla.array` and ``ember.numpy.asarray``)."""
    if isinstance(rows, Ragged):
        return rows
    parts, shapes, kinds = [], [], []
    for i, r in enumerate(rows):
        x = np.asarray(r.to_numpy() if isinstance(r, VArray) and not r.symbolic else r)
        # Python lists take ember's Python defaults (float32 / int32 / complex64), arrays their dtype
        kinds.append(_PY_DEFAULTS.get(x.dtype, x.dtype) if isinstance(r, (list, tuple)) else x.dtype)
        if isinstance(r, VArray) and not r.symbolic and x.shape != r.shape:  # keep the stored shape
            x = np.pad(x, [(0, s - d) for s, d in zip(r.shape, x.shape)])
        if x.ndim == 0 or (parts and x.ndim != parts[0].ndim):
            first = f" (row 0 has rank {parts[0].ndim})" if parts else ""
            raise ValueError(f"vsla.ragged: row {i} has rank {x.ndim} (shape {x.shape}); the rows of a "
                             f"Ragged share one rank >= 1{first}")
        _check_values_dtype(x.dtype, f"vsla.ragged: row {i}")
        parts.append(x)
        shapes.append(x.shape)
    if dtype is None:  # 64-bit host data stays 64-bit only under jax_enable_x64 (as ember.numpy.asarray)
        dtype = dt.canonicalize(np.result_type(*kinds) if parts else np.float32)
    else:
        dtype = dt.user_dtype(dtype, "vsla.ragged")
    _check_values_dtype(dtype, "vsla.ragged")
    flat = np.concatenate([p.ravel() for p in parts]).astype(dtype) if parts else np.zeros(0, dtype)
    sp = np.array(shapes, np.int64).reshape(len(parts), parts[0].ndim if parts else 1)
    return Ragged(enp.asarray(flat), _check_shapes(sp, "vsla.ragged"))


_PY_DEFAULTS = {np.dtype(np.float64): np.dtype(np.float32), np.dtype(np.int64): np.dtype(np.int32),
                np.dtype(np.complex128): np.dtype(np.complex64)}


@functools.cache
def _binary_fn(op: str, rank: int) -> Any:
    """The jitted row-wise op: flat lengths, row count and result length are named axes (the result
    length is read from a zero-size argument of that shape), so one compile serves every layout."""
    def fn(x: Any, y: Any, table: Any, carrier: Any) -> Any:
        return ragged_binary(x, y, table, op=op, roles=(0, rank, 2 * rank), total=carrier.shape[0],
                             rank=rank)

    fn.__name__ = f"ragged_{op}"
    return ember_jit(fn, dynamic_axes=[("ta",), ("tb",), ("rows", None), ("to", None)])


@functools.cache
def _rowsum_fn(rank: int) -> Any:
    return ember_jit(lambda x, table: ragged_rowsum(x, table, roles=(0,), rank=rank),
                     dynamic_axes=[("t",), ("rows", None)])


def _flat(values: Any, n: int) -> Any:
    """``values``, or one zero when the batch stores nothing (a named axis binds sizes >= 1)."""
    return values if n else enp.zeros((1,), values.dtype)


def _rowwise(a: Ragged, b: Ragged, op: str) -> Ragged:
    da, db = np.dtype(a.values.dtype), np.dtype(b.values.dtype)
    dt = da if da == db else np.dtype(enp.result_type(da, db))
    xa = a.values if da == dt else a.values.astype(dt)
    xb = b.values if db == dt else b.values.astype(dt)
    so = np.maximum(a.shapes, b.shapes)
    oo = _offsets(_sizes(so))
    total = int(oo[-1])
    if total == 0:
        return Ragged(enp.zeros((0,), dt), so, oo)
    rank = a.rank
    table = np.empty((so.shape[0], 3 * rank), np.int32)
    table[:, :rank], table[:, rank:2 * rank], table[:, 2 * rank:] = a.shapes, b.shapes, so
    out = _binary_fn(op, rank)(_flat(xa, int(a.offsets[-1])), _flat(xb, int(b.offsets[-1])), table,
                               np.empty((total, 0), np.int8))
    return Ragged(out, so, oo)


def row_count(r: Ragged) -> Any:
    """The row count (a symbolic dim under vsla.jit)."""
    return r.shapes.shape[0]


def _runtime_shapes(r: Ragged) -> Any:
    """The row shapes as an int32 matrix of the program (under vsla.jit)."""
    return (r.shapes if r.symbolic else enp.asarray(r.shapes)).astype(np.int32)


def _rowwise_runtime(a: Ragged, b: Ragged, op: str) -> Ragged:
    """``_rowwise`` with the shapes a runtime value (1-D rows); the result at capacity
    ``len(a.values) + len(b.values)``."""
    if a.rank != 1:
        raise ValueError(f"vsla.jit: row-wise ops on Ragged rows of rank {a.rank} need the shapes on the "
                         "host (the result size has no bound in the operands' sizes); call them outside "
                         "vsla.jit")
    dt = np.dtype(enp.result_type(a.values.dtype, b.values.dtype))
    sa, sb = _runtime_shapes(a), _runtime_shapes(b)
    so = enp.maximum(sa, sb)
    out = ragged_binary(a.values.astype(dt), b.values.astype(dt), enp.concatenate([sa, sb, so], axis=1),
                        op=op, roles=(0, 1, 2), total=a.values.shape[0] + b.values.shape[0])
    cap = None if a.row_cap is None or b.row_cap is None else sh.dmax(a.row_cap, b.row_cap)
    return Ragged(out, so, row_cap=cap)


def _rowsum(a: Ragged) -> Any:
    dt = np.dtype(a.values.dtype)
    if a.symbolic:
        return ragged_rowsum(a.values, _runtime_shapes(a), roles=(0,), rank=a.rank)
    if len(a) == 0:
        return enp.zeros((0,), dt)
    return _rowsum_fn(a.rank)(_flat(a.values, int(a.offsets[-1])), a.shapes.astype(np.int32))


class _Shapes:
    """Pytree metadata of a Ragged: its row shapes (hashable, compared by value)."""

    __slots__ = ("shapes", "_key")

    def __init__(self, shapes: np.ndarray):
        self.shapes = shapes
        self._key = (shapes.shape, shapes.tobytes())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Shapes) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"shapes={self.shapes.tolist()}"


_RUNTIME = "runtime-shapes"


def _flatten(r: Ragged) -> tuple[tuple, Any]:
    if r.symbolic:
        return (r.values, r.shapes), _RUNTIME
    return (r.values,), _Shapes(r.shapes)


def _unflatten(aux: Any, ch: Any) -> Ragged:
    return Ragged(ch[0], ch[1]) if aux == _RUNTIME else Ragged(ch[0], aux.shapes)


register_pytree_node(Ragged, _flatten, _unflatten)


def jit_leaves(r: Ragged, what: str) -> tuple[Any, Any, Any]:
    """The three leaves a Ragged argument of ``vsla.jit`` enters as: its values (at least one
    element: a named axis binds sizes >= 1), its shapes as int32 (a runtime value) and a zero-size
    carrier of shape ``(row_cap, 0)``, ``row_cap = next_pow2`` of its largest row size (a named axis:
    the bound :mod:`.ragged_products` pads the rows to)."""
    if r.symbolic:
        cap = r.row_cap if r.row_cap is not None else r.values.shape[0]
        return r.values, r.shapes, enp.zeros((cap, 0), np.int8)
    if len(r) == 0:
        raise ValueError(f"{what}: a Ragged argument needs at least one row")
    top = int(_sizes(r.shapes).max())
    cap = 1 << max(top - 1, 0).bit_length()
    return _flat(r.values, r.values.shape[0]), r.shapes.astype(np.int32), np.empty((cap, 0), np.int8)


def from_runtime(r: Ragged) -> Ragged:
    """A result of ``vsla.jit``: its shapes are concrete now, so they become host metadata again
    (under an enclosing transformation they stay traced)."""
    if not r.symbolic or isinstance(r.shapes, Tracer):
        return r
    sp = np.asarray(r.shapes).astype(np.int64)
    return Ragged(r.values, sp.reshape(sp.shape[0], -1))
