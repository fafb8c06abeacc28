"""Backend-internal primitives that the native passes rewrite programs into.

``gemm`` is the fused matrix product ``alpha * op(a) @ op(b) + beta * broadcast(c)``: ``a`` is
``[M, K]`` (``[K, M]`` with ``trans_a``), ``b`` is ``[K, N]`` (``[N, K]`` with ``trans_b``), both
optionally with one shared leading batch dim; ``c`` (optional) is broadcast into the output with
``c_dims`` as in ``broadcast_in_dim``. It maps one-to-one onto a (batched) BLAS ``?gemm`` call.

It appears only in programs produced by :mod:`ember._src.native.passes` (after all
transformations ran), so it has a NumPy implementation and abstract evaluation (the reference
executor and the validator run optimized programs) but no JVP, transpose or batching rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import core
from ember._src.core import Primitive, ShapedArray
from ember.errors import ShapeError

gemm_p = Primitive("native_gemm")


def _op_shapes(a: Any, b: Any, trans_a: bool, trans_b: bool) -> tuple[tuple, int, int, int]:
    ash, bsh = tuple(a.shape), tuple(b.shape)
    if len(ash) != len(bsh) or len(ash) not in (2, 3):
        raise ShapeError(f"native_gemm: operands must both be rank 2 or 3, got {ash} and {bsh}")
    batch = ash[:-2]
    if bsh[:-2] != batch:
        raise ShapeError(f"native_gemm: batch dims differ: {ash} vs {bsh}")
    m, k = (ash[-1], ash[-2]) if trans_a else (ash[-2], ash[-1])
    k2, n = (bsh[-1], bsh[-2]) if trans_b else (bsh[-2], bsh[-1])
    if k != k2:
        raise ShapeError(f"native_gemm: contraction sizes differ: {k} vs {k2}")
    return batch, m, n, k


def _gemm_abstract(a: ShapedArray, b: ShapedArray, *c: ShapedArray, trans_a: bool, trans_b: bool,
                   alpha: float, beta: float, c_dims: tuple | None) -> ShapedArray:
    core.check_same_dtypes("native_gemm", [a, b, *c])
    batch, m, n, _ = _op_shapes(a, b, trans_a, trans_b)
    out = (*batch, m, n)
    if c:
        if c_dims is None or len(c_dims) != c[0].ndim:
            raise ShapeError("native_gemm: c_dims must map every dim of c")
        for i, d in enumerate(c_dims):
            if c[0].shape[i] not in (1, out[d]):
                raise ShapeError(f"native_gemm: c of shape {c[0].shape} does not broadcast into {out}")
    return ShapedArray(out, a.dtype, False)


def _gemm_impl(a: np.ndarray, b: np.ndarray, *c: np.ndarray, trans_a: bool, trans_b: bool,
               alpha: float, beta: float, c_dims: tuple | None) -> np.ndarray:
    x = np.swapaxes(a, -1, -2) if trans_a else a
    y = np.swapaxes(b, -1, -2) if trans_b else b
    with np.errstate(all="ignore"):
        out = np.matmul(x, y)
        if alpha != 1:
            out = out * np.asarray(alpha, dtype=out.dtype)
        if c:
            expanded = [1] * out.ndim
            for i, d in enumerate(c_dims):
                expanded[d] = c[0].shape[i]
            cb = c[0].reshape(expanded)
            out = out + (cb if beta == 1 else cb * np.asarray(beta, dtype=out.dtype))
    return out.astype(a.dtype, copy=False)


gemm_p.impl = _gemm_impl
gemm_p.abstract_eval = _gemm_abstract
for _kind in ("jvp", "transpose", "batch"):
    gemm_p.na(_kind, "native_gemm is created by the native backend's passes after all transformations ran")
gemm_p.lowering = "call:gemm"


def gemm(a: Any, b: Any, c: Any = None, *, trans_a: bool = False, trans_b: bool = False,
         alpha: float = 1.0, beta: float = 0.0, c_dims: tuple | None = None) -> Any:
    """Bind ``native_gemm`` (used by tests; passes build equations directly)."""
    args = (a, b) if c is None else (a, b, c)
    return gemm_p.bind(*args, trans_a=bool(trans_a), trans_b=bool(trans_b), alpha=float(alpha),
                       beta=float(beta), c_dims=None if c is None else tuple(c_dims))
