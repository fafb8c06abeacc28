"""Elementwise primitives: unary math, binary arithmetic, comparisons, bitwise ops, select, casts.

At the lax level operands must have equal shapes and dtypes (``ember.numpy`` broadcasts and
promotes before binding). The output is weakly typed only when every input is. Each primitive's
NumPy implementation, abstract evaluation, JVP, transpose (linear ones) and batching rule are
declared here; the native lowering lives in the kernel renderer's op table.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.special as sps

from ember._src import ad_util as ad
from ember._src import core
from ember._src import dtypes as dt
from ember._src.core import Primitive, ShapedArray
from ember._src.prims._rules import check_kind, upcast_lowp
from ember.errors import DTypeError

# ---------------------------------------------------------------------------------------------
# Declaration helpers
# ---------------------------------------------------------------------------------------------


def _weak(avals: list[ShapedArray]) -> bool:
    return all(a.weak_type for a in avals)


def _nary_abstract(name: str, kind: str, out_dtype: Callable[[np.dtype], np.dtype] | None) -> Callable:
    def abstract_eval(*avals: ShapedArray, **params: Any) -> ShapedArray:
        shape = core.check_same_shapes(name, avals)
        dtype = core.check_same_dtypes(name, avals)
        check_kind(name, dtype, kind)
        od = dtype if out_dtype is None else out_dtype(dtype)
        return ShapedArray(shape, od, _weak(list(avals)) and od == dtype)

    return abstract_eval


def elementwise_batch(prim: Primitive) -> Callable:
    """vmap rule for an elementwise primitive: align batch dims at 0, broadcast unbatched args."""

    def batch(vals: list, dims: list, **params: Any) -> tuple[list, list]:
        vals = bring_to_front(vals, dims)
        out = prim.bind(*vals, **params)
        outs = out if prim.multiple_results else [out]
        return outs, [0] * len(outs)

    return batch


def bring_to_front(vals: list, dims: list) -> list:
    """Move each batched value's batch dim to 0 and broadcast unbatched values to match."""
    from ember._src.prims import movement as mv
    size = next(core.get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not None)
    out = []
    for v, d in zip(vals, dims):
        if d is None:
            a = core.get_aval(v)
            v = mv.broadcast_in_dim(v, (size, *a.shape), tuple(range(1, a.ndim + 1)))
        elif d != 0:
            v = mv.moveaxis(v, d, 0)
        out.append(v)
    return out


def _declare(name: str, impl: Callable, kind: str, out_dtype: Callable | None = None, *,
             linear: bool = False, lowp: bool = True) -> Primitive:
    p = Primitive(name, linear=linear)
    p.impl = upcast_lowp(impl) if lowp else impl
    p.abstract_eval = _nary_abstract(name, kind, out_dtype)
    p.batch = elementwise_batch(p)
    return p


def _to_bool(d: np.dtype) -> np.dtype:
    return dt.bool_


def _nondiff(p: Primitive, why: str = "its output is piecewise constant or non-float") -> None:
    """JVP of an output with zero derivative: the tangent is a symbolic zero."""

    def jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
        out = p.bind(*primals, **params)
        return [out], [ad.Zero.from_value(out)]

    p.jvp = jvp
    p.na("transpose", f"{p.name} is not linear ({why})")


def _nonlinear(*prims: Primitive) -> None:
    for p in prims:
        p.na("transpose", f"{p.name} is not linear")


def _unary_jvp(p: Primitive, deriv: Callable[[Any, Any], Any]) -> None:
    """``deriv(x, y)`` returns dy/dx given the primal input and output."""

    def jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
        (x,), (t,) = primals, tangents
        y = p.bind(x, **params)
        if ad.is_zero(t):
            return [y], [ad.Zero.from_value(y)]
        return [y], [mul(t, deriv(x, y))]

    p.jvp = jvp


# ---------------------------------------------------------------------------------------------
# Unary primitives
# ---------------------------------------------------------------------------------------------


def _np_round(x: np.ndarray, rounding_method: int = 0) -> np.ndarray:
    if rounding_method == 0:  # away from zero, as lax.round's default
        return np.sign(x) * np.floor(np.abs(x) + 0.5)
    return np.round(x)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1.0 / np.sqrt(x)


def _logistic(x: np.ndarray) -> np.ndarray:
    """The native backend's formula (``em_logisticf``/``em_logistic``): ``e = exp(-|x|)``, ``r = 1 / (1 +
    e)``, ``e * r`` below zero and ``r`` above. ``1 / (1 + exp(-x))`` (SciPy's ``expit``) overflows
    ``exp(-x)`` and gives 0 where the result is a tiny or subnormal number (float32 x < -88.7); this one
    keeps it, so every backend has the same tail (``docs/reliability.md``)."""
    if np.iscomplexobj(x):  # the stable split needs an order
        return 1 / (1 + np.exp(-x))
    with np.errstate(all="ignore"):
        e = np.exp(-np.abs(x))
        r = 1 / (1 + e)
        return np.where(x < 0, e * r, r).astype(x.dtype)


def _real_out(d: np.dtype) -> np.dtype:
    return dt.real_dtype(d)


neg_p = _declare("neg", np.negative, "num", linear=True)
sign_p = _declare("sign", lambda x: np.sign(x) if not np.iscomplexobj(x)
                  else np.where(x == 0, 0, x / np.where(x == 0, 1, np.abs(x))), "num")
floor_p = _declare("floor", np.floor, "float")
ceil_p = _declare("ceil", np.ceil, "float")
round_p = _declare("round", _np_round, "float")
is_finite_p = _declare("is_finite", np.isfinite, "float", _to_bool)
exp_p = _declare("exp", np.exp, "inexact")
exp2_p = _declare("exp2", np.exp2, "inexact")
log_p = _declare("log", np.log, "inexact")
log1p_p = _declare("log1p", np.log1p, "inexact")
expm1_p = _declare("expm1", np.expm1, "inexact")
tanh_p = _declare("tanh", np.tanh, "inexact")
logistic_p = _declare("logistic", _logistic, "inexact")
sin_p = _declare("sin", np.sin, "inexact")
cos_p = _declare("cos", np.cos, "inexact")
tan_p = _declare("tan", np.tan, "inexact")
asin_p = _declare("asin", np.arcsin, "inexact")
acos_p = _declare("acos", np.arccos, "inexact")
atan_p = _declare("atan", np.arctan, "inexact")
sinh_p = _declare("sinh", np.sinh, "inexact")
cosh_p = _declare("cosh", np.cosh, "inexact")
asinh_p = _declare("asinh", np.arcsinh, "inexact")
acosh_p = _declare("acosh", np.arccosh, "inexact")
atanh_p = _declare("atanh", np.arctanh, "inexact")
sqrt_p = _declare("sqrt", np.sqrt, "inexact")
rsqrt_p = _declare("rsqrt", _rsqrt, "inexact")
cbrt_p = _declare("cbrt", np.cbrt, "float")
abs_p = _declare("abs", np.abs, "num", _real_out)
not_p = _declare("not", lambda x: np.logical_not(x) if x.dtype == np.bool_ else np.invert(x),
                 "intbool", lowp=False)
real_p = _declare("real", np.real, "complex", _real_out, linear=True)
imag_p = _declare("imag", np.imag, "complex", _real_out, linear=True)
conj_p = _declare("conj", np.conj, "complex", linear=True)
erf_p = _declare("erf", sps.erf, "float")
erfc_p = _declare("erfc", sps.erfc, "float")
def _erf_inv(x: np.ndarray) -> np.ndarray:
    """``erfinv`` keeping the sign of zero (SciPy's gives +0.0 for -0.0; erf_inv is odd, as the
    native backend and JAX have it)."""
    return np.where(x == 0, x, sps.erfinv(x))


erf_inv_p = _declare("erf_inv", _erf_inv, "float")
def _lgamma(x: np.ndarray) -> np.ndarray:
    """``gammaln``, except below the smallest normal number, where SciPy returns inf: there
    ``lgamma(x)`` is ``-log|x|`` to within rounding (as C's ``lgamma``, JAX and the native backend give),
    and at ``-inf``, where SciPy returns ``-inf`` and C, JAX and the native backend ``+inf``."""
    y = sps.gammaln(x)
    if np.isneginf(x).any():
        y = np.where(np.isneginf(x), np.inf, y)
    tiny = (x != 0) & (np.abs(x) < np.finfo(x.dtype).tiny)
    return np.where(tiny, -np.log(np.abs(np.where(tiny, x, 1))), y) if tiny.any() else y


lgamma_p = _declare("lgamma", _lgamma, "float")
digamma_p = _declare("digamma", sps.psi, "float")
population_count_p = _declare("population_count",  # counts the bits of the two's-complement pattern
                              lambda x: np.bitwise_count(x.view(f"u{x.dtype.itemsize}")).astype(x.dtype),
                              "int",
                              lowp=False)
copy_p = _declare("copy", np.array, "any", linear=True, lowp=False)

# integer_pow: x ** y for a static Python int y
integer_pow_p = Primitive("integer_pow")


def _complex_power(x: np.ndarray, n: int) -> np.ndarray:
    """``x ** n`` for complex ``x`` and ``n >= 0`` by repeated squaring, as the compiled kernels and
    XLA compute it (NumPy's complex ``power`` takes another route: ``(3.4e38+1e30j) ** 2`` is NaN
    there and ``-inf+infj`` as ``x * x``)."""
    out, base = None, x  # no leading 1 * ...: (1 + 0j) * inf is NaN in complex arithmetic
    while n:
        if n & 1:
            out = base if out is None else out * base
        n >>= 1
        if n:
            base = base * base
    return np.ones_like(x) if out is None else out


def _integer_pow_impl(x: np.ndarray, *, y: int) -> np.ndarray:
    if y < 0 and not dt.is_inexact(x.dtype):
        raise DTypeError("integer_pow with a negative exponent requires a floating dtype")
    power = _complex_power if np.iscomplexobj(x) else np.power
    return power(x, y) if y >= 0 else 1 / power(x, -y)


def _integer_pow_abstract(x: ShapedArray, *, y: int) -> ShapedArray:
    check_kind("integer_pow", x.dtype, "num")
    if not isinstance(y, (int, np.integer)):
        raise TypeError(f"integer_pow exponent must be a Python int, got {type(y).__name__}")
    return x


integer_pow_p.impl = upcast_lowp(_integer_pow_impl)
integer_pow_p.abstract_eval = _integer_pow_abstract
integer_pow_p.batch = elementwise_batch(integer_pow_p)

# convert_element_type: the only primitive that changes dtype
convert_element_type_p = Primitive("convert_element_type", linear=True)


def _convert_impl(x: np.ndarray, *, new_dtype: np.dtype, weak_type: bool = False) -> np.ndarray:
    if dt.is_complex(x.dtype) and not dt.is_complex(new_dtype):
        x = np.real(x)
    if dt.is_float(x.dtype) and (dt.is_integer(new_dtype)):
        # NaN/inf to int is undefined in C; define it as 0 / clamp like XLA on CPU
        info = np.iinfo(new_dtype)
        with np.errstate(all="ignore"):
            xf = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0))
            # float64 cannot hold int64's max exactly (2**63 - 1 rounds up), so saturate explicitly
            hi, lo = xf >= float(info.max), xf <= float(info.min)
            out = np.where(hi | lo, 0, xf).astype(new_dtype)
        return np.where(hi, info.max, np.where(lo, info.min, out)).astype(new_dtype)
    with np.errstate(all="ignore"):
        return x.astype(new_dtype)


def _convert_abstract(x: ShapedArray, *, new_dtype: np.dtype, weak_type: bool = False) -> ShapedArray:
    return ShapedArray(x.shape, dt.canonicalize(new_dtype), weak_type)


convert_element_type_p.impl = _convert_impl
convert_element_type_p.abstract_eval = _convert_abstract
convert_element_type_p.batch = elementwise_batch(convert_element_type_p)

# ---------------------------------------------------------------------------------------------
# Binary primitives
# ---------------------------------------------------------------------------------------------


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C-style integer division (rounds toward zero), as the native backend computes it: ``x / 0``
    is 0 and ``MIN / -1`` wraps to MIN. Exact for every operand, INT_MIN included (no ``abs``,
    which overflows at INT_MIN)."""
    with np.errstate(all="ignore"):
        if a.dtype.kind == "u":
            return np.where(b == 0, 0, a // np.where(b == 0, 1, b)).astype(a.dtype)
        safe = np.where((b == 0) | (b == -1), 1, b).astype(a.dtype)
        q = np.floor_divide(a, safe)
        # floor -> truncation: one up where the division is inexact and the signs differ
        q = q + ((a - q * safe != 0) & ((a < 0) != (safe < 0))).astype(a.dtype)
        q = np.where(b == -1, np.negative(a), q)
        return np.where(b == 0, 0, q).astype(a.dtype)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return _int_div(a, b)
    return np.true_divide(a, b)


def _rem(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        with np.errstate(all="ignore"):
            return np.where(b == 0, 0, a - _int_div(a, b) * b).astype(a.dtype)  # x % 0 == 0, as native
    return np.fmod(a, b)


def _max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(a, b)


def _min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.minimum(a, b)


def _bitwise(np_fn: Callable, logical: Callable) -> Callable:
    return lambda a, b: logical(a, b) if a.dtype == np.bool_ else np_fn(a, b)


def _shift_left(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = a.dtype.itemsize * 8
    ok = (b >= 0) & (b < bits)
    return np.where(ok, np.left_shift(a, np.where(ok, b, 0).astype(a.dtype)), 0).astype(a.dtype)


def _shift_right_arith(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = a.dtype.itemsize * 8
    s = np.clip(b, 0, bits - 1).astype(a.dtype)
    if a.dtype.kind == "u":
        signed = a.view(np.dtype(f"i{a.dtype.itemsize}"))
        return np.right_shift(signed, s.view(signed.dtype)).view(a.dtype)
    return np.right_shift(a, s)


def _shift_right_logical(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = a.dtype.itemsize * 8
    ok = (b >= 0) & (b < bits)
    u = a.view(np.dtype(f"u{a.dtype.itemsize}"))
    res = np.right_shift(u, np.where(ok, b, 0).astype(u.dtype))
    return np.where(ok, res, 0).astype(u.dtype).view(a.dtype)


def _complex_out(d: np.dtype) -> np.dtype:
    return dt.complex_dtype(d)


add_p = _declare("add", np.add, "any", linear=True)
sub_p = _declare("sub", np.subtract, "num", linear=True)
mul_p = _declare("mul", np.multiply, "any")
div_p = _declare("div", _div, "num")
rem_p = _declare("rem", _rem, "realnum")
pow_p = _declare("pow", np.power, "inexact")
max_p = _declare("max", _max, "any")
min_p = _declare("min", _min, "any")
atan2_p = _declare("atan2", np.arctan2, "float")
nextafter_p = _declare("nextafter", np.nextafter, "float")
and_p = _declare("and", _bitwise(np.bitwise_and, np.logical_and), "intbool", lowp=False)
or_p = _declare("or", _bitwise(np.bitwise_or, np.logical_or), "intbool", lowp=False)
xor_p = _declare("xor", _bitwise(np.bitwise_xor, np.logical_xor), "intbool", lowp=False)
eq_p = _declare("eq", np.equal, "any", _to_bool)
ne_p = _declare("ne", np.not_equal, "any", _to_bool)
lt_p = _declare("lt", np.less, "real", _to_bool)
le_p = _declare("le", np.less_equal, "real", _to_bool)
gt_p = _declare("gt", np.greater, "real", _to_bool)
ge_p = _declare("ge", np.greater_equal, "real", _to_bool)
shift_left_p = _declare("shift_left", _shift_left, "int", lowp=False)
shift_right_arithmetic_p = _declare("shift_right_arithmetic", _shift_right_arith, "int", lowp=False)
shift_right_logical_p = _declare("shift_right_logical", _shift_right_logical, "int", lowp=False)
def _complex_impl(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + i b`` built from its parts (``a + 1j * b`` would turn an infinite or NaN ``b`` into a
    NaN real part)."""
    a, b = np.broadcast_arrays(a, b)
    out = np.empty(a.shape, np.result_type(a.dtype, np.complex64))
    out.real, out.imag = a, b
    return out


complex_p = _declare("complex", _complex_impl, "float", _complex_out, linear=True)

# select_n(which, *cases): which is bool (two cases) or int32 (any number of cases)
select_n_p = Primitive("select_n")


def _select_n_impl(which: np.ndarray, *cases: np.ndarray) -> np.ndarray:
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0]) if len(cases) == 2 else cases[0].copy()
    return np.choose(np.clip(which, 0, len(cases) - 1), cases)


def _select_n_abstract(which: ShapedArray, *cases: ShapedArray) -> ShapedArray:
    if not cases:
        raise TypeError("select_n needs at least one case")
    shape = core.check_same_shapes("select_n", [which, *cases])
    dtype = core.check_same_dtypes("select_n", list(cases))
    if which.dtype == dt.bool_:
        if len(cases) > 2:
            raise DTypeError("select_n with a bool predicate takes at most two cases")
    elif not dt.is_integer(which.dtype):
        raise DTypeError(f"select_n predicate must be bool or integer, got {which.dtype}")
    return ShapedArray(shape, dtype, _weak(list(cases)))


select_n_p.impl = _select_n_impl
select_n_p.abstract_eval = _select_n_abstract
select_n_p.batch = elementwise_batch(select_n_p)

# ---------------------------------------------------------------------------------------------
# lax-level functions (the public ``ember.lax`` names)
# ---------------------------------------------------------------------------------------------


def _fn(p: Primitive) -> Callable:
    def f(*args: Any) -> Any:
        return p.bind(*args)

    f.__name__ = p.name
    f.__doc__ = f"Elementwise ``{p.name}`` (lax level: operands must share shape and dtype)."
    return f


neg, sign, floor, ceil, is_finite = map(_fn, (neg_p, sign_p, floor_p, ceil_p, is_finite_p))
exp, exp2, log, log1p, expm1 = map(_fn, (exp_p, exp2_p, log_p, log1p_p, expm1_p))
tanh, logistic, sin, cos, tan = map(_fn, (tanh_p, logistic_p, sin_p, cos_p, tan_p))
asin, acos, atan, sinh, cosh = map(_fn, (asin_p, acos_p, atan_p, sinh_p, cosh_p))
asinh, acosh, atanh, sqrt, rsqrt, cbrt = map(_fn, (asinh_p, acosh_p, atanh_p, sqrt_p, rsqrt_p, cbrt_p))
abs, bitwise_not, real, imag, conj = map(_fn, (abs_p, not_p, real_p, imag_p, conj_p))  # noqa: A001
erf, erfc, erf_inv, lgamma, digamma = map(_fn, (erf_p, erfc_p, erf_inv_p, lgamma_p, digamma_p))
population_count, copy = _fn(population_count_p), _fn(copy_p)
add, sub, mul, div, rem, pow = map(_fn, (add_p, sub_p, mul_p, div_p, rem_p, pow_p))  # noqa: A001
max, min, atan2, nextafter = map(_fn, (max_p, min_p, atan2_p, nextafter_p))  # noqa: A001
bitwise_and, bitwise_or, bitwise_xor = map(_fn, (and_p, or_p, xor_p))
eq, ne, lt, le, gt, ge = map(_fn, (eq_p, ne_p, lt_p, le_p, gt_p, ge_p))
shift_left, shift_right_arithmetic = _fn(shift_left_p), _fn(shift_right_arithmetic_p)
shift_right_logical, complex = _fn(shift_right_logical_p), _fn(complex_p)  # noqa: A001


def round(x: Any, rounding_method: int = 0) -> Any:  # noqa: A001
    """Round to nearest: ``rounding_method=0`` away from zero, ``1`` to nearest even."""
    return round_p.bind(x, rounding_method=int(rounding_method))


def integer_pow(x: Any, y: int) -> Any:
    """``x ** y`` for a static integer ``y``."""
    return integer_pow_p.bind(x, y=int(y))


def convert_element_type(x: Any, new_dtype: Any, weak_type: bool = False) -> Any:
    """Cast ``x`` to ``new_dtype`` (complex to real keeps the real part; float to int truncates)."""
    new_dtype = dt.canonicalize(new_dtype)
    a = core.get_aval(x)
    python_scalar = isinstance(x, (int, float, builtins.complex))
    if a.dtype == new_dtype and a.weak_type == weak_type and not python_scalar:
        return x
    return convert_element_type_p.bind(x, new_dtype=new_dtype, weak_type=bool(weak_type))


def select_n(which: Any, *cases: Any) -> Any:
    """``cases[which]`` elementwise; ``which`` is bool (two cases) or an integer array."""
    return select_n_p.bind(which, *cases)


def select(pred: Any, on_true: Any, on_false: Any) -> Any:
    """``on_true`` where ``pred`` else ``on_false`` (lax level, equal shapes)."""
    return select_n_p.bind(pred, on_false, on_true)


# ---------------------------------------------------------------------------------------------
# JVP rules
# ---------------------------------------------------------------------------------------------


def _zeros_like(x: Any) -> Any:
    return ad.instantiate(ad.Zero(ad.tangent_aval(core.get_aval(x))))


def _const(x: Any, v: float) -> Any:
    from ember._src.prims.movement import full_like
    return full_like(x, v)


def _linear_jvp(p: Primitive) -> None:
    def jvp(primals: list, tangents: list, **params: Any) -> tuple[list, list]:
        out = p.bind(*primals, **params)
        if all(ad.is_zero(t) for t in tangents):
            return [out], [ad.Zero.from_value(out)]
        return [out], [p.bind(*map(ad.instantiate, tangents), **params)]

    p.jvp = jvp


for _p in (neg_p, real_p, imag_p, conj_p, copy_p, complex_p, convert_element_type_p):
    _linear_jvp(_p)


def _add_jvp(primals: list, tangents: list) -> tuple[list, list]:
    return [add(*primals)], [ad.add_tangents(*tangents)]


def _sub_jvp(primals: list, tangents: list) -> tuple[list, list]:
    return [sub(*primals)], [ad.add_tangents(tangents[0], ad.neg_tangent(tangents[1]))]


def _mul_jvp(primals: list, tangents: list) -> tuple[list, list]:
    (x, y), (tx, ty) = primals, tangents
    return [mul(x, y)], [ad.add_tangents(ad.mul_tangent(tx, y), ad.mul_tangent(ty, x))]


def _div_jvp(primals: list, tangents: list) -> tuple[list, list]:
    (x, y), (tx, ty) = primals, tangents
    out = div(x, y)
    t = ad.add_tangents(ad.mul_tangent(tx, div(_const(y, 1), y)),
                        ad.mul_tangent(ty, neg(div(out, y))))
    return [out], [t]


def _pow_jvp(primals: list, tangents: list) -> tuple[list, list]:
    (x, y), (tx, ty) = primals, tangents
    out = pow(x, y)
    # d/dx = y * x**(y-1), defined as 0 where y == 0; d/dy = out * log(x), 0 where x == 0
    zero = _const(x, 0)
    dx = select(eq(y, zero), zero, mul(y, pow(x, sub(y, _const(y, 1)))))
    safe_x = select(eq(x, zero), _const(x, 1), x)
    dy = select(eq(x, zero), zero, mul(out, log(safe_x)))
    return [out], [ad.add_tangents(ad.mul_tangent(tx, dx), ad.mul_tangent(ty, dy))]


def _minmax_jvp(p: Primitive) -> Callable:
    def jvp(primals: list, tangents: list) -> tuple[list, list]:
        (x, y), (tx, ty) = primals, tangents
        out = p.bind(x, y)
        # ties split the gradient evenly, as JAX does
        half = _const(x, 0.5) if dt.is_inexact(core.get_aval(x).dtype) else None
        if half is None:
            return [out], [ad.Zero.from_value(out)]
        one, zero = _const(x, 1), _const(x, 0)
        wx = select(eq(x, y), half, select(eq(out, x), one, zero))
        wy = sub(one, wx)
        return [out], [ad.add_tangents(ad.mul_tangent(tx, wx), ad.mul_tangent(ty, wy))]

    return jvp


def _atan2_jvp(primals: list, tangents: list) -> tuple[list, list]:
    (x, y), (tx, ty) = primals, tangents
    out = atan2(x, y)
    denom = add(mul(x, x), mul(y, y))
    return [out], [ad.add_tangents(ad.mul_tangent(tx, div(y, denom)),
                                   ad.mul_tangent(ty, neg(div(x, denom))))]


def _rem_jvp(primals: list, tangents: list) -> tuple[list, list]:
    (x, y), (tx, ty) = primals, tangents
    out = rem(x, y)
    if not dt.is_inexact(core.get_aval(x).dtype):
        return [out], [ad.Zero.from_value(out)]
    q = round(div(sub(x, out), y))
    return [out], [ad.add_tangents(tx, ad.mul_tangent(ty, neg(q)))]


def _select_n_jvp(primals: list, tangents: list) -> tuple[list, list]:
    which, *cases = primals
    out = select_n(which, *cases)
    ts = tangents[1:]
    if all(ad.is_zero(t) for t in ts):
        return [out], [ad.Zero.from_value(out)]
    return [out], [select_n(which, *map(ad.instantiate, ts))]


def _integer_pow_jvp(primals: list, tangents: list, *, y: int) -> tuple[list, list]:
    (x,), (t,) = primals, tangents
    out = integer_pow(x, y)
    if ad.is_zero(t) or not dt.is_inexact(core.get_aval(x).dtype):
        return [out], [ad.Zero.from_value(out)]
    d = _const(x, 0) if y == 0 else mul(_const(x, y), integer_pow(x, y - 1)) if y != 1 else _const(x, 1)
    return [out], [mul(t, d)]


def _abs_jvp(primals: list, tangents: list) -> tuple[list, list]:
    (x,), (t,) = primals, tangents
    out = abs(x)
    if ad.is_zero(t) or not dt.is_inexact(core.get_aval(x).dtype):
        return [out], [ad.Zero.from_value(out)]
    if dt.is_complex(core.get_aval(x).dtype):
        # d|z| = Re(conj(z) dz) / |z|
        safe = select(eq(out, _const(out, 0)), _const(out, 1), out)
        return [out], [div(real(mul(conj(x), t)), safe)]
    return [out], [mul(t, sign(x))]


add_p.jvp, sub_p.jvp, mul_p.jvp, div_p.jvp, pow_p.jvp = _add_jvp, _sub_jvp, _mul_jvp, _div_jvp, _pow_jvp
max_p.jvp, min_p.jvp = _minmax_jvp(max_p), _minmax_jvp(min_p)
atan2_p.jvp, rem_p.jvp, select_n_p.jvp = _atan2_jvp, _rem_jvp, _select_n_jvp
integer_pow_p.jvp, abs_p.jvp = _integer_pow_jvp, _abs_jvp

_unary_jvp(exp_p, lambda x, y: y)
_unary_jvp(exp2_p, lambda x, y: mul(y, _const(y, np.log(2.0))))
_unary_jvp(log_p, lambda x, y: div(_const(x, 1), x))
_unary_jvp(log1p_p, lambda x, y: div(_const(x, 1), add(x, _const(x, 1))))
_unary_jvp(expm1_p, lambda x, y: add(y, _const(y, 1)))
_unary_jvp(tanh_p, lambda x, y: sub(_const(y, 1), mul(y, y)))
_unary_jvp(logistic_p, lambda x, y: mul(y, sub(_const(y, 1), y)))
_unary_jvp(sin_p, lambda x, y: cos(x))
_unary_jvp(cos_p, lambda x, y: neg(sin(x)))
_unary_jvp(tan_p, lambda x, y: add(_const(y, 1), mul(y, y)))
_unary_jvp(asin_p, lambda x, y: rsqrt(sub(_const(x, 1), mul(x, x))))
_unary_jvp(acos_p, lambda x, y: neg(rsqrt(sub(_const(x, 1), mul(x, x)))))
_unary_jvp(atan_p, lambda x, y: div(_const(x, 1), add(_const(x, 1), mul(x, x))))
_unary_jvp(sinh_p, lambda x, y: cosh(x))
_unary_jvp(cosh_p, lambda x, y: sinh(x))
_unary_jvp(asinh_p, lambda x, y: rsqrt(add(mul(x, x), _const(x, 1))))
_unary_jvp(acosh_p, lambda x, y: rsqrt(mul(sub(x, _const(x, 1)), add(x, _const(x, 1)))))
_unary_jvp(atanh_p, lambda x, y: div(_const(x, 1), sub(_const(x, 1), mul(x, x))))
_unary_jvp(sqrt_p, lambda x, y: div(_const(y, 0.5), y))
_unary_jvp(rsqrt_p, lambda x, y: mul(_const(y, -0.5), div(y, x)))
_unary_jvp(cbrt_p, lambda x, y: div(_const(y, 1 / 3), mul(y, y)))
_unary_jvp(erf_p, lambda x, y: mul(_const(x, 2 / np.sqrt(np.pi)), exp(neg(mul(x, x)))))
_unary_jvp(erfc_p, lambda x, y: mul(_const(x, -2 / np.sqrt(np.pi)), exp(neg(mul(x, x)))))
_unary_jvp(erf_inv_p, lambda x, y: mul(_const(x, np.sqrt(np.pi) / 2), exp(mul(y, y))))
_unary_jvp(lgamma_p, lambda x, y: digamma(x))

for _p in (sign_p, floor_p, ceil_p, round_p, is_finite_p, not_p, population_count_p,
           and_p, or_p, xor_p, eq_p, ne_p, lt_p, le_p, gt_p, ge_p, shift_left_p,
           shift_right_arithmetic_p, shift_right_logical_p):
    _nondiff(_p)


def _nextafter_jvp(primals: list, tangents: list) -> tuple[list, list]:
    # nextafter(x, y) moves x by one ulp: it follows x (so spacing(x) = nextafter - x has slope 0)
    out = nextafter(*primals)
    t = tangents[0]
    return [out], [ad.Zero.from_value(out) if ad.is_zero(t) else t]


nextafter_p.jvp = _nextafter_jvp
nextafter_p.na("transpose", "nextafter is not linear")


# polygamma(n, x) for a static order n >= 1: the derivatives of digamma
polygamma_p = Primitive("polygamma")


def _polygamma_abstract(x: ShapedArray, *, n: int) -> ShapedArray:
    check_kind("polygamma", x.dtype, "float")
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"polygamma order must be a non-negative int, got {n!r}")
    return x


def _polygamma_jvp(primals: list, tangents: list, *, n: int) -> tuple[list, list]:
    (x,), (t,) = primals, tangents
    out = polygamma(n, x)
    if ad.is_zero(t):
        return [out], [ad.Zero.from_value(out)]
    return [out], [mul(t, polygamma(n + 1, x))]


polygamma_p.impl = upcast_lowp(lambda x, *, n: sps.polygamma(n, x))
polygamma_p.abstract_eval = _polygamma_abstract
polygamma_p.jvp = _polygamma_jvp
polygamma_p.batch = elementwise_batch(polygamma_p)
polygamma_p.na("transpose", "polygamma is not linear")


def polygamma(n: int, x: Any) -> Any:
    """The ``n``-th derivative of digamma (``n`` a static non-negative int)."""
    if int(n) == 0:
        return digamma(x)
    return polygamma_p.bind(x, n=int(n))


_unary_jvp(digamma_p, lambda x, y: polygamma(1, x))
_nonlinear(exp_p, exp2_p, log_p, log1p_p, expm1_p, tanh_p, logistic_p, sin_p, cos_p, tan_p, asin_p,
           acos_p, atan_p, sinh_p, cosh_p, asinh_p, acosh_p, atanh_p, sqrt_p, rsqrt_p, cbrt_p, abs_p,
           erf_p, erfc_p, erf_inv_p, lgamma_p, digamma_p, integer_pow_p, div_p, rem_p, pow_p, max_p,
           min_p, atan2_p)

# ---------------------------------------------------------------------------------------------
# Transpose rules (linear primitives); mul, div and select_n are linear in some operands
# ---------------------------------------------------------------------------------------------


def _unbroadcast_ct(ct: Any, aval: ShapedArray) -> Any:
    """Cotangents keep the operand's dtype (weak typing dropped)."""
    if ad.is_zero(ct):
        return ct
    return convert_element_type(ct, aval.dtype)


def _add_transpose(ct: Any, x: Any, y: Any) -> list:
    return [_unbroadcast_ct(ct, x.aval) if isinstance(x, ad.UndefPrimal) else None,
            _unbroadcast_ct(ct, y.aval) if isinstance(y, ad.UndefPrimal) else None]


def _sub_transpose(ct: Any, x: Any, y: Any) -> list:
    return [ct if isinstance(x, ad.UndefPrimal) else None,
            ad.neg_tangent(ct) if isinstance(y, ad.UndefPrimal) else None]


def _mul_transpose(ct: Any, x: Any, y: Any) -> list:
    if isinstance(x, ad.UndefPrimal) and isinstance(y, ad.UndefPrimal):
        raise TypeError("mul is not linear in both operands")
    if isinstance(x, ad.UndefPrimal):
        return [ad.Zero(x.aval) if ad.is_zero(ct) else mul(ct, _conj_if_complex(y)), None]
    return [None, ad.Zero(y.aval) if ad.is_zero(ct) else mul(_conj_if_complex(x), ct)]


def _conj_if_complex(x: Any) -> Any:
    return x  # transposition is the plain (non-conjugating) linear transpose, as in JAX


def _div_transpose(ct: Any, x: Any, y: Any) -> list:
    if isinstance(y, ad.UndefPrimal):
        raise TypeError("div is not linear in its denominator")
    return [ad.Zero(x.aval) if ad.is_zero(ct) else div(ct, y), None]


def _neg_transpose(ct: Any, x: Any) -> list:
    return [ad.neg_tangent(ct)]


def _select_n_transpose(ct: Any, which: Any, *cases: Any) -> list:
    if isinstance(which, ad.UndefPrimal):
        raise TypeError("select_n is not linear in its predicate")
    res: list = [None]
    for i, c in enumerate(cases):
        if not isinstance(c, ad.UndefPrimal):
            res.append(None)
        elif ad.is_zero(ct):
            res.append(ad.Zero(c.aval))
        else:
            zeros = _zeros_like(ct)
            res.append(select_n(which, *[ct if j == i else zeros for j in range(len(cases))]))
    return res


def _unary_linear_transpose(fn: Callable) -> Callable:
    def transpose(ct: Any, x: Any, **params: Any) -> list:
        return [ad.Zero(x.aval) if ad.is_zero(ct) else fn(ct, x.aval, **params)]

    return transpose


def _convert_transpose(ct: Any, x: Any, *, new_dtype: Any, weak_type: bool = False) -> list:
    if ad.is_zero(ct):
        return [ad.Zero(x.aval)]
    return [convert_element_type(ct, x.aval.dtype)]


def _complex_transpose(ct: Any, x: Any, y: Any) -> list:
    res = []
    for op, part in ((x, real), (y, lambda c: neg(imag(c)))):
        if isinstance(op, ad.UndefPrimal):
            res.append(ad.Zero(op.aval) if ad.is_zero(ct) else part(ct))
        else:
            res.append(None)
    return res


add_p.transpose, sub_p.transpose, mul_p.transpose = _add_transpose, _sub_transpose, _mul_transpose
div_p.transpose, neg_p.transpose, select_n_p.transpose = _div_transpose, _neg_transpose, _select_n_transpose
copy_p.transpose = _unary_linear_transpose(lambda ct, aval: copy(ct))
real_p.transpose = _unary_linear_transpose(lambda ct, aval: complex(ct, _zeros_like(ct)))
imag_p.transpose = _unary_linear_transpose(lambda ct, aval: complex(_zeros_like(ct), neg(ct)))
conj_p.transpose = _unary_linear_transpose(lambda ct, aval: conj(ct))
convert_element_type_p.transpose = _convert_transpose
complex_p.transpose = _complex_transpose
div_p.not_applicable.pop("transpose", None)


# What a cost model counts per output element (``aot.estimate_cost``; every elementwise primitive
# is classified, tests/test_registry.py checks it).
for _p in (acos_p, acosh_p, asin_p, asinh_p, atan_p, atan2_p, atanh_p, cbrt_p, cos_p, cosh_p,
           digamma_p, erf_p, erf_inv_p, erfc_p, exp_p, exp2_p, expm1_p, lgamma_p, log_p, log1p_p,
           logistic_p, polygamma_p, pow_p, rsqrt_p, sin_p, sinh_p, sqrt_p, tan_p, tanh_p):
    _p.cost_class = "transcendental"
for _p in (abs_p, add_p, and_p, ceil_p, div_p, eq_p, floor_p, ge_p, gt_p, integer_pow_p, is_finite_p,
           le_p, lt_p, max_p, min_p, mul_p, ne_p, neg_p, nextafter_p, not_p, or_p, rem_p, round_p,
           select_n_p, sign_p, sub_p, xor_p, population_count_p, shift_left_p,
           shift_right_arithmetic_p, shift_right_logical_p):
    _p.cost_class = "arithmetic"
for _p in (complex_p, conj_p, convert_element_type_p, copy_p, imag_p, real_p):
    _p.cost_class = "free"

