"""Complex values in the C op table: ``complex64``/``complex128`` as C99 ``float _Complex`` /
``double _Complex`` (typedef'd ``em_c64``/``em_c128`` in the prelude), and the elementwise ops that
have a complex rendering.

Registered into :data:`c_ops.COMPLEX_OPS` (used whenever an operand or the result is complex):
``add sub neg mul div eq ne select_n convert_element_type complex real imag conj abs
integer_pow`` and the transcendental functions glibc's ``<complex.h>`` provides (``exp log sqrt
sin cos tan sinh cosh tanh asin acos atan asinh acosh atanh``), and ``sign expm1 log1p exp2
rsqrt logistic pow max min`` with the formulas of NumPy's complex loops (``csrc/prelude_complex.h``). The
rest (orderings, bit casts) have no rendering: an equation using one on complex values runs as a
fallback step, so results stay those of the NumPy implementation.

Semantics follow NumPy's complex loops, not C's Annex G arithmetic:

* ``mul`` is ``(ar br - ai bi) + (ar bi + ai br) i`` with no infinity/NaN recovery (C's ``*`` calls
  ``__mulsc3``, slower and different on non-finite operands); ember compiles with ``-std=c11``, so
  no multiply-add is contracted and finite results are bit-identical to NumPy's.
* ``div`` is Smith's algorithm with NumPy's branches (scale by the larger of ``|br|``, ``|bi|``;
  a zero divisor divides each part by zero, giving NaN/inf parts as NumPy does).
* ``abs`` is ``hypot(re, im)``; ``convert_element_type`` from complex to a real or integer dtype
  converts the real part (the reference's ``np.real`` then ``astype``).
* reductions: only ``reduce_sum`` lowers (see :func:`c_ops.reduce_kind`).

Complex matrix products are ``native_gemm`` steps on BLAS ``cgemm``/``zgemm`` (``cgemv``/``zgemv``
for a single row or column; codegen.py), the FFT is a call step (:mod:`.fft`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember._src.native import csrc
from ember._src.native.emit import c_ops
from ember._src.native.emit.c_ops import COMPLEX_OPS, PRELUDE_FUNCS, ctype, is_complex, real_ctype

# the complex helpers, per precision: the sections of csrc/prelude_complex.h with the defines that
# instantiate them (CT, RT, S(name)); a helper's name carries the precision's suffix (em_cmulf)
for _sfx, _ct, _rt in (("f", "em_c64", "float"), ("", "em_c128", "double")):
    _head = f"#define CT {_ct}\n#define RT {_rt}\n#define S(name) {'name##' + _sfx if _sfx else 'name'}\n"
    for _name, (_deps, _text) in csrc.sections("prelude_complex.h").items():
        PRELUDE_FUNCS[f"em_{_name}{_sfx}"] = (tuple(f"em_{d}{_sfx}" for d in _deps),
                                              _head + _text + "#undef S\n#undef RT\n#undef CT\n")


def _s(d: np.dtype) -> str:
    """The C name suffix of a complex dtype's functions: ``f`` for complex64."""
    return "f" if d.itemsize == 8 else ""


def _real_of(d: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if d.itemsize == 8 else np.dtype(np.float64)


def _op(*names: str):
    def deco(fn):
        for n in names:
            COMPLEX_OPS[n] = fn
        return fn

    return deco


COMPLEX_OPS["add"] = lambda a, ins, out, p: f"({a[0]} + {a[1]})"
COMPLEX_OPS["sub"] = lambda a, ins, out, p: f"({a[0]} - {a[1]})"
COMPLEX_OPS["neg"] = lambda a, ins, out, p: f"(-{a[0]})"
COMPLEX_OPS["mul"] = lambda a, ins, out, p: f"em_cmul{_s(out)}({a[0]}, {a[1]})"
COMPLEX_OPS["div"] = lambda a, ins, out, p: f"em_cdiv{_s(out)}({a[0]}, {a[1]})"
COMPLEX_OPS["eq"] = lambda a, ins, out, p: f"({a[0]} == {a[1]})"
COMPLEX_OPS["ne"] = lambda a, ins, out, p: f"({a[0]} != {a[1]})"
COMPLEX_OPS["select_n"] = c_ops.OPS["select_n"]
COMPLEX_OPS["copy"] = COMPLEX_OPS["stop_gradient"] = lambda a, ins, out, p: a[0]
COMPLEX_OPS["conj"] = lambda a, ins, out, p: f"em_conj{_s(out)}({a[0]})"
COMPLEX_OPS["real"] = lambda a, ins, out, p: f"(__real__ ({a[0]}))"
COMPLEX_OPS["imag"] = lambda a, ins, out, p: f"(__imag__ ({a[0]}))"
COMPLEX_OPS["abs"] = lambda a, ins, out, p: f"em_cabs{_s(ins[0])}({a[0]})"
COMPLEX_OPS["complex"] = lambda a, ins, out, p: \
    f"__builtin_complex(({real_ctype(out)})({a[0]}), ({real_ctype(out)})({a[1]}))"


@_op("convert_element_type")
def _convert(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    src = np.dtype(ins[0])
    if is_complex(src) and is_complex(out):
        return a[0] if src == out else f"(({ctype(out)})({a[0]}))"
    if is_complex(out):
        r = real_ctype(out)
        return f"__builtin_complex(({r})({a[0]}), ({r})0)"
    # complex -> real/integer/bool: the real part, converted as a real value is
    re = _real_of(src)
    return c_ops.OPS["convert_element_type"]([f"(__real__ ({a[0]}))"], [re], out, p)


def _libm(name: str):
    return lambda a, ins, out, p: f"c{name}{_s(out)}({a[0]})"


for _fn in ("exp", "log", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan",
            "asinh", "acosh", "atanh"):
    COMPLEX_OPS[_fn] = _libm(_fn)


@_op("integer_pow")
def _integer_pow(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    y, s = int(p["y"]), _s(out)
    one = c_ops.literal(1, out)
    if y == 0:
        return one
    if 1 <= y <= 3:
        # NumPy's complex power multiplies x by itself for y = 1, 2, 3 (no product with 1 + 0i, whose
        # zero imaginary part times an infinite part gives NaN: square(inf - 1j) is inf - inf*j)
        x = a[0]
        return {1: x, 2: f"em_cmul{s}({x}, {x})", 3: f"em_cmul{s}({x}, em_cmul{s}({x}, {x}))"}[y]
    return c_ops.power_by_squaring(a[0], y, ctype(out), one, lambda u, v: f"em_cmul{s}({u}, {v})",
                                   lambda r: f"em_cdiv{s}({one}, {r})")


def _helper_call(helper: str):
    """Renderer calling prelude helper ``em_<helper>`` (its ``f`` variant for complex64)."""
    return lambda a, ins, out, p: f"em_{helper}{_s(out)}({', '.join(a)})"


for _prim, _helper in (("sign", "csign"), ("expm1", "cexpm1"), ("log1p", "clog1p"), ("pow", "cpow"),
                       ("max", "cmax"), ("min", "cmin")):
    COMPLEX_OPS[_prim] = _helper_call(_helper)
# exp(z ln 2), as NumPy's exp2; 1 / sqrt(z) and 1 / (1 + exp(-z)) with NumPy's complex division
COMPLEX_OPS["exp2"] = lambda a, ins, out, p: \
    f"cexp{_s(out)}(({a[0]}) * ({real_ctype(out)})0.693147180559945309417232121458176568)"
COMPLEX_OPS["rsqrt"] = lambda a, ins, out, p: \
    f"em_cdiv{_s(out)}({c_ops.literal(1, out)}, csqrt{_s(out)}({a[0]}))"
COMPLEX_OPS["logistic"] = lambda a, ins, out, p: \
    f"em_cdiv{_s(out)}({c_ops.literal(1, out)}, {c_ops.literal(1, out)} + cexp{_s(out)}(-({a[0]})))"
