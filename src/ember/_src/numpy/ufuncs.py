"""NumPy-level elementwise functions: dtype promotion (JAX lattice, weak scalars) and broadcasting
on top of the lax-level primitives, which require equal shapes and dtypes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src import core, devices
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import Array, aligned_copy, asarray_eager
from ember._src.dynamic import dimension_as_value
from ember._src.numpy import eager
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember.errors import DTypeError

ArrayLike = Any


def asarray(x: ArrayLike, dtype: Any = None, order: str | None = None, *, copy: bool | None = None,
            device: Any = None) -> Any:
    """An ember value for ``x``: tracers and Arrays pass through, everything else converts.

    As ``jax.numpy.asarray``: ``copy=True`` returns a new Array even for an Array input;
    ``copy=None``/``False`` reuse an Array input when no conversion is needed (host data is always
    copied into an immutable buffer, as JAX does). ``ember.numpy.asarray`` (:mod:`.creation`) also
    puts the result on ``device`` or the default device; this one, used inside ember, does not.
    """
    check_device("asarray", device)
    if order not in (None, "K", "A", "C"):
        raise NotImplementedError(f"asarray: order={order!r} is not supported (ember arrays are C-order)")
    if isinstance(x, core.Tracer):
        return x if dtype is None else ew.convert_element_type(x, dt.user_dtype(dtype, "asarray"))
    out = asarray_eager(x, dt.user_dtype(dtype, "asarray"))
    if copy and out is x:
        out = Array(aligned_copy(np.array(x.value)), x.weak_type)
    return out


def check_device(name: str, device: Any) -> None:
    """Accept ``device`` when it names a device ember knows (None, ``"cpu"``, ``"webgpu:0"``,
    ``"cuda:0"`` or a device object); anything else raises ``ValueError`` naming the function.
    (The constructors of :mod:`.creation` put their result on a GPU device.)"""
    if device is None or device == "cpu" or getattr(device, "platform", None) == "cpu":
        return
    try:
        devices.parse_device(device)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


def _operand(x: ArrayLike) -> Any:
    if isinstance(x, (Array, core.Tracer)):
        return x
    if isinstance(x, np.generic):
        return asarray_eager(x)
    if isinstance(x, sh.DimExpr):
        return dimension_as_value(x)
    if isinstance(x, (bool, int, float, complex)):
        return x  # stays a Python scalar (weak) until promotion
    return asarray_eager(x)


def promote_args(name: str, *args: ArrayLike, to: str | None = None) -> list[Any]:
    """Promote to a common dtype (JAX lattice) and broadcast to a common shape.

    ``to="inexact"`` additionally promotes integer/bool results to the default float (float32
    for weak results, else the float of matching width as JAX does).
    """
    ops = [_operand(a) for a in args]
    typed = [dt.dtype_and_weak(o) for o in ops]
    dtype, weak = dt.promote(*typed)
    if to == "inexact" and not dt.is_inexact(dtype):
        dtype = dt.to_float(dtype) if not weak else dt.float32
    shapes = [core.get_aval(o).shape if not isinstance(o, (bool, int, float, complex)) else ()
              for o in ops]
    shape = sh.broadcast_shapes(*shapes, op=name)
    out = []
    for o, s in zip(ops, shapes):
        if isinstance(o, (bool, int, float, complex)):
            _check_scalar_fits(o, dtype, name)
            o = Array(aligned_copy(np.asarray(o).astype(dtype)), weak)
        elif core.get_aval(o).dtype != dtype or core.get_aval(o).weak_type != weak:
            o = ew.convert_element_type(o, dtype, weak_type=weak)
        if s != shape:
            o = mv.broadcast_to_rank_shape(o, shape)
        out.append(o)
    return out


def _check_scalar_fits(x: Any, dtype: np.dtype, name: str) -> None:
    if isinstance(x, int) and not isinstance(x, bool) and dt.is_integer(dtype):
        info = np.iinfo(dtype)
        if not info.min <= x <= info.max:
            raise OverflowError(f"{name}: Python int {x} is out of bounds for {dtype}")


def _unary(name: str, lax_fn: Callable, to: str | None = None, doc: str = "") -> Callable:
    def f(x: ArrayLike, /) -> Any:
        if type(x) is Array and (r := eager.try_fast(name, lax_fn, to, (x,))) is not None:
            return r
        (x,) = promote_args(name, x, to=to)
        return lax_fn(x)

    f.__name__ = name
    f.__qualname__ = name
    f.__doc__ = doc or f"Elementwise ``{name}``, as ``numpy.{name}``."
    return f


def _binary(name: str, lax_fn: Callable, to: str | None = None, doc: str = "") -> Callable:
    def f(x1: ArrayLike, x2: ArrayLike, /) -> Any:
        if (type(x1) is Array or type(x2) is Array) and \
                (r := eager.try_fast(name, lax_fn, to, (x1, x2))) is not None:
            return r
        a, b = promote_args(name, x1, x2, to=to)
        return lax_fn(a, b)

    f.__name__ = name
    f.__qualname__ = name
    f.__doc__ = doc or f"Elementwise ``{name}`` with broadcasting and promotion, as ``numpy.{name}``."
    return f


def _require(name: str, x: Any, ok: Callable[[np.dtype], bool], what: str) -> None:
    if not ok(core.get_aval(x).dtype):
        raise DTypeError(f"{name} requires {what}, got {core.get_aval(x).dtype}")


# -- arithmetic -------------------------------------------------------------------------------

add = _binary("add", ew.add)
subtract = _binary("subtract", lambda a, b: ew.bitwise_xor(a, b) if a.dtype == dt.bool_ else ew.sub(a, b))
multiply = _binary("multiply", lambda a, b: ew.bitwise_and(a, b) if a.dtype == dt.bool_ else ew.mul(a, b))
true_divide = _binary("true_divide", ew.div, to="inexact")
divide = true_divide
negative = _unary("negative", ew.neg)
positive = _unary("positive", lambda x: x)


def floor_divide(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Elementwise floor division, as ``numpy.floor_divide``."""
    a, b = promote_args("floor_divide", x1, x2)
    d = core.get_aval(a).dtype
    if dt.is_integer(d):
        q = ew.div(a, b)
        r = ew.rem(a, b)
        zero = mv.full_like(r, 0)
        fix = ew.bitwise_and(ew.ne(r, zero), ew.ne(ew.lt(r, zero), ew.lt(b, zero)))
        return ew.select(fix, ew.sub(q, mv.full_like(q, 1)), q)
    if dt.is_complex(d):
        raise DTypeError("floor_divide does not support complex dtypes")
    if d == dt.bool_:
        raise DTypeError("floor_divide does not support bool")
    return _float_floor_div(a, b)


def _float_floor_div(a: Any, b: Any) -> Any:
    """Floating floor division as NumPy's ``divmod`` (and JAX) define it: from ``fmod``, so
    ``inf // 1`` is NaN and ``-1 // inf`` is -1 (``floor(a / b)`` would give inf and -0.0).
    float16/bfloat16 compute in float32 and round once, as NumPy does."""
    d = core.get_aval(a).dtype
    if dt.is_low_precision(d):
        f32 = dt.float32
        return ew.convert_element_type(_float_floor_div(ew.convert_element_type(a, f32),
                                                        ew.convert_element_type(b, f32)), d)
    zero, one = mv.full_like(a, 0), mv.full_like(a, 1)
    mod = ew.rem(a, b)
    div = ew.div(ew.sub(a, mod), b)
    fix = ew.bitwise_and(ew.ne(mod, zero), ew.ne(ew.lt(b, zero), ew.lt(mod, zero)))
    div = ew.select(fix, ew.sub(div, one), div)
    # snap to the nearest integer (the quotient of exact operands is within an ulp of one)
    fl = ew.floor(div)
    snapped = ew.select(ew.gt(ew.sub(div, fl), mv.full_like(a, 0.5)), ew.add(fl, one), fl)
    # a zero quotient takes the sign of a / b; division by zero gives a / b (inf or NaN)
    q = ew.select(ew.eq(div, zero), ew.div(ew.mul(a, zero), b), snapped)
    return ew.select(ew.eq(b, zero), ew.div(a, b), q)


def remainder(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Elementwise remainder with the sign of the divisor, as ``numpy.remainder``."""
    a, b = promote_args("remainder", x1, x2)
    d = core.get_aval(a).dtype
    if dt.is_complex(d) or d == dt.bool_:
        raise DTypeError(f"remainder does not support {d}")
    r = ew.rem(a, b)
    zero = mv.full_like(r, 0)
    fix = ew.bitwise_and(ew.ne(r, zero), ew.ne(ew.lt(r, zero), ew.lt(b, zero)))
    out = ew.select(fix, ew.add(r, b), r)
    if dt.is_float(d):  # a zero result takes the sign of the divisor, as NumPy
        out = ew.select(ew.eq(out, zero), ew.select(ew.lt(b, zero), mv.full_like(r, -0.0), zero), out)
    return out


mod = remainder
fmod = _binary("fmod", ew.rem)


def power(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Elementwise ``x1 ** x2``; a static integer exponent uses repeated multiplication."""
    if isinstance(x2, int) and not isinstance(x2, bool):
        (a,) = promote_args("power", x1)
        d = core.get_aval(a).dtype
        if x2 < 0 and not dt.is_inexact(d):
            raise ValueError("integers to negative integer powers are not allowed")
        return ew.integer_pow(a, x2)
    a, b = promote_args("power", x1, x2)
    d = core.get_aval(a).dtype
    if dt.is_inexact(d):
        return ew.pow(a, b)
    if d == dt.bool_:
        raise DTypeError("power does not support bool operands")
    return _int_power(a, b)


def _int_power(a: Any, b: Any) -> Any:
    """Integer power by squaring over the bits of a traced integer exponent (negative -> 0)."""
    d = core.get_aval(a).dtype
    nbits = np.dtype(d).itemsize * 8
    acc = mv.full_like(a, 1)
    base = a
    e = b
    one = mv.full_like(e, 1)
    for _ in range(nbits):
        bit = ew.ne(ew.bitwise_and(e, one), mv.full_like(e, 0))
        acc = ew.select(bit, ew.mul(acc, base), acc)
        base = ew.mul(base, base)
        e = ew.shift_right_logical(e, one)
    if np.dtype(d).kind == "i":
        neg_e = ew.lt(b, mv.full_like(b, 0))
        # a**-k is 0 except for a = 1 (1) and a = -1 (+-1)
        is_one = ew.eq(a, mv.full_like(a, 1))
        is_m1 = ew.eq(a, mv.full_like(a, -1))
        odd = ew.ne(ew.bitwise_and(b, mv.full_like(b, 1)), mv.full_like(b, 0))
        negval = ew.select(is_one, mv.full_like(a, 1),
                           ew.select(is_m1, ew.select(odd, mv.full_like(a, -1), mv.full_like(a, 1)),
                                     mv.full_like(a, 0)))
        acc = ew.select(neg_e, negval, acc)
    return acc


def float_power(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    a, b = promote_args("float_power", x1, x2, to="inexact")
    return ew.pow(a, b)


def absolute(x: ArrayLike, /) -> Any:
    """Elementwise absolute value (complex input gives its magnitude)."""
    (x,) = promote_args("absolute", x)
    if core.get_aval(x).dtype == dt.bool_ or np.dtype(core.get_aval(x).dtype).kind == "u":
        return x
    return ew.abs(x)


abs = absolute  # noqa: A001


def sign(x: ArrayLike, /) -> Any:
    (x,) = promote_args("sign", x)
    if core.get_aval(x).dtype == dt.bool_:
        raise DTypeError("sign does not support bool")
    return ew.sign(x)


def reciprocal(x: ArrayLike, /) -> Any:
    (x,) = promote_args("reciprocal", x, to="inexact")
    return ew.div(mv.full_like(x, 1), x)


def square(x: ArrayLike, /) -> Any:
    (x,) = promote_args("square", x)
    return ew.integer_pow(x, 2)


# -- transcendental ---------------------------------------------------------------------------

exp = _unary("exp", ew.exp, "inexact")
exp2 = _unary("exp2", ew.exp2, "inexact")
log = _unary("log", ew.log, "inexact")
log1p = _unary("log1p", ew.log1p, "inexact")


def _expm1(x: Any) -> Any:
    """``exp(x) - 1``; complex inputs follow the C99/Array API special cases (``expm1(-inf + inf
    j) = -1 + 0j``, ``expm1(+inf + nan j) = inf + nan j``, ``expm1(±0 + 0j) = 0 + 0j``)."""
    d = core.get_aval(x).dtype
    if not dt.is_complex(d):
        return ew.expm1(x)
    re, im = ew.real(x), ew.imag(x)
    c = lambda v: mv.full_like(re, v)  # noqa: E731
    half_sin = ew.sin(ew.mul(im, c(0.5)))
    # exp(a) cos(b) - 1 = expm1(a) cos(b) - 2 sin(b/2)^2, accurate near zero
    out_re = ew.sub(ew.mul(ew.expm1(re), ew.cos(im)), ew.mul(c(2.0), ew.mul(half_sin, half_sin)))
    out_im = ew.mul(ew.exp(re), ew.sin(im))
    im_zero = ew.eq(im, c(0.0))
    out_re = ew.select(im_zero, ew.select(ew.eq(re, c(0.0)), c(0.0), ew.expm1(re)), out_re)
    out_im = ew.select(im_zero, im, out_im)
    neg_inf, pos_inf = ew.eq(re, c(-np.inf)), ew.eq(re, c(np.inf))
    out_re = ew.select(neg_inf, c(-1.0), out_re)
    out_im = ew.select(neg_inf, ew.select(ew.is_finite(im), ew.mul(c(0.0), ew.sin(im)), c(0.0)), out_im)
    bad_im = ew.bitwise_and(pos_inf, ew.bitwise_not(ew.is_finite(im)))
    out_re = ew.select(bad_im, c(np.inf), out_re)
    out_im = ew.select(bad_im, c(np.nan), out_im)
    return ew.complex(out_re, out_im)


expm1 = _unary("expm1", _expm1, "inexact")
log2 = _unary("log2", lambda x: ew.div(ew.log(x), mv.full_like(x, np.log(2.0))), "inexact")
log10 = _unary("log10", lambda x: ew.div(ew.log(x), mv.full_like(x, np.log(10.0))), "inexact")
sqrt = _unary("sqrt", ew.sqrt, "inexact")
cbrt = _unary("cbrt", ew.cbrt, "inexact")
sin = _unary("sin", ew.sin, "inexact")
cos = _unary("cos", ew.cos, "inexact")
tan = _unary("tan", ew.tan, "inexact")
arcsin = _unary("arcsin", ew.asin, "inexact")
arccos = _unary("arccos", ew.acos, "inexact")
arctan = _unary("arctan", ew.atan, "inexact")
sinh = _unary("sinh", ew.sinh, "inexact")
cosh = _unary("cosh", ew.cosh, "inexact")
tanh = _unary("tanh", ew.tanh, "inexact")
arcsinh = _unary("arcsinh", ew.asinh, "inexact")
arccosh = _unary("arccosh", ew.acosh, "inexact")
arctanh = _unary("arctanh", ew.atanh, "inexact")
asin, acos, atan, asinh, acosh, atanh = arcsin, arccos, arctan, arcsinh, arccosh, arctanh
arctan2 = _binary("arctan2", ew.atan2, "inexact")
atan2 = arctan2


def _float_only(name: str, fn: Callable) -> Callable:
    def f(x: ArrayLike, /) -> Any:
        (x,) = promote_args(name, x)
        d = core.get_aval(x).dtype
        if dt.is_complex(d):
            raise DTypeError(f"{name} does not support complex dtypes")
        if not dt.is_inexact(d):
            return x  # rounding an integer is the identity, as in NumPy
        return fn(x)

    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}``, as ``numpy.{name}`` (integers pass through)."
    return f


floor = _float_only("floor", ew.floor)
ceil = _float_only("ceil", ew.ceil)
trunc = _float_only("trunc", lambda x: ew.select(ew.lt(x, mv.full_like(x, 0)), ew.ceil(x), ew.floor(x)))
rint = _float_only("rint", lambda x: ew.round(x, 1))
fix = trunc


def round(a: ArrayLike, decimals: int = 0) -> Any:  # noqa: A001
    """Round half to even to ``decimals`` places, as ``numpy.round``.

    A complex number rounds its real and imaginary parts."""
    (x,) = promote_args("round", a)
    d = core.get_aval(x).dtype
    if dt.is_complex(d):
        return ew.complex(round(ew.real(x), decimals), round(ew.imag(x), decimals))
    if not dt.is_inexact(d):
        if decimals >= 0:
            return x
        f = 10 ** (-decimals)
        return ew.mul(floor_divide(ew.add(x, mv.full_like(x, f // 2)), f), mv.full_like(x, f))
    if decimals == 0:
        return ew.round(x, 1)
    f = mv.full_like(x, 10.0 ** decimals)
    return ew.div(ew.round(ew.mul(x, f), 1), f)


around = round

# -- comparisons and logic --------------------------------------------------------------------

equal = _binary("equal", ew.eq)
not_equal = _binary("not_equal", ew.ne)
less = _binary("less", ew.lt)
less_equal = _binary("less_equal", ew.le)
greater = _binary("greater", ew.gt)
greater_equal = _binary("greater_equal", ew.ge)


def _logical(name: str, fn: Callable) -> Callable:
    def f(x1: ArrayLike, x2: ArrayLike, /) -> Any:
        a, b = promote_args(name, x1, x2)
        return fn(_to_bool(a), _to_bool(b))

    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}`` of truth values, as ``numpy.{name}``."
    return f


def _to_bool(x: Any) -> Any:
    """``x != 0`` (``x`` itself when it is already bool)."""
    if core.get_aval(x).dtype == dt.bool_:
        return x
    return ew.ne(x, mv.full_like(x, 0))


def _convert(x: Any, dtype: np.dtype, weak: bool = False) -> Any:
    """``x`` as ``dtype`` (an ember dtype, used as given) and weak type ``weak``; a no-op when it is."""
    a = core.get_aval(x)
    if a.dtype == dtype and a.weak_type == weak:
        return x
    return ew.convert_element_type(x, dtype, weak_type=weak)


logical_and = _logical("logical_and", ew.bitwise_and)
logical_or = _logical("logical_or", ew.bitwise_or)
logical_xor = _logical("logical_xor", ew.bitwise_xor)


def logical_not(x: ArrayLike, /) -> Any:
    (x,) = promote_args("logical_not", x)
    return ew.bitwise_not(_to_bool(x))


def _bitwise(name: str, fn: Callable) -> Callable:
    def f(x1: ArrayLike, x2: ArrayLike, /) -> Any:
        a, b = promote_args(name, x1, x2)
        _require(name, a, lambda d: dt.is_integer(d) or d == dt.bool_, "integer or bool operands")
        return fn(a, b)

    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}``, as ``numpy.{name}``."
    return f


bitwise_and = _bitwise("bitwise_and", ew.bitwise_and)
bitwise_or = _bitwise("bitwise_or", ew.bitwise_or)
bitwise_xor = _bitwise("bitwise_xor", ew.bitwise_xor)
left_shift = _bitwise("left_shift", ew.shift_left)
right_shift = _bitwise("right_shift", lambda a, b: ew.shift_right_arithmetic(a, b)
                       if np.dtype(core.get_aval(a).dtype).kind == "i" else ew.shift_right_logical(a, b))
bitwise_left_shift, bitwise_right_shift = left_shift, right_shift


def invert(x: ArrayLike, /) -> Any:
    (x,) = promote_args("invert", x)
    _require("invert", x, lambda d: dt.is_integer(d) or d == dt.bool_, "an integer or bool operand")
    return ew.bitwise_not(x)


bitwise_not = bitwise_invert = invert


def maximum(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Elementwise maximum, propagating NaNs, as ``numpy.maximum``."""
    a, b = promote_args("maximum", x1, x2)
    return ew.max(a, b)


def minimum(x1: ArrayLike, x2: ArrayLike, /) -> Any:
    """Elementwise minimum, propagating NaNs, as ``numpy.minimum``."""
    a, b = promote_args("minimum", x1, x2)
    return ew.min(a, b)


def isnan(x: ArrayLike, /) -> Any:
    (x,) = promote_args("isnan", x)
    if not dt.is_inexact(core.get_aval(x).dtype):
        return mv.full_like(x, False, dt.bool_)
    return ew.ne(x, x)


def isinf(x: ArrayLike, /) -> Any:
    (x,) = promote_args("isinf", x)
    d = core.get_aval(x).dtype
    if not dt.is_inexact(d):
        return mv.full_like(x, False, dt.bool_)
    if dt.is_complex(d):
        return logical_or(isinf(ew.real(x)), isinf(ew.imag(x)))
    return ew.eq(ew.abs(x), mv.full_like(x, np.inf))


def isfinite(x: ArrayLike, /) -> Any:
    (x,) = promote_args("isfinite", x)
    d = core.get_aval(x).dtype
    if not dt.is_inexact(d):
        return mv.full_like(x, True, dt.bool_)
    if dt.is_complex(d):
        return logical_and(ew.is_finite(ew.real(x)), ew.is_finite(ew.imag(x)))
    return ew.is_finite(x)


def where(condition: ArrayLike, x: ArrayLike = None, y: ArrayLike = None, /, *, size: int | None = None,
          fill_value: Any = None) -> Any:
    """``x`` where ``condition`` else ``y``, with broadcasting; the one-argument form is nonzero."""
    if x is None and y is None:
        from ember._src.numpy.searching import nonzero
        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise ValueError("where takes either 1 or 3 arguments")
    c = _operand(condition)
    a, b = promote_args("where", x, y)
    shape = sh.broadcast_shapes(core.get_aval(a).shape, core.get_aval(c).shape
                                if not isinstance(c, (bool, int, float)) else (), op="where")
    (c,) = promote_args("where", c)
    c = _to_bool(c)
    c = mv.broadcast_to_rank_shape(c, shape) if core.get_aval(c).shape != shape else c
    a = mv.broadcast_to_rank_shape(a, shape) if core.get_aval(a).shape != shape else a
    b = mv.broadcast_to_rank_shape(b, shape) if core.get_aval(b).shape != shape else b
    return ew.select(c, a, b)


def clip(arr: ArrayLike, /, min: ArrayLike = None, max: ArrayLike = None) -> Any:  # noqa: A002
    """Clamp ``arr`` to ``[min, max]`` (either bound may be ``None``), as ``jax.numpy.clip``."""
    lo, hi = min, max
    x = asarray(arr) if not isinstance(arr, (Array, core.Tracer)) else arr
    if lo is not None:
        x = maximum(x, lo)
    if hi is not None:
        x = minimum(x, hi)
    return x


# -- complex ----------------------------------------------------------------------------------


def real(x: ArrayLike, /) -> Any:
    (x,) = promote_args("real", x)
    return ew.real(x) if dt.is_complex(core.get_aval(x).dtype) else x


def imag(x: ArrayLike, /) -> Any:
    (x,) = promote_args("imag", x)
    return ew.imag(x) if dt.is_complex(core.get_aval(x).dtype) else mv.full_like(x, 0)


def conjugate(x: ArrayLike, /) -> Any:
    (x,) = promote_args("conjugate", x)
    return ew.conj(x) if dt.is_complex(core.get_aval(x).dtype) else x


conj = conjugate


__all__ = [
    "abs", "absolute", "acos", "acosh", "add", "arccos", "arccosh", "arcsin", "arcsinh", "arctan",
    "arctan2", "arctanh", "around", "asarray", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and",
    "bitwise_invert", "bitwise_left_shift", "bitwise_not", "bitwise_or", "bitwise_right_shift",
    "bitwise_xor", "cbrt", "ceil", "clip", "conj", "conjugate", "cos", "cosh", "divide", "equal", "exp",
    "exp2", "expm1", "fix", "float_power", "floor", "floor_divide", "fmod", "greater", "greater_equal",
    "imag", "invert", "isfinite", "isinf", "isnan", "left_shift", "less", "less_equal", "log", "log10",
    "log1p", "log2", "logical_and", "logical_not", "logical_or", "logical_xor", "maximum", "minimum",
    "mod", "multiply", "negative", "not_equal", "positive", "power", "real", "reciprocal", "remainder",
    "right_shift", "rint", "round", "sign", "sin", "sinh", "sqrt", "square", "subtract", "tan", "tanh",
    "true_divide", "trunc", "where",
]
