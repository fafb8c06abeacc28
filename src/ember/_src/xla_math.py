"""Elementary functions computed with the exact algorithms of XLA's CPU backend, over lax-level
operations, so that ``ember.random``'s samplers reproduce JAX's bits.

``log`` and ``log1p`` follow Cephes ``logf`` / ``log1p`` and ``erf_inv`` Giles' polynomial, with the
fused multiply-adds XLA contracts them into (:func:`fma`): for float32 the product is taken in
float64, where it is exact, and rounded once; for float64 an error-free transformation (Dekker's
product, Knuth's sum) stands in. Low-precision inputs are computed in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.prims import random_bits as rb

__all__ = ["erf_inv", "fma", "log", "log1p"]


def _c(x: Any, v: Any) -> Any:
    """A constant shaped and typed like ``x``."""
    return mv.full_like(x, v)


def _fma32(a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` rounded once to float32 (the float32 product is exact in float64)."""
    f64 = dt.float64
    a, b, c = (ew.convert_element_type(v, f64) for v in (a, b, c))
    return ew.convert_element_type(ew.add(ew.mul(a, b), c), dt.float32)


def _fma64(a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` in float64 with error-free transformations (Dekker's product, Knuth's sum).

    ``a*b = p + e`` and ``p + c = s + t`` exactly; ``s + (t + e)`` is the correctly rounded fma
    except in rare double-rounding ties.
    """
    def split(x: Any) -> tuple[Any, Any]:
        t = ew.mul(_c(x, 134217729.0), x)
        hi = ew.sub(t, ew.sub(t, x))
        return hi, ew.sub(x, hi)

    p = ew.mul(a, b)
    ah, al = split(a)
    bh, bl = split(b)
    e = ew.add(ew.add(ew.add(ew.sub(ew.mul(ah, bh), p), ew.mul(ah, bl)), ew.mul(al, bh)), ew.mul(al, bl))
    s = ew.add(p, c)
    bb = ew.sub(s, p)
    t = ew.add(ew.sub(p, ew.sub(s, bb)), ew.sub(c, bb))
    return ew.add(s, ew.add(t, e))


def fma(a: Any, b: Any, c: Any) -> Any:
    """A fused multiply-add, as XLA's CPU backend contracts ``a * b + c``."""
    d = core.get_aval(a).dtype
    if d == dt.float32:
        return _fma32(a, b, c)
    if d == dt.float64:
        return _fma64(a, b, c)
    return ew.add(ew.mul(a, b), c)


_LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
          -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)


def _log_f32(x: Any) -> Any:
    """Natural log as XLA's CPU backend computes it for float32 (Cephes ``logf``)."""
    f32, u32 = dt.float32, dt.uint32
    t = ew.max(x, _c(x, np.float32(np.finfo(np.float32).tiny)))
    xb = rb.bitcast_convert_type(t, u32)
    emm0 = ew.sub(ew.convert_element_type(ew.shift_right_logical(xb, _c(xb, 23)), dt.int32),
                  mv.full_like(xb, 127, dt.int32))
    mant = ew.bitwise_or(ew.bitwise_and(xb, _c(xb, 0x807FFFFF)), _c(xb, 0x3F000000))
    t = rb.bitcast_convert_type(mant, f32)
    one = _c(t, 1.0)
    e = ew.add(one, ew.convert_element_type(emm0, f32))
    mask = ew.lt(t, _c(t, 0.707106781186547524))
    t1 = ew.select(mask, t, _c(t, 0.0))
    t = ew.sub(t, one)
    e = ew.sub(e, ew.select(mask, one, _c(t, 0.0)))
    t = ew.add(t, t1)
    x2 = ew.mul(t, t)
    x3 = ew.mul(x2, t)
    p = [_c(t, v) for v in _LOG_P]
    y = _fma32(t, p[0], p[1])
    y1 = _fma32(t, p[3], p[4])
    y2 = _fma32(t, p[6], p[7])
    y = _fma32(y, t, p[2])
    y1 = _fma32(y1, t, p[5])
    y2 = _fma32(y2, t, p[8])
    y = _fma32(y, x3, y1)
    y = _fma32(y, x3, y2)
    y = _fma32(y, x3, ew.mul(_c(e, -2.12194440e-4), e))
    t = _fma32(_c(t, -0.5), x2, t)
    t = ew.add(t, y)
    t = _fma32(_c(e, 0.693359375), e, t)
    zero = _c(x, 0.0)
    t = ew.select(ew.eq(x, zero), _c(x, -np.inf), t)
    t = ew.select(ew.eq(x, _c(x, np.inf)), x, t)
    return ew.select(ew.bitwise_or(ew.lt(x, zero), ew.ne(x, x)), _c(x, np.nan), t)


_LOG1P_DEN = (1.0, 1.5062909083469192043167e1, 8.3047565967967209469434e1, 2.2176239823732856465394e2,
              3.0909872225312059774938e2, 2.1642788614495947685003e2, 6.0118660497603843919306e1)
_LOG1P_NUM = (4.5270000862445199635215e-5, 4.9854102823193375972212e-1, 6.5787325942061044846969e0,
              2.9911919328553073277375e1, 6.0949667980987787057556e1, 5.7112963590585538103336e1,
              2.0039553499201281259648e1)


def _horner(x: Any, coeffs: Sequence[float]) -> Any:
    p = _c(x, coeffs[0])
    for c in coeffs[1:]:
        p = fma(p, x, _c(x, c))
    return p


def _log1p_xla(x: Any) -> Any:
    """``log1p`` as XLA's CPU backend computes it (Cephes rational near 0, ``log(1 + x)`` beyond)."""
    one = ew.add(x, _c(x, 1.0))
    large = _log_f32(one) if core.get_aval(x).dtype == dt.float32 else ew.log(one)
    x2 = ew.mul(x, x)
    small = ew.div(_horner(x, _LOG1P_NUM), _horner(x, _LOG1P_DEN))
    small = ew.mul(ew.mul(x, x2), small)
    small = fma(_c(x, -0.5), x2, small)
    small = ew.add(x, small)
    return ew.select(ew.lt(ew.abs(x), _c(x, 0.41421356237309504880)), small, large)


def _upcast(fn: Any) -> Any:
    def wrapped(x: Any) -> Any:
        d = core.get_aval(x).dtype
        if d == dt.float32:
            return fn(x)
        if dt.is_low_precision(d):
            return ew.convert_element_type(fn(ew.convert_element_type(x, dt.float32)), d)
        return None
    return wrapped


def log(x: Any) -> Any:
    """``log`` (XLA's float32 algorithm for float32 and low precision, else the primitive)."""
    r = _upcast(_log_f32)(x)
    return ew.log(x) if r is None else r


def log1p(x: Any) -> Any:
    """``log1p`` with XLA's algorithm (float32 math for low precision)."""
    if core.get_aval(x).dtype == dt.float64:
        return _log1p_xla(x)
    r = _upcast(_log1p_xla)(x)
    return ew.log1p(x) if r is None else r


_ERFINV_LT5 = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
               -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_GE5 = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
               -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _erf_inv_f32(x: Any) -> Any:
    w = ew.neg(_log1p_xla(ew.mul(x, ew.neg(x))))
    lt = ew.lt(w, _c(w, 5.0))
    w = ew.select(lt, ew.sub(w, _c(w, 2.5)), ew.sub(ew.sqrt(w), _c(w, 3.0)))
    p = ew.select(lt, _c(w, _ERFINV_LT5[0]), _c(w, _ERFINV_GE5[0]))
    for a, b in zip(_ERFINV_LT5[1:], _ERFINV_GE5[1:]):
        p = _fma32(p, w, ew.select(lt, _c(w, a), _c(w, b)))
    return ew.select(ew.eq(ew.abs(x), _c(x, 1.0)), ew.mul(x, _c(x, np.inf)), ew.mul(p, x))


_ERFINV64_A = (-3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18,
               1.115787767802518096e-17, -1.333171662854620906e-16, 2.0972767875968561637e-17,
               6.6376381343583238325e-15, -4.0545662729752068639e-14, -8.1519341976054721522e-14,
               2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
               1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08,
               4.2347877827932403518e-07, -1.3654692000834678645e-06, -1.3882523362786468719e-05,
               0.0001867342080340571352, -0.00074070253416626697512, -0.0060336708714301490533,
               0.24015818242558961693, 1.6536545626831027356)
_ERFINV64_B = (2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07,
               1.8239629214389227755e-08, 1.5027403968909827627e-06, -4.013867526981545969e-06,
               2.9234449089955446044e-06, 1.2475304481671778723e-05, -4.7318229009055733981e-05,
               6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
               0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066,
               -0.0037512085075692412107, 0.005370914553590063617, 1.0052589676941592334,
               3.0838856104922207635)
_ERFINV64_C = (-2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
               -3.7894654401267369937e-09, 7.6157012080783393804e-09, -1.4960026627149240478e-08,
               2.9147953450901080826e-08, -6.7711997758452339498e-08, 2.2900482228026654717e-07,
               -9.9298272942317002539e-07, 4.5260625972231537039e-06, -1.9681778105531670567e-05,
               7.5995277030017761139e-05, -0.00021503011930044477347, -0.00013871931833623122026,
               1.0103004648645343977, 4.8499064014085844221)


def _erf_inv_f64(x: Any) -> Any:
    """XLA's float64 ``erf_inv`` (Giles' polynomial, fused multiply-adds)."""
    w = ew.neg(_log1p_xla(ew.mul(x, ew.neg(x))))
    lt6, lt16 = ew.lt(w, _c(w, 6.25)), ew.lt(w, _c(w, 16.0))

    def coef(i: int) -> Any:
        c = _c(w, _ERFINV64_A[i])
        if i < 19:
            c = ew.select(lt6, c, _c(w, _ERFINV64_B[i]))
        if i < 17:
            c = ew.select(lt16, c, _c(w, _ERFINV64_C[i]))
        return c

    shift = ew.select(lt16, _c(w, 3.25), _c(w, 5.0))
    w = ew.select(lt6, ew.sub(w, _c(w, 3.125)), ew.sub(ew.sqrt(w), shift))
    p = coef(0)
    for i in range(1, 17):
        p = _fma64(p, w, coef(i))
    for i in range(17, 19):
        p = ew.select(lt16, _fma64(p, w, coef(i)), p)
    for i in range(19, 23):
        p = ew.select(lt6, _fma64(p, w, coef(i)), p)
    return ew.select(ew.eq(ew.abs(x), _c(x, 1.0)), ew.mul(x, _c(x, np.inf)), ew.mul(p, x))


def erf_inv(x: Any) -> Any:
    """Inverse error function with XLA's algorithms (float32 exact, float64 to a few ulps)."""
    d = core.get_aval(x).dtype
    if d == dt.float64:
        return _erf_inv_f64(x)
    r = _upcast(_erf_inv_f32)(x)
    return ew.erf_inv(x) if r is None else r
