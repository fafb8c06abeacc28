"""The rest of NumPy's elementwise functions, composed from lax-level primitives."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src.numpy import ufuncs as uf
from ember._src.numpy.ufuncs import ArrayLike, promote_args
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims.random_bits import bitcast_convert_type
from ember.errors import DTypeError

__all__ = [
    "angle", "copysign", "deg2rad", "degrees", "divmod", "fmax", "fmin", "frexp", "gcd", "heaviside",
    "hypot", "i0", "lcm", "ldexp", "logaddexp", "logaddexp2", "modf", "nan_to_num", "nextafter",
    "rad2deg", "radians", "signbit", "sinc", "spacing", "isneginf", "isposinf", "isreal", "iscomplex",
    "isrealobj", "iscomplexobj", "positive", "fabs", "float_power",
]


def _c(x: Any, v: Any) -> Any:
    return mv.full_like(x, v)


def _real_float(name: str, *args: ArrayLike) -> list[Any]:
    out = promote_args(name, *args, to="inexact")
    if dt.is_complex(core.get_aval(out[0]).dtype):
        raise DTypeError(f"{name} does not support complex inputs")
    return out


def hypot(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """``sqrt(x1**2 + x2**2)`` without intermediate overflow."""
    a, b = _real_float("hypot", x1, x2)
    a, b = ew.abs(a), ew.abs(b)
    big, small = ew.max(a, b), ew.min(a, b)
    safe = ew.select(ew.eq(big, _c(big, 0)), _c(big, 1), big)
    r = ew.div(small, safe)
    out = ew.mul(big, ew.sqrt(ew.add(_c(r, 1), ew.mul(r, r))))
    inf = ew.bitwise_or(ew.eq(a, _c(a, np.inf)), ew.eq(b, _c(b, np.inf)))
    return ew.select(inf, _c(out, np.inf), out)


def logaddexp(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """``log(exp(x1) + exp(x2))`` computed stably."""
    a, b = _real_float("logaddexp", x1, x2)
    m = ew.max(a, b)
    d = ew.neg(ew.abs(ew.sub(a, b)))
    out = ew.add(m, ew.log1p(ew.exp(d)))
    # equal infinities: a - b is NaN; the answer is m itself
    inf_same = ew.bitwise_and(ew.eq(a, b), ew.eq(ew.abs(a), _c(a, np.inf)))
    return ew.select(inf_same, m, out)


def logaddexp2(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """``log2(2**x1 + 2**x2)`` computed stably."""
    a, b = _real_float("logaddexp2", x1, x2)
    ln2 = _c(a, np.log(2.0))
    return ew.div(logaddexp(ew.mul(a, ln2), ew.mul(b, ln2)), ln2)


def copysign(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Magnitude of ``x1`` with the sign of ``x2`` (including the sign of zero)."""
    a, b = _real_float("copysign", x1, x2)
    return ew.select(signbit(b), ew.neg(ew.abs(a)), ew.abs(a))


def signbit(x: ArrayLike, /) -> Any:
    """True where the sign bit is set (negative numbers, -0.0, negative NaN)."""
    (a,) = promote_args("signbit", x)
    d = core.get_aval(a).dtype
    if dt.is_complex(d):
        raise DTypeError("signbit does not support complex inputs")
    if not dt.is_inexact(d):
        return ew.lt(a, _c(a, 0)) if np.dtype(d).kind == "i" else mv.full_like(a, False, dt.bool_)
    # the top bit of the IEEE pattern: set for negative numbers, -0.0 and negative NaNs
    bits = np.dtype(d).itemsize * 8
    u = bitcast_convert_type(a, np.dtype(f"uint{bits}"))
    top = ew.shift_right_logical(u, mv.full_like(u, bits - 1))
    return ew.ne(top, mv.full_like(top, 0))


def nextafter(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """The next representable float after ``x1`` towards ``x2``."""
    a, b = _real_float("nextafter", x1, x2)
    return ew.nextafter(a, b)


def fmax(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Elementwise maximum ignoring NaNs (NaN only if both are NaN)."""
    a, b = promote_args("fmax", x1, x2)
    if not dt.is_inexact(core.get_aval(a).dtype):
        return ew.max(a, b)
    return ew.select(ew.ne(a, a), b, ew.select(ew.ne(b, b), a, ew.max(a, b)))


def fmin(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Elementwise minimum ignoring NaNs (NaN only if both are NaN)."""
    a, b = promote_args("fmin", x1, x2)
    if not dt.is_inexact(core.get_aval(a).dtype):
        return ew.min(a, b)
    return ew.select(ew.ne(a, a), b, ew.select(ew.ne(b, b), a, ew.min(a, b)))


def heaviside(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """0 where ``x1 < 0``, ``x2`` where ``x1 == 0``, 1 where ``x1 > 0``."""
    a, b = _real_float("heaviside", x1, x2)
    return ew.select(ew.lt(a, _c(a, 0)), _c(a, 0), ew.select(ew.eq(a, _c(a, 0)), b,
                                                             ew.select(ew.ne(a, a), a, _c(a, 1))))


def sinc(x: ArrayLike, /) -> Any:
    """Normalized sinc ``sin(pi x) / (pi x)``, 1 at 0."""
    (a,) = promote_args("sinc", x, to="inexact")
    zero = ew.eq(a, _c(a, 0))
    px = ew.mul(ew.select(zero, _c(a, 1), a), _c(a, np.pi))
    return ew.select(zero, _c(a, 1), ew.div(ew.sin(px), px))


def deg2rad(x: ArrayLike, /) -> Any:
    (a,) = promote_args("deg2rad", x, to="inexact")
    return ew.mul(a, _c(a, np.pi / 180))


def rad2deg(x: ArrayLike, /) -> Any:
    (a,) = promote_args("rad2deg", x, to="inexact")
    return ew.mul(a, _c(a, 180 / np.pi))


radians, degrees = deg2rad, rad2deg


def angle(z: ArrayLike, deg: bool = False) -> Any:
    """The argument of a complex number (0 or pi for reals)."""
    (a,) = promote_args("angle", z, to="inexact")
    if dt.is_complex(core.get_aval(a).dtype):
        out = ew.atan2(ew.imag(a), ew.real(a))
    else:
        out = ew.atan2(_c(a, 0), a)
    return rad2deg(out) if deg else out


def nan_to_num(x: ArrayLike, copy: bool = True, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Any:
    """Replace NaN with ``nan`` and infinities with the largest finite values (or the given ones)."""
    (a,) = promote_args("nan_to_num", x)
    d = core.get_aval(a).dtype
    if not dt.is_inexact(d):
        return a
    if dt.is_complex(d):
        r = nan_to_num(ew.real(a), nan=nan, posinf=posinf, neginf=neginf)
        i = nan_to_num(ew.imag(a), nan=nan, posinf=posinf, neginf=neginf)
        return ew.complex(r, i)
    info = dt.finfo(d)
    hi = float(info.max) if posinf is None else posinf
    lo = float(info.min) if neginf is None else neginf
    a = ew.select(ew.ne(a, a), _c(a, nan), a)
    a = ew.select(ew.eq(a, _c(a, np.inf)), _c(a, hi), a)
    return ew.select(ew.eq(a, _c(a, -np.inf)), _c(a, lo), a)


def divmod(x1: ArrayLike, x2: ArrayLike, /) -> tuple[Any, Any]:  # noqa: A001
    """``(floor_divide(x1, x2), remainder(x1, x2))``."""
    return uf.floor_divide(x1, x2), uf.remainder(x1, x2)


def modf(x: ArrayLike, /) -> tuple[Any, Any]:
    """Fractional and integral parts, both with the sign of ``x``."""
    (a,) = promote_args("modf", x, to="inexact")
    whole = uf.trunc(a)
    return ew.sub(a, whole), whole


def ldexp(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """``x1 * 2**x2`` for integer ``x2``."""
    (a,) = promote_args("ldexp", x1, to="inexact")
    (e,) = promote_args("ldexp", x2)
    if not dt.is_integer(core.get_aval(e).dtype):
        raise DTypeError("ldexp exponent must be an integer array")
    a, e2 = promote_args("ldexp", a, ew.convert_element_type(e, core.get_aval(a).dtype))
    return ew.mul(a, ew.exp2(e2))


def frexp(x: ArrayLike, /) -> tuple[Any, Any]:
    """Mantissa in [0.5, 1) and integer exponent with ``x = m * 2**e``."""
    (a,) = promote_args("frexp", x, to="inexact")
    absx = ew.abs(a)
    zero = ew.bitwise_or(ew.eq(absx, _c(absx, 0)), ew.bitwise_not(ew.is_finite(a)))
    safe = ew.select(zero, _c(absx, 1), absx)
    e = ew.add(ew.floor(ew.div(ew.log(safe), _c(safe, np.log(2.0)))), _c(safe, 1))
    m = ew.div(a, ew.exp2(e))
    # correct rounding of log2 near powers of two
    too_big = ew.ge(ew.abs(m), _c(m, 1))
    m = ew.select(too_big, ew.div(m, _c(m, 2)), m)
    e = ew.select(too_big, ew.add(e, _c(e, 1)), e)
    too_small = ew.bitwise_and(ew.lt(ew.abs(m), _c(m, 0.5)), ew.bitwise_not(zero))
    m = ew.select(too_small, ew.mul(m, _c(m, 2)), m)
    e = ew.select(too_small, ew.sub(e, _c(e, 1)), e)
    m = ew.select(zero, a, m)
    e = ew.select(zero, _c(e, 0), e)
    return m, ew.convert_element_type(e, dt.int32)


def spacing(x: ArrayLike, /) -> Any:
    """Distance to the next representable number away from zero."""
    (a,) = promote_args("spacing", x, to="inexact")
    away = ew.select(signbit(a), _c(a, -np.inf), _c(a, np.inf))
    return ew.sub(ew.nextafter(a, away), a)


def _int_gcd(a: Any, b: Any) -> Any:
    a, b = ew.abs(a), ew.abs(b)
    nbits = np.dtype(core.get_aval(a).dtype).itemsize * 8
    # Euclid's algorithm needs at most ~1.44 * bits steps; unrolled so it traces
    for _ in range(int(1.5 * nbits) + 2):
        nz = ew.ne(b, _c(b, 0))
        safe = ew.select(nz, b, _c(b, 1))
        a, b = ew.select(nz, b, a), ew.select(nz, ew.rem(a, safe), b)
    return a


def gcd(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Greatest common divisor of integers."""
    a, b = promote_args("gcd", x1, x2)
    if not dt.is_integer(core.get_aval(a).dtype):
        raise DTypeError("gcd requires integer inputs")
    return _int_gcd(a, b)


def lcm(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Least common multiple of integers."""
    a, b = promote_args("lcm", x1, x2)
    if not dt.is_integer(core.get_aval(a).dtype):
        raise DTypeError("lcm requires integer inputs")
    g = _int_gcd(a, b)
    safe = ew.select(ew.eq(g, _c(g, 0)), _c(g, 1), g)
    return ew.abs(ew.mul(ew.div(a, safe), b))


def i0(x: ArrayLike, /) -> Any:
    """Modified Bessel function of the first kind, order 0 (power series, |x| <= ~20 accurate)."""
    (a,) = promote_args("i0", x, to="inexact")
    q = ew.mul(ew.mul(a, a), _c(a, 0.25))
    term = _c(a, 1)
    total = _c(a, 1)
    for k in range(1, 60):
        term = ew.div(ew.mul(term, q), _c(a, float(k * k)))
        total = ew.add(total, term)
    return total


def isposinf(x: ArrayLike, /) -> Any:
    (a,) = promote_args("isposinf", x)
    return ew.eq(a, _c(a, np.inf)) if dt.is_inexact(core.get_aval(a).dtype) else \
        mv.full_like(a, False, dt.bool_)


def isneginf(x: ArrayLike, /) -> Any:
    (a,) = promote_args("isneginf", x)
    return ew.eq(a, _c(a, -np.inf)) if dt.is_inexact(core.get_aval(a).dtype) else \
        mv.full_like(a, False, dt.bool_)


def isreal(x: ArrayLike, /) -> Any:
    (a,) = promote_args("isreal", x)
    if dt.is_complex(core.get_aval(a).dtype):
        return ew.eq(ew.imag(a), _c(ew.imag(a), 0))
    return mv.full_like(a, True, dt.bool_)


def iscomplex(x: ArrayLike, /) -> Any:
    return uf.logical_not(isreal(x))


def isrealobj(x: ArrayLike) -> bool:
    return not dt.is_complex(dt.dtype_and_weak(uf.asarray(x))[0])


def iscomplexobj(x: ArrayLike) -> bool:
    return dt.is_complex(dt.dtype_and_weak(uf.asarray(x))[0])


positive = uf.positive


def fabs(x: ArrayLike, /) -> Any:
    (a,) = _real_float("fabs", x)
    return ew.abs(a)


float_power = uf.float_power
