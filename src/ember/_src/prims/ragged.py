"""The ``ragged_binary`` primitive: a row-wise binary op of two ragged batches under zero extension.

A ragged batch is a flat 1-D array of rows stored back to back from position 0 (no padding; the
array may extend past the last row). ``ragged_binary(x, y, table, op=, roles=, total=)`` reads the
row lengths from ``table``, an int32 or int64 ``(rows, k)`` matrix (a runtime value), and
``roles``, three column indices of ``table`` (``-1``: absent, every row of length 0): the lengths
of the rows of ``x``, of ``y`` and of the result (of length ``total``). A row's offset is the sum
of the lengths before it (computed in the step: one pass over the table); a row that would end past
its array is cut there (a table that does not fit never reads or writes outside the arrays).

Row ``i`` of the result is ``op(xe, ye)`` at positions ``p < lo_i``, where ``xe[p]`` is
``x[ox_i + p]`` for ``p < lx_i`` and ``0`` past it (VSLA zero extension), ``ye`` likewise; ``op``
is ``add``, ``sub`` or ``mul``. Positions of the result past its last row are unspecified. With
the result lengths ``max(lx_i, ly_i)`` it is VSLA's ``+``, ``-`` and Hadamard product per row;
with a result role equal to an operand's role it is the slice back to that operand's rows (the
transpose of zero extension), so the derivatives are the primitive again, on the same table with
other roles. One native call step runs it (``native/emit/ragged.py``, ``csrc/ragged.h``): one
pass over the rows, touching only the stored data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import shapes as sh
from ember._src.core import Primitive, ShapedArray
from ember.errors import DTypeError, ShapeError

OPS = ("add", "sub", "mul")
ABSENT = -1

ragged_binary_p = Primitive("ragged_binary")


def _cols(table: np.ndarray, col: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, lengths) of the rows whose lengths are column ``col`` (-1: all zero), each row cut
    to end within ``cap`` elements (as the native step)."""
    ln = np.zeros(table.shape[0], np.int64) if col < 0 else np.maximum(table[:, col].astype(np.int64), 0)
    end = np.minimum(np.cumsum(ln), cap)
    off = np.concatenate([[0], end[:-1]]).astype(np.int64)
    return off, end - off


def _extend(v: np.ndarray, off: np.ndarray, ln: np.ndarray, oo: np.ndarray, lo: np.ndarray,
            total: int) -> np.ndarray:
    """``v``'s rows zero-extended (or cut) into the result layout."""
    out = np.zeros(total, v.dtype)  # (positions outside every result row: zero here)
    for a, n, b, m in zip(off, ln, oo, lo):
        k = min(int(n), int(m))
        out[b:b + k] = v[a:a + k]
    return out


def _impl(x: np.ndarray, y: np.ndarray, table: np.ndarray, *, op: str, roles: tuple,
          total: int) -> np.ndarray:
    ox, lx = _cols(table, roles[0], x.shape[0])
    oy, ly = _cols(table, roles[1], y.shape[0])
    oo, lo = _cols(table, roles[2], total)
    xe = _extend(x, ox, lx, oo, lo, total)
    ye = _extend(y, oy, ly, oo, lo, total)
    with np.errstate(all="ignore"):
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op](xe, ye).astype(x.dtype)


def _abstract(x: ShapedArray, y: ShapedArray, table: ShapedArray, *, op: str, roles: tuple,
              total: Any) -> ShapedArray:
    if op not in OPS:
        raise ValueError(f"ragged_binary: op must be one of {OPS}, got {op!r}")
    if x.ndim != 1 or y.ndim != 1:
        raise ShapeError(f"ragged_binary: operands must be 1-D, got {sh.shape_str(x.shape)} and "
                         f"{sh.shape_str(y.shape)}")
    if np.dtype(x.dtype) != np.dtype(y.dtype):
        raise DTypeError(f"ragged_binary: operands need one dtype, got {x.dtype} and {y.dtype}")
    if table.ndim != 2 or np.dtype(table.dtype) not in (np.int32, np.int64):
        raise DTypeError(f"ragged_binary: table must be a 2-D int32 or int64 array, got {table.dtype}"
                         f"{sh.shape_str(table.shape)}")
    if len(roles) != 3 or roles[2] < 0:
        raise ValueError(f"ragged_binary: roles must be three column indices with a result role, got {roles}")
    return ShapedArray((total,), x.dtype, x.weak_type and y.weak_type)


def ragged_binary(x: Any, y: Any, table: Any, *, op: str, roles: tuple, total: Any) -> Any:
    """Row-wise ``op`` (``"add"``, ``"sub"``, ``"mul"``) of the ragged batches ``x`` and ``y``
    (flat 1-D arrays of one dtype) into a flat result of length ``total``; the row layouts are
    columns ``roles`` of the int32/int64 matrix ``table`` (see the module docstring)."""
    return ragged_binary_p.bind(x, y, table, op=op, roles=tuple(int(r) for r in roles), total=total)


def _bind(x: Any, y: Any, table: Any, op: str, rx: int, ry: int, ro: int, total: Any) -> Any:
    return ragged_binary_p.bind(x, y, table, op=op, roles=(rx, ry, ro), total=total)


def _jvp(primals: list, tangents: list, *, op: str, roles: tuple, total: Any) -> tuple[list, list]:
    (x, y, table), (tx, ty, _) = primals, tangents
    rx, ry, ro = roles
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


def _transpose(ct: Any, x: Any, y: Any, table: Any, *, op: str, roles: tuple, total: Any) -> list:
    rx, ry, ro = roles
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


def _check_table(name: str, table: ShapedArray, roles: tuple) -> None:
    if table.ndim != 2 or np.dtype(table.dtype) not in (np.int32, np.int64):
        raise DTypeError(f"{name}: table must be a 2-D int32 or int64 array, got {table.dtype}"
                         f"{sh.shape_str(table.shape)}")
    if len(roles) != 1 or roles[0] < 0:
        raise ValueError(f"{name}: roles must be the one length column, got {roles}")


def _rowsum_impl(x: np.ndarray, table: np.ndarray, *, roles: tuple) -> np.ndarray:
    off, ln = _cols(table, roles[0], x.shape[0])
    acc = np.float64 if np.issubdtype(x.dtype, np.floating) else x.dtype
    return np.array([x[a:a + n].sum(dtype=acc) for a, n in zip(off, ln)], acc).astype(x.dtype)


def _rowsum_abstract(x: ShapedArray, table: ShapedArray, *, roles: tuple) -> ShapedArray:
    _check_table("ragged_rowsum", table, roles)
    if x.ndim != 1:
        raise ShapeError(f"ragged_rowsum: the operand must be 1-D, got {sh.shape_str(x.shape)}")
    return ShapedArray((table.shape[0],), x.dtype, x.weak_type)


def _rowbroadcast_impl(v: np.ndarray, table: np.ndarray, *, roles: tuple, total: int) -> np.ndarray:
    off, ln = _cols(table, roles[0], total)
    out = np.zeros(total, v.dtype)
    for i, (a, n) in enumerate(zip(off, ln)):
        out[a:a + n] = v[i]
    return out


def _rowbroadcast_abstract(v: ShapedArray, table: ShapedArray, *, roles: tuple, total: Any) -> ShapedArray:
    _check_table("ragged_rowbroadcast", table, roles)
    if v.ndim != 1:
        raise ShapeError(f"ragged_rowbroadcast: the operand must be 1-D, got {sh.shape_str(v.shape)}")
    return ShapedArray((total,), v.dtype, v.weak_type)


def ragged_rowsum(x: Any, table: Any, *, roles: tuple) -> Any:
    """The sum of each row of the flat ragged batch ``x`` (row lengths in column ``roles[0]`` of
    ``table``, rows back to back from 0): one value per table row (0 for an empty row)."""
    return ragged_rowsum_p.bind(x, table, roles=tuple(int(r) for r in roles))


def _rowsum_jvp(primals: list, tangents: list, *, roles: tuple) -> tuple[list, list]:
    (x, table), (tx, _) = primals, tangents
    out = ragged_rowsum_p.bind(x, table, roles=roles)
    tan = ad.Zero.from_value(out) if ad.is_zero(tx) else ragged_rowsum_p.bind(tx, table, roles=roles)
    return [out], [tan]


def _rowsum_transpose(ct: Any, x: Any, table: Any, *, roles: tuple) -> list:
    if ad.is_zero(ct):
        return [ad.Zero(x.aval), None]
    return [ragged_rowbroadcast_p.bind(ct, table, roles=roles, total=x.aval.shape[0]), None]


def _rowbroadcast_jvp(primals: list, tangents: list, *, roles: tuple, total: Any) -> tuple[list, list]:
    (v, table), (tv, _) = primals, tangents
    out = ragged_rowbroadcast_p.bind(v, table, roles=roles, total=total)
    if ad.is_zero(tv):
        return [out], [ad.Zero.from_value(out)]
    return [out], [ragged_rowbroadcast_p.bind(tv, table, roles=roles, total=total)]


def _rowbroadcast_transpose(ct: Any, v: Any, table: Any, *, roles: tuple, total: Any) -> list:
    return [ad.Zero(v.aval) if ad.is_zero(ct) else ragged_rowsum_p.bind(ct, table, roles=roles), None]


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
