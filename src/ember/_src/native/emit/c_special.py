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
* ``erf_inv``: ``ndtri((1 + x) / 2) / sqrt(2)`` with Wichura's AS241 normal-quantile rational
  approximations, given the exact ``q = x / 2`` and tail mass ``(1 - |x|) / 2`` (no cancellation).
  No transcendental calls for ``|x| <= 0.85`` (log and sqrt beyond). ``+-1 -> +-inf``, NaN
  outside ``[-1, 1]``. Error <= 4e-15 relative.
* ``polygamma(n, x)``, ``n >= 1``: ``(-1)**(n+1) n! zeta(n + 1, x)`` with the Hurwitz zeta by
  Euler-Maclaurin (direct sum to ``q + N >= 10 + n``, 8 Bernoulli correction terms); ``+inf`` zeta
  at the non-positive integers, as SciPy. Error <= 1e-12 relative for ``n <= 6``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember._src.native.emit import c_ops
from ember._src.native.emit.c_ops import ctype

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
/* erf_inv(x) = ndtri((1 + x) / 2) / sqrt(2) with Wichura's AS241 rational approximations of the
   normal quantile (Appl. Statist. 37, 1988), fed the exact q = x / 2 and tail mass (1 - |x|) / 2. */
static double em_erfinv(double x) {
    if (x != x || x < -1.0 || x > 1.0) return (double)NAN;
    if (x == 1.0) return (double)INFINITY;
    if (x == -1.0) return -(double)INFINITY;
    double q = 0.5 * x, z;
    if (fabs(q) <= 0.425) {
        double r = 0.180625 - q * q;
        double a = ((((((2509.0809287301226727 * r + 33430.575583588128105) * r + 67265.770927008700853) * r
                   + 45921.953931549871457) * r + 13731.693765509461125) * r + 1971.5909503065514427) * r
                   + 133.14166789178437745) * r + 3.3871328727963666080;
        double b = ((((((5226.4952788528545610 * r + 28729.085735721942674) * r + 39307.895800092710610) * r
                   + 21213.794301586595867) * r + 5394.1960214247511077) * r + 687.18700749205790830) * r
                   + 42.313330701600911252) * r + 1.0;
        return 0.70710678118654752440 * q * a / b;
    }
    double r = sqrt(-log(0.5 * (1.0 - fabs(x))));
    if (r <= 5.0) {
        r -= 1.6;
        z = ((((((7.74545014278341407640e-4 * r + 2.27238449892691845833e-2) * r + 2.41780725177450611770e-1)
             * r + 1.27045825245236838258) * r + 3.64784832476320460504) * r + 5.76949722146069140550) * r
             + 4.63033784615654529590) * r + 1.42343711074968357734;
        z /= ((((((1.05075007164441684324e-9 * r + 5.47593808499534494600e-4) * r + 1.51986665636164571966e-2)
              * r + 1.48103976427480074590e-1) * r + 6.89767334985100004550e-1) * r + 1.67638483018380384940)
              * r + 2.05319162663775882187) * r + 1.0;
    } else {
        r -= 5.0;
        z = ((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r + 1.24266094738807843860e-3)
             * r + 2.65321895265761230930e-2) * r + 2.96560571828504891230e-1) * r + 1.78482653991729133580)
             * r + 5.46378491116411436990) * r + 6.65790464350110377720;
        z /= ((((((2.04426310338993978564e-15 * r + 1.42151175831644588870e-7) * r
              + 1.84631831751005468180e-5) * r + 7.86869131145613259100e-4) * r + 1.48753612908506148525e-2)
              * r + 1.36929880922735805310e-1) * r + 5.99832206555887937690e-1) * r + 1.0;
    }
    z *= 0.70710678118654752440;
    return x < 0.0 ? -z : z;
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
