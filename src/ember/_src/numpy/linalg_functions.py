"""``ember.numpy.linalg`` / ``ember.linalg``: NumPy's linear algebra over the decomposition
primitives of :mod:`ember._src.prims.linalg`, batched over leading dimensions.

Inputs are promoted to an inexact dtype (integers and bool to float32, float16/bfloat16 to
float32) as JAX does. Results that NumPy returns as named tuples are named tuples here too.
Everything is written over lax-level operations, so it traces under ``jit`` and differentiates
through the primitives' JVP rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.core import get_aval as _aval
from ember._src.numpy import reductions
from ember._src.numpy.ufuncs import asarray, promote_args
from ember._src.prims import elementwise as ew
from ember._src.prims import linalg as pl
from ember._src.prims import movement as mv
from ember._src.prims import reductions as red
from ember._src.prims.dot import canonicalize_precision, dot_general
from ember.errors import ShapeError

ArrayLike = Any


class EighResult(NamedTuple):
    eigenvalues: Any
    eigenvectors: Any


class EigResult(NamedTuple):
    eigenvalues: Any
    eigenvectors: Any


class QRResult(NamedTuple):
    Q: Any
    R: Any


class SVDResult(NamedTuple):
    U: Any
    S: Any
    Vh: Any


class SlogdetResult(NamedTuple):
    sign: Any
    logabsdet: Any


class LstsqResult(NamedTuple):
    x: Any
    residuals: Any
    rank: Any
    singular_values: Any


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _inexact(*xs: ArrayLike) -> list[Any]:
    """Convert to ember values of one common inexact dtype (float32 at least)."""
    vals = [asarray(x) for x in xs]
    d, _ = dt.promote(*(dt.dtype_and_weak(v) for v in vals))
    if not dt.is_inexact(d) or dt.is_low_precision(d):
        d = dt.float32
    return [ew.convert_element_type(v, d) for v in vals]


def _matrix(name: str, x: Any, square: bool = False) -> None:
    a = _aval(x)
    if a.ndim < 2:
        raise ShapeError(f"{name}: expected an array of rank >= 2, got shape {sh.shape_str(a.shape)}")
    if square and a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{name}: last two dimensions must be square, got shape {sh.shape_str(a.shape)}")


def _broadcast_batch(a: Any, b: Any, a_core: int, b_core: int) -> tuple[Any, Any]:
    """Broadcast the leading (batch) dims of ``a`` and ``b`` (``*_core`` trailing dims kept)."""
    sa, sb = _aval(a).shape, _aval(b).shape
    ba, bb = sa[:len(sa) - a_core], sb[:len(sb) - b_core]
    batch = sh.broadcast_shapes(ba, bb, op="linalg")
    return (mv.broadcast_to_rank_shape(a, (*batch, *sa[len(sa) - a_core:])),
            mv.broadcast_to_rank_shape(b, (*batch, *sb[len(sb) - b_core:])))


def _expand_last(v: Any, n: int, at: int) -> Any:
    """``v[..., None, :]`` (``at=-2``) or ``v[..., :, None]`` (``at=-1``) broadcast to size ``n``."""
    a = _aval(v)
    nd = a.ndim + 1
    if at == -2:
        return mv.broadcast_in_dim(v, (*a.shape[:-1], n, a.shape[-1]), (*range(nd - 2), nd - 1))
    return mv.broadcast_in_dim(v, (*a.shape, n), tuple(range(nd - 1)))


def _reduce(reduce_fn: Any, x: Any, axes: Sequence[int], keepdims: bool) -> Any:
    """``reduce_fn`` (a lax reduction) over ``axes`` (any order, negative allowed)."""
    shape = _aval(x).shape
    axes = tuple(sorted(sh.normalize_axis(a, len(shape)) for a in axes))
    out = reduce_fn(x, axes)
    if keepdims:
        out = mv.reshape(out, tuple(1 if i in axes else s for i, s in enumerate(shape)))
    return out


def _sum(x: Any, axes: Sequence[int], keepdims: bool = False) -> Any:
    return _reduce(red.reduce_sum, x, axes, keepdims)


def _max(x: Any, axes: Sequence[int], keepdims: bool = False) -> Any:
    return _reduce(red.reduce_max, x, axes, keepdims)


def _min(x: Any, axes: Sequence[int], keepdims: bool = False) -> Any:
    return ew.neg(_max(ew.neg(x), axes, keepdims))


def _c(x: Any, v: Any, dtype: Any = None) -> Any:
    return mv.full_like(x, v, dtype)


def _abs(x: Any) -> Any:
    return ew.abs(x)


def _finfo_eps(d: np.dtype) -> float:
    return float(dt.finfo(dt.real_dtype(d)).eps)


# ---------------------------------------------------------------------------------------------
# products and simple matrix functions
# ---------------------------------------------------------------------------------------------


def matmul(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Matrix product with NumPy's broadcasting and 1-d promotion rules."""
    a, b = asarray(x1), asarray(x2)
    d, _ = dt.promote(dt.dtype_and_weak(a), dt.dtype_and_weak(b))
    a, b = ew.convert_element_type(a, d), ew.convert_element_type(b, d)
    na, nb = _aval(a).ndim, _aval(b).ndim
    if na == 0 or nb == 0:
        raise ShapeError("matmul: operands must be at least 1-dimensional")
    if na == 1:
        a = mv.reshape(a, (1, _aval(a).shape[0]))
    if nb == 1:
        b = mv.reshape(b, (_aval(b).shape[0], 1))
    if _aval(a).shape[-1] != _aval(b).shape[-2]:
        raise ShapeError(f"matmul: contracting dimensions differ: {sh.shape_str(_aval(a).shape)} @ "
                         f"{sh.shape_str(_aval(b).shape)}")
    a, b = _broadcast_batch(a, b, 2, 2)
    out = pl.matmul(a, b)
    shape = _aval(out).shape
    if na == 1:
        out = mv.reshape(out, (*shape[:-2], shape[-1]))
        shape = _aval(out).shape
    if nb == 1:
        out = mv.reshape(out, shape[:-1])
    return out


def matrix_transpose(x: ArrayLike, /) -> Any:
    """Swap the last two axes."""
    x = asarray(x)
    _matrix("matrix_transpose", x)
    return pl.T(x)


def diagonal(x: ArrayLike, /, *, offset: int = 0) -> Any:
    """The ``offset`` diagonal of the last two axes."""
    x = asarray(x)
    _matrix("diagonal", x)
    a = _aval(x)
    m, n = a.shape[-2:]
    nd = a.ndim
    if offset >= n or -offset >= m:
        return mv.full((*a.shape[:-2], 0), 0, a.dtype)
    if offset > 0:
        x = mv.slice(x, (*(0,) * (nd - 1), offset), a.shape)
    elif offset < 0:
        x = mv.slice(x, (*(0,) * (nd - 2), -offset, 0), a.shape)
    a2 = _aval(x)
    if 0 in a2.shape[-2:]:
        return mv.full((*a.shape[:-2], 0), 0, a.dtype)
    return pl.diagonal(x)


def trace(x: ArrayLike, /, *, offset: int = 0, dtype: Any = None) -> Any:
    """Sum of the ``offset`` diagonal of the last two axes.

    It accumulates as :func:`sum` does: small integers widen to the default integer of their
    signedness unless ``dtype`` is given."""
    return reductions.sum(diagonal(x, offset=offset), axis=-1, dtype=dtype)


def vecdot(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1) -> Any:
    """``sum(conj(x1) * x2, axis)`` with broadcasting.

    The reduced axis must have the same size in both operands."""
    s1, s2 = _aval(asarray(x1)).shape, _aval(asarray(x2)).shape
    for s, name in ((s1, "x1"), (s2, "x2")):
        if not s or not -len(s) <= axis < len(s):
            raise ShapeError(f"vecdot: axis {axis} is out of range for {name} of shape {sh.shape_str(s)}")
    if axis >= 0 and len(s1) != len(s2) or s1[axis] != s2[axis]:
        raise ShapeError(f"vecdot: the reduced axis {axis} has size {s1[axis]} in x1 and {s2[axis]} in x2")
    a, b = promote_args("vecdot", x1, x2)
    prod = ew.mul(pl.conj(a), b)
    return red.reduce_sum(prod, (sh.normalize_axis(axis, _aval(prod).ndim),))


def outer(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Outer product of two vectors."""
    a, b = asarray(x1), asarray(x2)
    if _aval(a).ndim != 1 or _aval(b).ndim != 1:
        raise ShapeError("outer: inputs must be 1-dimensional")
    d, _ = dt.promote(dt.dtype_and_weak(a), dt.dtype_and_weak(b))
    a, b = ew.convert_element_type(a, d), ew.convert_element_type(b, d)
    shape = (_aval(a).shape[0], _aval(b).shape[0])
    return ew.mul(mv.broadcast_in_dim(a, shape, (0,)), mv.broadcast_in_dim(b, shape, (1,)))


def cross(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1) -> Any:
    """Cross product of 3-element vectors along ``axis`` (with broadcasting)."""
    a, b = promote_args("cross", x1, x2)
    nd = _aval(a).ndim
    ax = sh.normalize_axis(axis, nd)
    if _aval(a).shape[ax] != 3:
        raise ShapeError(f"cross: both inputs must have size 3 along axis {axis}, got {_aval(a).shape}")
    comp = [[mv.slice_in_dim(v, i, i + 1, 1, ax) for i in range(3)] for v in (a, b)]
    (a0, a1, a2), (b0, b1, b2) = comp
    c0 = ew.sub(ew.mul(a1, b2), ew.mul(a2, b1))
    c1 = ew.sub(ew.mul(a2, b0), ew.mul(a0, b2))
    c2 = ew.sub(ew.mul(a0, b1), ew.mul(a1, b0))
    return mv.concatenate([c0, c1, c2], ax)


def tensordot(x1: ArrayLike, x2: ArrayLike, /, *, axes: int | tuple = 2) -> Any:
    """Sum products over ``axes`` (an int: the last/first ``axes`` dims; or two sequences)."""
    a, b = asarray(x1), asarray(x2)
    d, _ = dt.promote(dt.dtype_and_weak(a), dt.dtype_and_weak(b))
    a, b = ew.convert_element_type(a, d), ew.convert_element_type(b, d)
    na, nb = _aval(a).ndim, _aval(b).ndim
    if isinstance(axes, (int, np.integer)):
        ca, cb = tuple(range(na - int(axes), na)), tuple(range(int(axes)))
    else:
        ax_a, ax_b = axes
        ax_a = (ax_a,) if isinstance(ax_a, (int, np.integer)) else tuple(ax_a)
        ax_b = (ax_b,) if isinstance(ax_b, (int, np.integer)) else tuple(ax_b)
        ca = tuple(sh.normalize_axis(i, na) for i in ax_a)
        cb = tuple(sh.normalize_axis(i, nb) for i in ax_b)
    return dot_general(a, b, ((ca, cb), ((), ())))


def multi_dot(arrays: Sequence[ArrayLike], *, precision: Any = None) -> Any:
    """``A @ B @ C ...`` in the cheapest association order (first/last may be vectors).

    ``precision`` (as ``dot``'s) rides on every product."""
    canonicalize_precision(precision)
    arrs = [asarray(a) for a in arrays]
    if len(arrs) < 2:
        raise ValueError("multi_dot: expecting at least two arrays")
    first_vec, last_vec = _aval(arrs[0]).ndim == 1, _aval(arrs[-1]).ndim == 1
    if first_vec:
        arrs[0] = mv.reshape(arrs[0], (1, _aval(arrs[0]).shape[0]))
    if last_vec:
        arrs[-1] = mv.reshape(arrs[-1], (_aval(arrs[-1]).shape[0], 1))
    for a in arrs:
        if _aval(a).ndim != 2:
            raise ShapeError("multi_dot: arrays other than the first and last must be 2-dimensional")
    dims = [_aval(arrs[0]).shape[0]] + [_aval(a).shape[1] for a in arrs]
    n = len(arrs)
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = None  # type: ignore[call-overload]
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if cost[i][j] is None or c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k

    def chain(i: int, j: int) -> Any:
        if i == j:
            return arrs[i]
        k = split[i][j]
        x, y = chain(i, k), chain(k + 1, j)
        d, _ = dt.promote(dt.dtype_and_weak(x), dt.dtype_and_weak(y))  # (matmul's promotion)
        x, y = ew.convert_element_type(x, d), ew.convert_element_type(y, d)
        return dot_general(x, y, (((1,), (0,)), ((), ())), precision=precision)

    out = chain(0, n - 1)
    if first_vec and last_vec:
        return mv.reshape(out, ())
    if first_vec:
        return mv.reshape(out, (_aval(out).shape[1],))
    if last_vec:
        return mv.reshape(out, (_aval(out).shape[0],))
    return out


# ---------------------------------------------------------------------------------------------
# decompositions
# ---------------------------------------------------------------------------------------------


def cholesky(a: ArrayLike, /, *, upper: bool = False, symmetrize_input: bool = True) -> Any:
    """Cholesky factor of Hermitian positive-definite ``a`` (lower unless ``upper``); NaN if not PD."""
    (a,) = _inexact(a)
    _matrix("cholesky", a, square=True)
    if symmetrize_input:
        a = ew.div(ew.add(a, pl.H(a)), _c(a, 2))
    L = pl.cholesky(a)
    return pl.H(L) if upper else L


def qr(a: ArrayLike, mode: str = "reduced") -> Any:
    """QR decomposition; ``mode`` is ``reduced``, ``complete`` or ``r``."""
    (a,) = _inexact(a)
    _matrix("qr", a)
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"qr: unsupported mode {mode!r} (expected 'reduced', 'complete' or 'r')")
    q, r = pl.qr(a, full_matrices=mode == "complete")
    if mode == "r":
        return r
    return QRResult(q, r)


def eigh(a: ArrayLike, UPLO: str | None = None, symmetrize_input: bool = True) -> EighResult:  # noqa: N803
    """Eigenvalues (ascending) and eigenvectors of Hermitian ``a``."""
    (a,) = _inexact(a)
    _matrix("eigh", a, square=True)
    lower = UPLO is None or UPLO.upper() == "L"
    if UPLO is not None and UPLO.upper() not in ("L", "U"):
        raise ValueError(f"UPLO must be 'L' or 'U', got {UPLO!r}")
    v, w = pl.eigh(a, lower=lower, symmetrize_input=symmetrize_input)
    return EighResult(w, v)


def eigvalsh(a: ArrayLike, UPLO: str | None = "L") -> Any:  # noqa: N803
    """Eigenvalues (ascending) of Hermitian ``a``."""
    return eigh(a, UPLO).eigenvalues


def eig(a: ArrayLike, /) -> EigResult:
    """Eigenvalues and right eigenvectors of a general square ``a`` (complex)."""
    (a,) = _inexact(a)
    _matrix("eig", a, square=True)
    w, v = pl.eig(a, compute_eigenvectors=True)
    return EigResult(w, v)


def eigvals(a: ArrayLike, /) -> Any:
    """Eigenvalues of a general square ``a`` (complex)."""
    (a,) = _inexact(a)
    _matrix("eigvals", a, square=True)
    return pl.eig(a, compute_eigenvectors=False)


def svd(a: ArrayLike, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False) -> Any:
    """Singular value decomposition ``(U, S, Vh)`` (``S`` alone when not ``compute_uv``)."""
    (a,) = _inexact(a)
    _matrix("svd", a)
    if not compute_uv:
        return pl.svd(a, full_matrices=False, compute_uv=False)
    s, u, vh = pl.svd(a, full_matrices=full_matrices, compute_uv=True)
    return SVDResult(u, s, vh)


def svdvals(x: ArrayLike, /) -> Any:
    """Singular values, descending."""
    return svd(x, compute_uv=False)


# ---------------------------------------------------------------------------------------------
# solves, inverses, determinants
# ---------------------------------------------------------------------------------------------


def solve(a: ArrayLike, b: ArrayLike) -> Any:
    """Solve ``a @ x = b``; ``b`` is a vector when 1-d, else a stack of ``(n, k)`` matrices."""
    a, b = _inexact(a, b)
    _matrix("solve", a, square=True)
    n = _aval(a).shape[-1]
    vec = _aval(b).ndim == 1
    if vec:
        b = mv.reshape(b, (n, 1))
    if _aval(b).shape[-2] != n:
        raise ShapeError(f"solve: a has shape {sh.shape_str(_aval(a).shape)} but b has shape "
                         f"{sh.shape_str(_aval(b).shape)}")
    a, b = _broadcast_batch(a, b, 2, 2)
    lu_, _, perm = pl.lu(a)
    x = pl.lu_solve(lu_, perm, b)
    if vec:
        x = mv.reshape(x, _aval(x).shape[:-1])
    return x


def inv(a: ArrayLike, /) -> Any:
    """Matrix inverse (via LU); singular matrices give inf/NaN."""
    (a,) = _inexact(a)
    _matrix("inv", a, square=True)
    return solve(a, pl.eye_like(a))


def _lu_det_parts(a: Any) -> tuple[Any, Any]:
    """Diagonal of U and the permutation's parity sign (+1/-1 as the matrix dtype)."""
    lu_, pivots, _ = pl.lu(a)
    diag = pl.diagonal(lu_)
    n = _aval(pivots).shape[-1]
    idx = mv.broadcast_in_dim(mv.iota(dt.int32, n), _aval(pivots).shape, (_aval(pivots).ndim - 1,))
    swaps = red.reduce_sum(ew.convert_element_type(ew.ne(pivots, idx), dt.int32), (_aval(pivots).ndim - 1,))
    odd = ew.ne(ew.rem(swaps, _c(swaps, 2)), _c(swaps, 0))
    d = _aval(a).dtype
    parity = ew.select(odd, mv.full(_aval(odd).shape, -1, d), mv.full(_aval(odd).shape, 1, d))
    return diag, parity


def det(a: ArrayLike, /) -> Any:
    """Determinant (via LU)."""
    (a,) = _inexact(a)
    _matrix("det", a, square=True)
    if _aval(a).shape[-1] == 0:
        return mv.full(_aval(a).shape[:-2], 1, _aval(a).dtype)
    diag, parity = _lu_det_parts(a)
    return ew.mul(parity, red.reduce_prod(diag, (_aval(diag).ndim - 1,)))


def slogdet(a: ArrayLike, /) -> SlogdetResult:
    """Sign (a unit complex number for complex input) and log of the absolute determinant."""
    (a,) = _inexact(a)
    _matrix("slogdet", a, square=True)
    d = _aval(a).dtype
    rd = dt.real_dtype(d)
    if _aval(a).shape[-1] == 0:
        return SlogdetResult(mv.full(_aval(a).shape[:-2], 1, d), mv.full(_aval(a).shape[:-2], 0, rd))
    diag, parity = _lu_det_parts(a)
    absd = ew.abs(diag)
    last = (_aval(diag).ndim - 1,)
    logabs = red.reduce_sum(ew.log(absd), last)
    if dt.is_complex(d):
        safe = ew.select(ew.eq(absd, _c(absd, 0)), _c(absd, 1), absd)
        unit = ew.div(diag, ew.convert_element_type(safe, d))
    else:
        unit = ew.sign(diag)
    sign = ew.mul(parity, red.reduce_prod(unit, last))
    is_zero = red.reduce_or(ew.eq(absd, _c(absd, 0)), last)
    sign = ew.select(is_zero, _c(sign, 0), sign)
    logabs = ew.select(is_zero, _c(logabs, -np.inf), logabs)
    return SlogdetResult(sign, logabs)


def _default_rtol(a: Any) -> float:
    m, n = _aval(a).shape[-2:]
    return max(m, n) * _finfo_eps(_aval(a).dtype)


def pinv(a: ArrayLike, /, rtol: ArrayLike | None = None, hermitian: bool = False, *,
         rcond: ArrayLike | None = None) -> Any:
    """Moore-Penrose pseudo-inverse via the SVD; singular values ``<= rtol * max(s)`` are dropped."""
    (a,) = _inexact(a)
    _matrix("pinv", a)
    if rcond is not None:
        rtol = rcond
    m, n = _aval(a).shape[-2:]
    if m == 0 or n == 0:
        return mv.full((*_aval(a).shape[:-2], n, m), 0, _aval(a).dtype)
    rtol = 10 * _default_rtol(a) if rtol is None else rtol
    s, u, vh = pl.svd(a, full_matrices=False, compute_uv=True)
    smax = _max(s, (-1,), keepdims=True)
    r = ew.convert_element_type(asarray(rtol), _aval(s).dtype)
    r = mv.broadcast_to_rank_shape(mv.reshape(r, (*_aval(r).shape, 1)), _aval(smax).shape)
    cutoff = mv.broadcast_to_rank_shape(ew.mul(r, smax), _aval(s).shape)
    keep = ew.gt(s, cutoff)
    s_inv = ew.select(keep, ew.div(_c(s, 1), ew.select(keep, s, _c(s, 1))), _c(s, 0))
    uh = pl.H(u)  # (..., k, m)
    scaled = ew.mul(ew.convert_element_type(_expand_last(s_inv, m, -1), _aval(a).dtype), uh)
    return pl.matmul(pl.H(vh), scaled)


def matrix_rank(M: ArrayLike, /, rtol: ArrayLike | None = None, *, tol: ArrayLike | None = None) -> Any:  # noqa: N803
    """Number of singular values above ``tol`` (default ``max(s) * max(m, n) * eps``)."""
    (M,) = _inexact(M)
    a = _aval(M)
    if a.ndim < 2:
        nz = red.reduce_or(ew.ne(M, _c(M, 0)), tuple(range(a.ndim))) if a.ndim else ew.ne(M, _c(M, 0))
        return ew.convert_element_type(nz, dt.int32)
    s = svdvals(M)
    smax = _max(s, (-1,), keepdims=True) if _aval(s).shape[-1] else mv.full((*_aval(s).shape[:-1], 1), 0,
                                                                           _aval(s).dtype)
    def batch_scalar(v: ArrayLike) -> Any:
        # a tolerance per matrix: its shape broadcasts against the batch shape M.shape[:-2]
        v = ew.convert_element_type(asarray(v), _aval(s).dtype)
        if _aval(v).ndim:
            v = mv.reshape(v, (*_aval(v).shape, 1))
        return mv.broadcast_to_rank_shape(v, _aval(smax).shape)

    if tol is not None:
        t = batch_scalar(tol)
    else:
        t = ew.mul(batch_scalar(_default_rtol(M) if rtol is None else rtol), smax)
    t = mv.broadcast_to_rank_shape(t, _aval(s).shape)
    return red.reduce_sum(ew.convert_element_type(ew.gt(s, t), dt.int32), (_aval(s).ndim - 1,))


def matrix_power(a: ArrayLike, n: int, /) -> Any:
    """``a`` raised to the integer power ``n`` by repeated squaring (negative ``n`` inverts)."""
    a = asarray(a)
    _matrix("matrix_power", a, square=True)
    if not isinstance(n, (int, np.integer)):
        raise TypeError(f"matrix_power: exponent must be an integer, got {n!r}")
    n = int(n)
    if n == 0:
        return ew.convert_element_type(pl.eye_like(a), _aval(a).dtype)
    if n < 0:
        a = inv(a)
        n = -n
    result = None
    base = a
    while n:
        if n & 1:
            result = base if result is None else pl.matmul(result, base)
        n >>= 1
        if n:
            base = pl.matmul(base, base)
    return result


def lstsq(a: ArrayLike, b: ArrayLike, rcond: float | None = None, *,
          numpy_resid: bool = False) -> LstsqResult:
    """Least-squares solution of ``a @ x = b`` via the SVD: ``(x, residuals, rank, s)``."""
    a, b = _inexact(a, b)
    if _aval(a).ndim != 2:
        raise ShapeError(f"lstsq: a must be 2-dimensional, got {sh.shape_str(_aval(a).shape)}")
    vec = _aval(b).ndim == 1
    if vec:
        b = mv.reshape(b, (_aval(b).shape[0], 1))
    m, n = _aval(a).shape
    if _aval(b).ndim != 2 or _aval(b).shape[0] != m:
        raise ShapeError(f"lstsq: leading dimension of b {sh.shape_str(_aval(b).shape)} must equal {m}")
    rd = dt.real_dtype(_aval(a).dtype)
    if rcond is None:
        rcond = float(dt.finfo(rd).eps) * max(m, n)
    s, u, vh = pl.svd(a, full_matrices=False, compute_uv=True)
    k = min(m, n)
    if k == 0:
        x = mv.full((n, _aval(b).shape[1]), 0, _aval(a).dtype)
        rank = mv.full((), 0, dt.int32)
    else:
        smax = _max(s, (0,), keepdims=True)
        keep = ew.gt(s, ew.mul(mv.broadcast_to_rank_shape(smax, (k,)), _c(s, float(rcond))))
        s_inv = ew.select(keep, ew.div(_c(s, 1), ew.select(keep, s, _c(s, 1))), _c(s, 0))
        uhb = pl.matmul(pl.H(u), b)  # (k, K)
        uhb = ew.mul(ew.convert_element_type(mv.broadcast_in_dim(s_inv, _aval(uhb).shape, (0,)),
                                             _aval(a).dtype), uhb)
        x = pl.matmul(pl.H(vh), uhb)
        rank = red.reduce_sum(ew.convert_element_type(keep, dt.int32), (0,))
    r = ew.sub(b, pl.matmul(a, x))
    resid = red.reduce_sum(ew.mul(ew.real(r) if dt.is_complex(_aval(r).dtype) else r,
                                  ew.real(r) if dt.is_complex(_aval(r).dtype) else r), (0,))
    if dt.is_complex(_aval(r).dtype):
        resid = ew.add(resid, red.reduce_sum(ew.mul(ew.imag(r), ew.imag(r)), (0,)))
    if numpy_resid:
        rank_c = int(core.concrete_or_error(rank, "lstsq(numpy_resid=True) rank"))
        if rank_c < n or m <= n:
            resid = mv.full((0,), 0, rd)
    if vec:
        x = mv.reshape(x, (n,))
        if _aval(resid).shape == (1,):
            resid = mv.reshape(resid, (1,))
    return LstsqResult(x, resid, rank, s)


def tensorsolve(a: ArrayLike, b: ArrayLike, axes: tuple[int, ...] | None = None) -> Any:
    """Solve the tensor equation ``tensordot(a, x, x.ndim) = b`` for ``x``."""
    a, b = _inexact(a, b)
    nd = _aval(a).ndim
    if axes is not None:
        allaxes = list(range(nd))
        for k in axes:
            allaxes.remove(sh.normalize_axis(k, nd))
            allaxes.append(sh.normalize_axis(k, nd))
        a = mv.transpose(a, allaxes)
    bshape = _aval(b).shape
    xshape = _aval(a).shape[len(bshape):]
    prod_b = int(np.prod(bshape))
    prod_x = int(np.prod(xshape))
    if prod_b != prod_x:
        raise ShapeError(f"tensorsolve: a {sh.shape_str(_aval(a).shape)} is not square for b of shape "
                         f"{sh.shape_str(bshape)}")
    x = solve(mv.reshape(a, (prod_b, prod_x)), mv.reshape(b, (prod_b,)))
    return mv.reshape(x, xshape)


# ---------------------------------------------------------------------------------------------
# norms
# ---------------------------------------------------------------------------------------------


def _vnorm(x: Any, axes: tuple, ord: Any, keepdims: bool) -> Any:  # noqa: A002
    ax = _abs(x)
    if ord is None or ord == 2:
        return ew.sqrt(_sum(ew.mul(ax, ax), axes, keepdims))
    if ord == np.inf:
        return _max(ax, axes, keepdims)
    if ord == -np.inf:
        return _min(ax, axes, keepdims)
    if ord == 0:
        return _sum(ew.convert_element_type(ew.ne(ax, _c(ax, 0)), _aval(ax).dtype), axes, keepdims)
    if ord == 1:
        return _sum(ax, axes, keepdims)
    p = _c(ax, float(ord))
    return ew.pow(_sum(ew.pow(ax, p), axes, keepdims), _c(_sum(ax, axes, keepdims), 1.0 / float(ord)))


def vector_norm(x: ArrayLike, /, *, axis: int | tuple | None = None, keepdims: bool = False,
                ord: Any = 2) -> Any:  # noqa: A002
    """Vector p-norm over ``axis`` (all axes, flattened, when ``None``)."""
    (x,) = _inexact(x)
    nd = _aval(x).ndim
    if axis is None:
        out = _vnorm(mv.reshape(x, (-1,)) if nd else mv.reshape(x, (1,)), (0,), ord, False)
        return mv.reshape(out, (1,) * nd) if keepdims else out
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(sh.normalize_axis(a, nd) for a in axes)
    return _vnorm(x, axes, ord, keepdims)


def _mnorm(x: Any, row: int, col: int, ord: Any, keepdims: bool) -> Any:  # noqa: A002
    nd = _aval(x).ndim
    ax = _abs(x)
    if ord in ("fro", "f", None):
        return ew.sqrt(_sum(ew.mul(ax, ax), (row, col), keepdims))
    if ord in (1, -1):
        s = _sum(ax, (row,), True)
        r = _max(s, (col,), True) if ord == 1 else _min(s, (col,), True)
    elif ord in (np.inf, -np.inf):
        s = _sum(ax, (col,), True)
        r = _max(s, (row,), True) if ord == np.inf else _min(s, (row,), True)
    elif ord in (2, -2, "nuc"):
        perm = [i for i in range(nd) if i not in (row, col)] + [row, col]
        y = mv.transpose(x, perm)
        s = svd(y, compute_uv=False)
        last = (_aval(s).ndim - 1,)
        r = _max(s, last) if ord == 2 else _min(s, last) if ord == -2 else red.reduce_sum(s, last)
        if keepdims:
            shape = list(_aval(x).shape)
            shape[row] = shape[col] = 1
            r = mv.reshape(r, tuple(shape))
        return r
    else:
        raise ValueError(f"invalid norm order {ord!r} for matrices")
    if not keepdims:
        r = mv.squeeze(r, (row, col))
    return r


def matrix_norm(x: ArrayLike, /, *, keepdims: bool = False, ord: Any = "fro") -> Any:  # noqa: A002
    """Matrix norm of the last two axes (``fro``, ``nuc``, 1, -1, 2, -2, inf, -inf)."""
    (x,) = _inexact(x)
    _matrix("matrix_norm", x)
    nd = _aval(x).ndim
    return _mnorm(x, nd - 2, nd - 1, ord, keepdims)


def norm(x: ArrayLike, ord: Any = None, axis: int | tuple | None = None, keepdims: bool = False) -> Any:  # noqa: A002
    """Vector or matrix norm, as ``numpy.linalg.norm``."""
    (x,) = _inexact(x)
    nd = _aval(x).ndim
    if axis is None:
        if ord is None:
            return vector_norm(x, keepdims=keepdims)
        axis = tuple(range(nd))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(sh.normalize_axis(a, nd) for a in axes)
    if len(axes) == 1:
        if isinstance(ord, str):
            raise ValueError(f"invalid norm order {ord!r} for vectors")
        return _vnorm(x, axes, ord, keepdims)
    if len(axes) == 2:
        if axes[0] == axes[1]:
            raise ValueError("norm: duplicate axes")
        return _mnorm(x, axes[0], axes[1], ord, keepdims)
    raise ValueError(f"norm: improper number of axes {axes}")


def cond(x: ArrayLike, p: Any = None) -> Any:
    """Condition number (2-norm by default)."""
    (x,) = _inexact(x)
    if p is None or p in (2, -2):
        s = svdvals(x)
        last = (_aval(s).ndim - 1,)
        r = ew.div(_max(s, last), _min(s, last))
        return ew.div(_c(r, 1), r) if p == -2 else r
    return ew.mul(norm(x, p, axis=(-2, -1)), norm(inv(x), p, axis=(-2, -1)))


__all__ = [
    "EigResult", "EighResult", "LstsqResult", "QRResult", "SVDResult", "SlogdetResult", "cholesky",
    "cond", "cross", "det", "diagonal", "eig", "eigh", "eigvals", "eigvalsh", "inv", "lstsq", "matmul",
    "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "multi_dot", "norm", "outer",
    "pinv", "qr", "slogdet", "solve", "svd", "svdvals", "tensordot", "tensorsolve", "trace", "vecdot",
    "vector_norm",
]
