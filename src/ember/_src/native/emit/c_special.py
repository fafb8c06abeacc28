"""Special functions for the C op table: ``digamma``, ``erf_inv``, ``polygamma`` (and the bit
reinterpretation ``bitcast_convert_type``), registered into :data:`c_ops.OPS` so they fuse.

All three are evaluated in double precision (float32 inputs are widened, the result rounded once),
matching SciPy's ``psi``, ``erfinv`` and ``polygamma`` including their special values:

* ``digamma``: recurrence up to ``x >= 10``, then the asymptotic series (terms to ``x**-14``);
  reflection ``psi(1 - x) - pi / tan(pi x)`` for ``x < 0`` with ``x`` reduced to the nearest
  integer first. Poles: ``psi(+-0) = -+inf``, NaN at negative integers and ``-inf``. Error
  (float64, tested against SciPy in ``tests/native/emit/test_c_special.py``): for ``x > 0`` <= 1e-13
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

from ember._src.native import opinfo
from ember._src.native.emit import c_ops
from ember._src.native.emit.c_ops import ctype

# the C of em_digamma, em_erfinv, em_hzeta and em_polygamma: sections of csrc/prelude_math.h



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
    """Register the renderers and costs (idempotent; the functions are in csrc/prelude_math.h)."""
    c_ops.OPS.setdefault("digamma", _special("em_digamma"))
    c_ops.OPS.setdefault("erf_inv", _special("em_erfinv"))
    c_ops.OPS.setdefault("polygamma", _polygamma)
    c_ops.OPS.setdefault("bitcast_convert_type", _bitcast)
    for name in ("digamma", "erf_inv", "polygamma"):
        opinfo.COSTS.setdefault(opinfo.primitive(name), 2 * opinfo.EXPENSIVE)


install()
