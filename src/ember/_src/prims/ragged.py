"""The ``ragged_binary`` primitive: a row-wise binary op of two ragged batches under zero extension.

A ragged batch is a flat 1-D array of rows stored back to back from position 0 (no padding; the
array may extend past the last row); each row is a C-ordered block of ``rank`` axes. The row shapes
are in ``table``, an int32 or int64 ``(rows, k)`` matrix (a runtime value): ``roles`` holds, for
``x``, ``y`` and the result, the first of ``rank`` consecutive columns with the sizes of that
operand's rows (``-1``: absent, every row empty). A row's offset is the sum of the sizes (products
of the shapes) before it, computed in the step in one pass over the table; a row that would end
past its array is cut on its leading axis to fit (a table that does not fit never reads or writes
outside the arrays).

Row ``i`` of the result has the shape ``so_i`` of its columns; at index ``p`` it is ``op(xe[p],
ye[p])``, where ``xe[p]`` is ``x``'s row ``i`` at ``p`` when ``p`` lies inside its shape on every
axis and ``0`` otherwise (VSLA zero extension), ``ye`` likewise; ``op`` is ``add``, ``sub`` or
``mul``. Positions of the result past its last row are unspecified. With result shapes the
elementwise maxima of the operands' it is VSLA's ``+``, ``-`` and Hadamard product per row; with a
result role equal to an operand's role it is the slice back to that operand's rows (the transpose of
zero extension), so the derivatives are the primitive again, on the same table with other roles.
One native call step runs it (``native/emit/ragged.py``, ``csrc/ragged.h``): one pass over the
rows, touching only the stored data.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import shapes as sh
from ember._src.core import Primitive, ShapedArray
from ember.errors import DTypeError, ShapeError

OPS = ("add", "sub", "mul")
ABSENT = -1
MAX_RANK = 8  # axes of a row (the native step's index vector)

ragged_binary_p = Primitive("ragged_binary")


def layout(table: np.ndarray, col: int, rank: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, shapes ``(rows, rank)``) of the rows whose sizes are columns ``col .. col + rank``
    (``-1``: every row empty; negative sizes count as 0), each row cut on its leading axis to end
    within ``cap`` elements (as the native step)."""
    rows = table.shape[0]
    shp = np.zeros((rows, rank), np.int64)
    off = np.zeros(rows, np.int64)
    if col < 0:
        return off, shp
    run = 0
    for r in range(rows):
        dims = [max(int(d), 0) for d in table[r, col:col + rank]]
        rest = math.prod(dims[1:])
        if rest:
            dims[0] = min(dims[0], (cap - run) // rest)
        size = dims[0] * rest
        off[r] = run
        shp[r] = dims if size else 0  # an empty row has the shape 0 on every axis
        run += size
    return off, shp


def _row(v: np.ndarray, off: int, shape: np.ndarray) -> np.ndarray:
    return v[off:off + int(np.prod(shape))].reshape(tuple(int(d) for d in shape))


def _extended(v: np.ndarray, off: int, shape: np.ndarray, to: np.ndarray) -> np.ndarray:
    """Row ``v[off:]`` of ``shape`` zero-extended (or cut) to the shape ``to``."""
    out = np.zeros(tuple(int(d) for d in to), v.dtype)
    part = tuple(slice(0, int(min(a, b))) for a, b in zip(shape, to))
    out[part] = _row(v, off, shape)[part]
    return out


def _impl(x: np.ndarray, y: np.ndarray, table: np.ndarray, *, op: str, roles: tuple, total: int,
          rank: int = 1) -> np.ndarray:
    ox, sx = layout(table, roles[0], rank, x.shape[0])
    oy, sy = layout(table, roles[1], rank, y.shape[0])
    oo, so = layout(table, roles[2], rank, total)
    out = np.zeros(total, x.dtype)  # (positions past the last row: zero here)
    f = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op]
    with np.errstate(all="ignore"):
        for r in range(table.shape[0]):
            n = int(np.prod(so[r]))
            xe, ye = _extended(x, ox[r], sx[r], so[r]), _extended(y, oy[r], sy[r], so[r])
            out[oo[r]:oo[r] + n] = f(xe, ye).ravel()
    return out


def _check_roles(name: str, table: ShapedArray, roles: tuple, rank: int, n: int) -> None:
    if np.dtype(table.dtype) not in (np.int32, np.int64) or table.ndim != 2:
        raise DTypeError(f"{name}: table must be a 2-D int32 or int64 array, got {table.dtype}"
                         f"{sh.shape_str(table.shape)}")
    if not isinstance(rank, int) or not 1 <= rank <= MAX_RANK:
        raise ValueError(f"{name}: rank must be an int in 1..{MAX_RANK}, got {rank!r}")
    k = table.shape[1]
    if len(roles) != n or roles[-1] < 0 or any(
            r < -1 or (r >= 0 and isinstance(k, int) and r + rank > k) for r in roles):
        raise ValueError(f"{name}: roles must be {n} first columns of {rank} size columns each within the "
                         f"table's {k} columns (the last present), got {roles}")


def _abstract(x: ShapedArray, y: ShapedArray, table: ShapedArray, *, op: str, roles: tuple,
              total: Any, rank: int = 1) -> ShapedArray:
    if op not in OPS:
        raise ValueError(f"ragged_binary: op must be one of {OPS}, got {op!r}")
    if x.ndim != 1 or y.ndim != 1:
        raise ShapeError(f"ragged_binary: operands must be 1-D, got {sh.shape_str(x.shape)} and "
                         f"{sh.shape_str(y.shape)}")
    if np.dtype(x.dtype) != np.dtype(y.dtype):
        raise DTypeError(f"ragged_binary: operands need one dtype, got {x.dtype} and {y.dtype}")
    _check_roles("ragged_binary", table, roles, rank, 3)
    return ShapedArray((total,), x.dtype, x.weak_type and y.weak_type)


def ragged_binary(x: Any, y: Any, table: Any, *, op: str, roles: tuple, total: Any, rank: int = 1) -> Any:
    """Row-wise ``op`` (``"add"``, ``"sub"``, ``"mul"``) of the ragged batches ``x`` and ``y``
    (flat 1-D arrays of one dtype) into a flat result of length ``total``; the row shapes (``rank``
    axes) are columns ``roles`` of the int32/int64 matrix ``table`` (see the module docstring)."""
    return ragged_binary_p.bind(x, y, table, op=op, roles=tuple(int(r) for r in roles), total=total,
                                rank=int(rank))


def _bind_roles(x: Any, y: Any, table: Any, op: str, rx: int, ry: int, ro: int, total: Any, rank: int) -> Any:
    return ragged_binary_p.bind(x, y, table, op=op, roles=(rx, ry, ro), total=total, rank=rank)


def _jvp(primals: list, tangents: list, *, op: str, roles: tuple, total: Any,
         rank: int = 1) -> tuple[list, list]:
    (x, y, table), (tx, ty, _) = primals, tangents
    rx, ry, ro = roles
    _bind = functools.partial(_bind_roles, rank=rank)
    out = _bind(x, y, table, op, rx, ry, ro, total)
    if ad.is_zero(tx) and ad.is_zero(ty):
        return [out], [ad.Zero.from_value(out)]
    if op == "mul":
        t1 = ad.Zero.from_value(out) if ad.is_zero(tx) else _bind(tx, y, table, op, rx, ry, ro, total)
        t2 = ad.Zero.from_value(out) if ad.is_zero(ty) else _bind(x, ty, table, op, rx, ry, ro, total)
        return [out], [ad.add_tangents(t1, t2)]
    # add / sub are linear: a zero tangent is an absent role (its other operand fills the slot)
    if ad.is_zero(tx):
        return [out], [_bind(ty, ty, table, op, ABSENT, ry, ro, total)]
    if ad.is_zero(ty):
        return [out], [_bind(tx, tx, table, op, rx, ABSENT, ro, total)]
    return [out], [_bind(tx, ty, table, op, rx, ry, ro, total)]


def _transpose(ct: Any, x: Any, y: Any, table: Any, *, op: str, roles: tuple, total: Any,
               rank: int = 1) -> list:
    rx, ry, ro = roles
    _bind = functools.partial(_bind_roles, rank=rank)
    ux, uy = isinstance(x, ad.UndefPrimal), isinstance(y, ad.UndefPrimal)
    if op == "mul" and ux and uy:
        raise TypeError("ragged_binary(mul) is not linear in both operands at once")
    out: list = [None, None, None]
    for i, (u, mine, other_val, other_roles) in enumerate(((ux, rx, y, ry), (uy, ry, x, rx))):
        if not u:
            continue
        aval = (x if i == 0 else y).aval
        if ad.is_zero(ct) or mine < 0:
            out[i] = ad.Zero(aval)
        elif op == "mul":  # d x_i = ct_i * y_i on x's rows
            out[i] = _bind(ct, other_val, table, "mul", ro, other_roles, mine, aval.shape[0])
        elif op == "sub" and i == 1:  # d y_i = -ct_i on y's rows
            out[i] = _bind(ct, ct, table, "sub", ABSENT, ro, mine, aval.shape[0])
        else:  # the slice back to the operand's rows
            out[i] = _bind(ct, ct, table, "add", ro, ABSENT, mine, aval.shape[0])
    return out


ragged_binary_p.impl = _impl
ragged_binary_p.abstract_eval = _abstract
ragged_binary_p.jvp = _jvp
ragged_binary_p.transpose = _transpose
ragged_binary_p.na("batch", "a ragged batch is already a batch of rows: vmap over ragged batches is not "
                   "defined (map over a Ragged's rows with its row-wise operations)")


# ---- ragged_rowsum / ragged_rowbroadcast: the sum of each row, and its transpose ----

ragged_rowsum_p = Primitive("ragged_rowsum", linear=True)
ragged_rowbroadcast_p = Primitive("ragged_rowbroadcast", linear=True)


def _sizes(table: np.ndarray, col: int, rank: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    off, shp = layout(table, col, rank, cap)
    return off, np.prod(shp, axis=1).astype(np.int64)


def _rowsum_impl(x: np.ndarray, table: np.ndarray, *, roles: tuple, rank: int = 1) -> np.ndarray:
    off, ln = _sizes(table, roles[0], rank, x.shape[0])
    acc = np.float64 if np.issubdtype(x.dtype, np.floating) else x.dtype
    return np.array([x[a:a + n].sum(dtype=acc) for a, n in zip(off, ln)], acc).astype(x.dtype)


def _rowsum_abstract(x: ShapedArray, table: ShapedArray, *, roles: tuple, rank: int = 1) -> ShapedArray:
    _check_roles("ragged_rowsum", table, roles, rank, 1)
    if x.ndim != 1:
        raise ShapeError(f"ragged_rowsum: the operand must be 1-D, got {sh.shape_str(x.shape)}")
    return ShapedArray((table.shape[0],), x.dtype, x.weak_type)


def _rowbroadcast_impl(v: np.ndarray, table: np.ndarray, *, roles: tuple, total: int,
                       rank: int = 1) -> np.ndarray:
    off, ln = _sizes(table, roles[0], rank, total)
    out = np.zeros(total, v.dtype)
    for i, (a, n) in enumerate(zip(off, ln)):
        out[a:a + n] = v[i]
    return out


def _rowbroadcast_abstract(v: ShapedArray, table: ShapedArray, *, roles: tuple, total: Any,
                           rank: int = 1) -> ShapedArray:
    _check_roles("ragged_rowbroadcast", table, roles, rank, 1)
    if v.ndim != 1:
        raise ShapeError(f"ragged_rowbroadcast: the operand must be 1-D, got {sh.shape_str(v.shape)}")
    return ShapedArray((total,), v.dtype, v.weak_type)


def ragged_rowsum(x: Any, table: Any, *, roles: tuple, rank: int = 1) -> Any:
    """The sum of each row of the flat ragged batch ``x`` (row shapes in the ``rank`` columns from
    ``roles[0]`` of ``table``, rows back to back from 0): one value per table row (0 for an empty
    row)."""
    return ragged_rowsum_p.bind(x, table, roles=tuple(int(r) for r in roles), rank=int(rank))


def _rowsum_jvp(primals: list, tangents: list, *, roles: tuple, rank: int = 1) -> tuple[list, list]:
    (x, table), (tx, _) = primals, tangents
    out = ragged_rowsum_p.bind(x, table, roles=roles, rank=rank)
    if ad.is_zero(tx):
        return [out], [ad.Zero.from_value(out)]
    return [out], [ragged_rowsum_p.bind(tx, table, roles=roles, rank=rank)]


def _rowsum_transpose(ct: Any, x: Any, table: Any, *, roles: tuple, rank: int = 1) -> list:
    if ad.is_zero(ct):
        return [ad.Zero(x.aval), None]
    return [ragged_rowbroadcast_p.bind(ct, table, roles=roles, total=x.aval.shape[0], rank=rank), None]


def _rowbroadcast_jvp(primals: list, tangents: list, *, roles: tuple, total: Any,
                      rank: int = 1) -> tuple[list, list]:
    (v, table), (tv, _) = primals, tangents
    out = ragged_rowbroadcast_p.bind(v, table, roles=roles, total=total, rank=rank)
    if ad.is_zero(tv):
        return [out], [ad.Zero.from_value(out)]
    return [out], [ragged_rowbroadcast_p.bind(tv, table, roles=roles, total=total, rank=rank)]


def _rowbroadcast_transpose(ct: Any, v: Any, table: Any, *, roles: tuple, total: Any, rank: int = 1) -> list:
    if ad.is_zero(ct):
        return [ad.Zero(v.aval), None]
    return [ragged_rowsum_p.bind(ct, table, roles=roles, rank=rank), None]


ragged_rowsum_p.impl = _rowsum_impl
ragged_rowsum_p.abstract_eval = _rowsum_abstract
ragged_rowsum_p.jvp = _rowsum_jvp
ragged_rowsum_p.transpose = _rowsum_transpose
ragged_rowbroadcast_p.impl = _rowbroadcast_impl
ragged_rowbroadcast_p.abstract_eval = _rowbroadcast_abstract
ragged_rowbroadcast_p.jvp = _rowbroadcast_jvp
ragged_rowbroadcast_p.transpose = _rowbroadcast_transpose
for _p in (ragged_rowsum_p, ragged_rowbroadcast_p):
    _p.na("batch", "a ragged batch is already a batch of rows: vmap over ragged batches is not defined")
