"""``dot_general``: the one contraction primitive (matmul, batched matmul, tensordot, einsum).

``dimension_numbers = ((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))``; the result has
the batch dims, then the lhs free dims, then the rhs free dims (XLA's convention).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import aligned_empty
from ember._src.core import Primitive, ShapedArray
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember.errors import ShapeError

dot_general_p = Primitive("dot_general")


class Precision(enum.Enum):
    """JAX's ``lax.Precision``: the accuracy requested of a contraction on an accelerator.

    ember computes on the host CPU in the operands' own type, so every level gives the same
    result there; the value is validated (an enum member, a name such as ``"highest"`` or
    ``"bfloat16_3x"``, ``None``, or a pair of these). The CUDA backend's float32 GEMMs honour it:
    ``HIGHEST`` full float32, ``HIGH`` TF32, ``DEFAULT`` bfloat16 (``docs/gpu.md``).
    """

    DEFAULT = 0
    HIGH = 1
    HIGHEST = 2

    @classmethod
    def _missing_(cls, value: object) -> Precision | None:
        return _PRECISION_NAMES.get(value.lower()) if isinstance(value, str) else None

    def __str__(self) -> str:
        return self.name


_PRECISION_NAMES = {"default": Precision.DEFAULT, "bfloat16": Precision.DEFAULT,
                    "fastest": Precision.DEFAULT, "high": Precision.HIGH, "bfloat16_3x": Precision.HIGH,
                    "tensorfloat32": Precision.HIGH, "highest": Precision.HIGHEST,
                    "float32": Precision.HIGHEST}


def canonicalize_precision(precision: Any) -> Any:
    """``precision=`` of a contraction as JAX reads it: ``None``, a :class:`Precision`, a name
    (``"highest"``), or a pair of these (one per operand); anything else is a ``ValueError``."""
    if precision is None:
        return None
    if isinstance(precision, (tuple, list)) and len(precision) == 2:
        return tuple(canonicalize_precision(p) for p in precision)
    try:
        return Precision(precision)
    except ValueError:
        raise ValueError(f"precision argument must be None, a string in {sorted(_PRECISION_NAMES)}, "
                         f"a lax.Precision value or a tuple of two lax.Precision values or strings; "
                         f"got {precision!r}") from None


_DEFAULT_PRECISION: list[Precision | None] = [None]


def set_default_matmul_precision(value: Any) -> None:
    """The ``jax_default_matmul_precision`` setting: None (full precision), or a precision name or
    :class:`Precision` (a ValueError otherwise). The CPU computes every level alike; the CUDA
    backend's float32 GEMMs read it when they run (TF32 for ``"tensorfloat32"``/``"high"``,
    bfloat16 for ``"bfloat16"``/``"default"``)."""
    p = canonicalize_precision(value)
    if isinstance(p, tuple):
        raise ValueError(f"jax_default_matmul_precision takes one precision, not a pair; got {value!r}")
    _DEFAULT_PRECISION[0] = p


def matmul_precision_setting() -> Precision | None:
    """The current ``jax_default_matmul_precision`` (None: not set, full precision)."""
    return _DEFAULT_PRECISION[0]


def _free(nd: int, contract: Sequence[int], batch: Sequence[int]) -> list[int]:
    return [i for i in range(nd) if i not in contract and i not in batch]


def _dot_abstract(x: ShapedArray, y: ShapedArray, *, dimension_numbers: tuple,
                  preferred_element_type: Any = None, precision: Any = None) -> ShapedArray:
    (xc, yc), (xb, yb) = dimension_numbers
    if len(xc) != len(yc) or len(xb) != len(yb):
        raise ShapeError(f"dot_general: contracting {xc} vs {yc} / batch {xb} vs {yb} differ in length")
    for name, dims, nd in (("lhs", (*xc, *xb), x.ndim), ("rhs", (*yc, *yb), y.ndim)):
        if any(not 0 <= d < nd for d in dims) or len(set(dims)) != len(dims):
            raise ShapeError(f"dot_general: {name} dimension numbers {dims} invalid for rank {nd}")
    for kind, xs, ys in (("contracting", xc, yc), ("batch", xb, yb)):
        for a, b in zip(xs, ys):
            if x.shape[a] != y.shape[b]:
                raise ShapeError(
                    f"dot_general: {kind} dimension {a} of lhs {sh.shape_str(x.shape)} has "
                    f"{sh.dim_str(x.shape[a])} but dimension {b} of rhs {sh.shape_str(y.shape)} has "
                    f"{sh.dim_str(y.shape[b])}")
    core.check_same_dtypes("dot_general", [x, y])
    shape = (*(x.shape[i] for i in xb), *(x.shape[i] for i in _free(x.ndim, xc, xb)),
             *(y.shape[i] for i in _free(y.ndim, yc, yb)))
    out_dtype = x.dtype if preferred_element_type is None else dt.canonicalize(preferred_element_type)
    return ShapedArray(shape, out_dtype, x.weak_type and y.weak_type and preferred_element_type is None)


def _dot_impl(x: np.ndarray, y: np.ndarray, *, dimension_numbers: tuple,
              preferred_element_type: Any = None, precision: Any = None) -> np.ndarray:
    (xc, yc), (xb, yb) = dimension_numbers
    out_dtype = x.dtype if preferred_element_type is None else np.dtype(preferred_element_type)
    if dt.is_low_precision(x.dtype):
        x, y = x.astype(np.float32), y.astype(np.float32)
    if preferred_element_type is not None and dt.is_inexact(out_dtype) != dt.is_inexact(x.dtype):
        x, y = x.astype(out_dtype), y.astype(out_dtype)
    xf, yf = _free(x.ndim, xc, xb), _free(y.ndim, yc, yb)
    bshape = [x.shape[i] for i in xb]
    m = sh.prod(x.shape[i] for i in xf)
    n = sh.prod(y.shape[i] for i in yf)
    k = sh.prod(x.shape[i] for i in xc)
    b = sh.prod(bshape)
    xt = np.transpose(x, (*xb, *xf, *xc)).reshape(b, m, k)
    yt = np.transpose(y, (*yb, *yc, *yf)).reshape(b, k, n)
    # the product is written straight into an aligned buffer an eager Array takes over uncopied
    res = aligned_empty((b, m, n), xt.dtype) if xt.dtype == yt.dtype else None
    with np.errstate(all="ignore"):
        out = np.matmul(xt, yt, out=res)
    out = out.reshape((*bshape, *(x.shape[i] for i in xf), *(y.shape[i] for i in yf)))
    return out.astype(out_dtype, copy=False)


def _ranges_like(*xs: Sequence) -> list[list[int]]:
    start, out = 0, []
    for x in xs:
        out.append(list(range(start, start + len(x))))
        start += len(x)
    return out


def _transpose_lhs(g: Any, x_aval: ShapedArray, y: Any, *, dimension_numbers: tuple,
                   preferred_element_type: Any = None, swap_ans: bool = False, precision: Any = None) -> Any:
    (xc, yc), (xb, yb) = dimension_numbers
    y_nd = core.get_aval(y).ndim
    x_kept = _free(x_aval.ndim, xc, xb)
    y_kept = _free(y_nd, yc, yb)
    if swap_ans:
        ans_batch, ans_y, _ = _ranges_like(xb, y_kept, x_kept)
    else:
        ans_batch, _, ans_y = _ranges_like(xb, x_kept, y_kept)
    dims = ((tuple(ans_y), tuple(y_kept)), (tuple(ans_batch), tuple(yb)))
    x_contract_by_y = [xc[i] for i in np.argsort(yc)]
    out_axes = np.argsort([*xb, *x_kept, *x_contract_by_y])
    gy = dot_general(g, ew.convert_element_type(y, core.get_aval(g).dtype), dims, precision=precision)
    res = mv.transpose(gy, tuple(int(a) for a in out_axes))
    return ew.convert_element_type(res, x_aval.dtype)


def _dot_transpose(ct: Any, x: Any, y: Any, *, dimension_numbers: tuple,
                   preferred_element_type: Any = None, precision: Any = None) -> list:
    (xc, yc), (xb, yb) = dimension_numbers
    if isinstance(x, ad.UndefPrimal) and isinstance(y, ad.UndefPrimal):
        raise TypeError("dot_general is not linear in both operands at once")
    if isinstance(x, ad.UndefPrimal):
        if ad.is_zero(ct):
            return [ad.Zero(x.aval), None]
        gx = _transpose_lhs(ct, x.aval, y, dimension_numbers=dimension_numbers, precision=precision)
        return [gx, None]
    if ad.is_zero(ct):
        return [None, ad.Zero(y.aval)]
    swapped = ((yc, xc), (yb, xb))
    gy = _transpose_lhs(ct, y.aval, x, dimension_numbers=swapped, swap_ans=True, precision=precision)
    return [None, gy]


def _dot_batch(vals: list, dims: list, *, dimension_numbers: tuple,
               preferred_element_type: Any = None, precision: Any = None) -> tuple[list, list]:
    (x, y), (dx, dy) = vals, dims
    (xc, yc), (xb, yb) = dimension_numbers

    def shift(ds: Sequence[int]) -> tuple:
        return tuple(d + 1 for d in ds)

    if dx is not None and dy is not None:
        x, y = mv.moveaxis(x, dx, 0), mv.moveaxis(y, dy, 0)
        dn = ((shift(xc), shift(yc)), ((0, *shift(xb)), (0, *shift(yb))))
        return [dot_general(x, y, dn, precision, preferred_element_type)], [0]
    if dx is not None:
        x = mv.moveaxis(x, dx, 0)
        dn = ((shift(xc), yc), (shift(xb), yb))
        out_dim = len(xb)  # the batch axis is lhs's first free dim
    else:
        y = mv.moveaxis(y, dy, 0)
        dn = ((xc, shift(yc)), (xb, shift(yb)))
        out_dim = len(xb) + len(_free(core.get_aval(x).ndim, xc, xb))
    return [dot_general(x, y, dn, precision, preferred_element_type)], [out_dim]


dot_general_p.impl = _dot_impl
dot_general_p.abstract_eval = _dot_abstract
dot_general_p.jvp = ad.bilinear_jvp(dot_general_p)
dot_general_p.transpose = _dot_transpose
dot_general_p.batch = _dot_batch


def dot_general(x: Any, y: Any, dimension_numbers: Any, precision: Any = None,
                preferred_element_type: Any = None) -> Any:
    """General tensor contraction (see module docstring for ``dimension_numbers``).

    ``precision`` is validated as JAX reads it (see :class:`Precision`); it has no effect on the
    CPU. When given, the equation carries it as its ``precision`` parameter (a pair: the higher of
    the two), which the CUDA backend's GEMMs read."""
    p = canonicalize_precision(precision)
    (xc, yc), (xb, yb) = dimension_numbers
    dn = ((tuple(int(i) for i in xc), tuple(int(i) for i in yc)),
          (tuple(int(i) for i in xb), tuple(int(i) for i in yb)))
    pet = None if preferred_element_type is None else dt.canonicalize(preferred_element_type)
    if isinstance(p, tuple):
        given = [q for q in p if q is not None]
        p = max(given, key=lambda q: q.value) if given else None
    if p is None:
        return dot_general_p.bind(x, y, dimension_numbers=dn, preferred_element_type=pet)
    return dot_general_p.bind(x, y, dimension_numbers=dn, preferred_element_type=pet, precision=p)


def dot(x: Any, y: Any, precision: Any = None, preferred_element_type: Any = None) -> Any:
    """Vector/matrix product of rank-1 or rank-2 operands (lax level)."""
    canonicalize_precision(precision)
    nx, ny = core.get_aval(x).ndim, core.get_aval(y).ndim
    if not (1 <= nx <= 2 and 1 <= ny <= 2):
        raise ShapeError(f"lax.dot takes rank 1 or 2 operands, got ranks {nx} and {ny}")
    return dot_general(x, y, (((nx - 1,), (0,)), ((), ())), precision, preferred_element_type)


dot_general_p.cost_class = "contraction"  # 2 M N K flops (aot.estimate_cost)
