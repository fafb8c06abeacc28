"""Special functions for the C op table: ``digamma``, ``erf_inv``, ``polygamma`` (and the bit
reinterpretation ``bitcast_convert_type``), registered into :data:`c_ops.OPS` so they fuse.

All three are evaluated in double precision (float32 inputs are widened, the result rounded once),
matching SciPy's ``psi``, ``erfinv`` and ``polygamma`` including their special values:

* ``digamma``: recurrence up to ``x >= 10``, then the asymptotic series (terms to ``x**-14``);
  reflection ``psi(1 - x) - pi / tan(pi x)`` for ``x < 0`` with ``x`` reduced to the nearest
  integer first. Poles: ``psi(+-0) = -+inf``, NaN at negative integers and ``-inf``. Error
  (float64, tested against SciPy in ``tests/native/test_c_special.py``): for ``x > 0`` <= 1e-13
  relative away from the root ``x0 = 1.4616...``, <= 2e-15 absolute near it; for ``x < 0`` (where
  the reflection cancels near the roots between the poles) <= 1e-12 * max(1, |psi(x)|).
* ``erf_inv``: Giles' single-precision approximation as the start, then Newton steps on
  ``erf(y) - |x|`` (two), or for ``|x| > 0.5`` on ``log(erfc(y)) - log(1 - |x|)`` until converged
  (exact tails: ``1 - |x|`` is exact there). ``+-1 -> +-inf``, NaN
  outside ``[-1, 1]``. Error <= 4e-15 relative.
* ``polygamma(n, x)``, ``n >= 1``: ``(-1)**(n+1) n! zeta(n + 1, x)`` with the Hurwitz zeta by
  Euler-Maclaurin (direct sum to ``q + N >= 10 + n``, 8 Bernoulli correction terms); ``+inf`` zeta
  at the non-positive integers, as SciPy. Error <= 1e-12 relative for ``n <= 6``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember._src.native import c_ops
from ember._src.native.c_ops import ctype

_DIGAMMA = """\
static double em_digamma(double x) {
    if (x != x || x == -INFINITY) return (double)NAN;
    if (x == INFINITY) return x;
    if (x == 0.0) return signbit(x) ? (double)INFINITY : -(double)INFINITY;
    double refl = 0.0;
    if (x < 0.0) {
        double fl = floor(x);
        if (x == fl) return (double)NAN;
        double r = x - floor(x + 0.5);          /* in [-0.5, 0.5]: tan(pi x) = tan(pi r) */
        refl = -3.14159265358979323846 / tan(3.14159265358979323846 * r);
        x = 1.0 - x;
    }
    double acc = 0.0;
    while (x < 10.0) { acc -= 1.0 / x; x += 1.0; }
    double z = 1.0 / (x * x);
    double s = z * (-1.0 / 12 + z * (1.0 / 120 + z * (-1.0 / 252 + z * (1.0 / 240 + z * (-1.0 / 132
               + z * (691.0 / 32760 + z * (-1.0 / 12)))))));
    return refl + acc + log(x) - 0.5 / x + s;
}
"""

_ERF_INV = """\
static double em_erfinv(double x) {
    if (x != x || x < -1.0 || x > 1.0) return (double)NAN;
    if (x == 1.0) return (double)INFINITY;
    if (x == -1.0) return -(double)INFINITY;
    if (x == 0.0) return x;
    double ax = fabs(x), w = -log((1.0 - ax) * (1.0 + ax)), p;
    if (w < 5.0) {
        w -= 2.5;
        p = 2.81022636e-08; p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w; p = 0.00021858087 + p * w; p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w; p = 0.246640727 + p * w; p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257; p = 0.000100950558 + p * w; p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w; p = 0.00573950773 + p * w; p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w; p = 1.00167406 + p * w; p = 2.83297682 + p * w;
    }
    double y = p * ax;
    if (ax <= 0.5) {
        for (int it = 0; it < 2; ++it) y -= (erf(y) - ax) / (1.12837916709551257390 * exp(-y * y));
    } else {  /* Newton on log(erfc(y)) = log(1 - |x|): well conditioned deep in the tail */
        const double lc = log(1.0 - ax);
        for (int it = 0; it < 8; ++it) {
            double e = erfc(y);
            double step = (log(e) - lc) * e / (-1.12837916709551257390 * exp(-y * y));
            y -= step;
            if (fabs(step) <= 1e-16 * y) break;
        }
    }
    return x < 0.0 ? -y : y;
}
"""

_ZETA = """\
/* Hurwitz zeta(s, q) for integer s >= 2 (Euler-Maclaurin); +inf at the non-positive integers. */
static double em_hzeta(double s, double q) {
    if (q != q) return q;
    if (q <= 0.0 && q == floor(q)) return (double)INFINITY;
    if (q == INFINITY) return 0.0;
    static const double b2k[8] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730,
                                  7.0 / 6, -3617.0 / 510};
    double sum = 0.0, a = q;
    while (a < 10.0 + s) { sum += pow(a, -s); a += 1.0; }
    sum += pow(a, 1.0 - s) / (s - 1.0) + 0.5 * pow(a, -s);
    double fact = 1.0, rise = s, t = pow(a, -s - 1.0);  /* rise = s (s+1) ... (s+2j-2) */
    for (int j = 1; j <= 8; ++j) {
        fact *= (2.0 * j - 1.0) * (2.0 * j);
        double term = b2k[j - 1] / fact * rise * t;
        sum += term;
        if (fabs(term) <= 1e-17 * fabs(sum)) break;
        rise *= (s + 2.0 * j - 1.0) * (s + 2.0 * j);
        t /= a * a;
    }
    return sum;
}
"""

_POLYGAMMA = """\
static double em_polygamma(int n, double x) {
    if (n == 0) return em_digamma(x);
    double f = 1.0;
    for (int k = 2; k <= n; ++k) f *= k;
    return ((n + 1) % 2 ? -f : f) * em_hzeta(n + 1.0, x);
}
"""


def _special(fname: str) -> c_ops.Renderer:
    def render(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
        t = ctype(out)
        return f"(({t}){fname}((double){a[0]}))"

    return render


def _polygamma(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    return f"(({ctype(out)})em_polygamma({int(p['n'])}, (double){a[0]}))"


def _bitcast(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    ti, to = ctype(ins[0]), ctype(out)
    if ti == to:
        return f"(({to}){a[0]})"
    return f"(((union {{ {ti} i_; {to} o_; }}){{ .i_ = ({ti})({a[0]}) }}).o_)"


def install() -> None:
    """Register the renderers, prelude functions and costs (idempotent)."""
    c_ops.PRELUDE_FUNCS.setdefault("em_digamma", ((), _DIGAMMA))
    c_ops.PRELUDE_FUNCS.setdefault("em_erfinv", ((), _ERF_INV))
    c_ops.PRELUDE_FUNCS.setdefault("em_hzeta", ((), _ZETA))
    c_ops.PRELUDE_FUNCS.setdefault("em_polygamma", (("em_digamma", "em_hzeta"), _POLYGAMMA))
    c_ops.OPS.setdefault("digamma", _special("em_digamma"))
    c_ops.OPS.setdefault("erf_inv", _special("em_erfinv"))
    c_ops.OPS.setdefault("polygamma", _polygamma)
    c_ops.OPS.setdefault("bitcast_convert_type", _bitcast)
    for name in ("digamma", "erf_inv", "polygamma"):
        c_ops.OP_COST.setdefault(name, 2 * c_ops.EXPENSIVE)


install()
