"""The C op table: dtypes to C types, each elementwise primitive to C text, reductions, costs.

A renderer is a function ``(args, in_dtypes, out_dtype, params) -> str`` returning a C
expression. Inline math helpers (``em_expf`` ...) live in :data:`PRELUDE_FUNCS`; the code generator
includes only those a program uses (see :func:`prelude_for`).

Math accuracy (float32, measured against float64 NumPy over 2**19 random and special values and
a sweep of every 509th float32 bit pattern plus dense runs at each threshold, in
``tests/native/emit/test_c_math.py``; measured maxima in brackets): ``em_expf`` <= 2 ulp [0.98],
``em_logf`` <= 2 ulp [0.82], ``em_tanhf`` <= 7 ulp and 4e-7 absolute [4.6, 2.7e-7],
``em_logisticf`` <= 4 ulp [2.5], ``em_erff`` <= 8 ulp and <= 5e-7 absolute [5.5 ulp near
|x| = 3.9 where erf is ~1, 3.3e-7]. Results below 1e-37 (near or in the subnormal range) are within
1.2e-44 absolute. All are branch-free (selects only, and few of them: clamps are written so gcc
does not chain them into compare/and/blend ladders) and evaluate their polynomials with ``EM_FMA``
(one rounding per step; ``fmaf`` where the target has FMA, since ``-std=c11`` turns off gcc's
own contraction) so loops that use them vectorize; NaN, +-inf and signed zeros follow IEEE (no
finite-math assumptions). float64 math calls libm (correctly rounded to <= 1 ulp, not vectorized).
Row kernels evaluate float32 ``exp`` a row at a time with ``em_exp_row_f32`` (``csrc/vexp.h``:
AVX-512F or AVX2+FMA intrinsics, a shorter polynomial than ``em_expf``, also <= 2 ulp [1.06]; the
two differ by at most 1 ulp, ``tests/native/emit/test_row_kernels.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ember._src.native import csrc, opinfo
from ember._src.native.base.c_types import (  # noqa: F401  (the op table's users read them here too)
    C_TYPES,
    SUPPORTED_DTYPES,
    ctype,
    is_bool,
    is_complex,
    is_float,
    is_unsigned,
    real_ctype,
)
from ember._src.native.emit import support
from ember._src.native.emit.c_headers import headers_in, include_lines
from ember._src.native.opinfo import OpCategory, Renderer
from ember._src.native.rewrite import threefry


def literal(value: Any, dtype: Any) -> str:
    """A C literal of ``value`` in ``dtype`` (NaN and infinities included)."""
    d = np.dtype(dtype)
    if is_bool(d):
        return "1" if bool(value) else "0"
    if d.kind in "iu":
        v = int(value)
        if d.itemsize == 8:
            if d.kind == "i" and v == -(2**63):
                return "INT64_MIN"
            return f"{v}LL" if d.kind == "i" else f"{v}ULL"
        if d.kind == "i" and d.itemsize == 4 and v == -(2**31):
            return "INT32_MIN"
        return f"{v}" if d.kind == "i" else f"{v}u"
    if is_complex(d):
        part = np.dtype(np.float32) if d.itemsize == 8 else np.dtype(np.float64)
        z = complex(value)
        return f"__builtin_complex(({real_ctype(d)}){literal(z.real, part)}, " \
               f"({real_ctype(d)}){literal(z.imag, part)})"
    v = float(value)
    suffix = "f" if d.itemsize == 4 else ""
    if np.isnan(v):
        support.need("math.h")  # NAN, INFINITY
        return "NAN" if d.itemsize == 4 else "(double)NAN"
    if np.isinf(v):
        support.need("math.h")
        return ("" if v > 0 else "-") + ("INFINITY" if d.itemsize == 4 else "(double)INFINITY")
    if d.itemsize == 4:
        v = float(np.float32(v))
    return f"{v!r}{suffix}" if "e" in repr(v) or "." in repr(v) else f"{v!r}.0{suffix}"


def min_value(d: np.dtype) -> str:
    if is_float(d):
        return literal(-np.inf, d)
    if is_bool(d):
        return "0"
    return literal(np.iinfo(d).min, d)


def max_value(d: np.dtype) -> str:
    if is_float(d):
        return literal(np.inf, d)
    if is_bool(d):
        return "1"
    return literal(np.iinfo(d).max, d)


# ---------------------------------------------------------------------------------------------
# Costs (rough cycles per element) -- used to decide what fusion may recompute
# ---------------------------------------------------------------------------------------------

# The costs live in the op-info registry (:func:`.opinfo.op_cost`); this is a name-keyed reading.
EXPENSIVE = opinfo.EXPENSIVE
op_cost = opinfo.op_cost


# ---------------------------------------------------------------------------------------------
# Renderers
# ---------------------------------------------------------------------------------------------

# The renderers live in the op-info registry (:mod:`.opinfo`); these are its name-keyed views.
OPS = opinfo.RendererTable("render", "elementwise C expression (c_ops.py)")
# Renderers for an op any of whose operands or result is complex (filled by :mod:`.c_complex`);
# an op missing here has no lowering on complex values and stays out of kernels.
COMPLEX_OPS = opinfo.RendererTable("complex_render",
                                   "elementwise C expression on complex values (c_complex.py)")


def _op(*names: str) -> Callable[[Renderer], Renderer]:
    def deco(fn: Renderer) -> Renderer:
        for n in names:
            OPS[n] = fn
        return fn

    return deco


def _fsuffix(d: np.dtype) -> str:
    return "f" if d.itemsize == 4 else ""


def _binop(sym: str) -> Renderer:
    return lambda a, ins, out, p: f"({a[0]} {sym} {a[1]})"


OPS["add"] = lambda a, ins, out, p: f"({a[0]} | {a[1]})" if is_bool(out) else f"({a[0]} + {a[1]})"
OPS["sub"] = _binop("-")
OPS["mul"] = lambda a, ins, out, p: f"({a[0]} & {a[1]})" if is_bool(out) else f"({a[0]} * {a[1]})"
for _name, _sym in (("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")):
    OPS[_name] = _binop(_sym)
OPS["and"] = _binop("&")
OPS["or"] = _binop("|")
OPS["xor"] = _binop("^")


@_op("div")
def _div(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    if is_float(out):
        return f"({a[0]} / {a[1]})"
    t = ctype(out)
    if is_unsigned(out):
        return f"({a[1]} == 0 ? ({t})0 : ({t})({a[0]} / {a[1]}))"
    # C truncating division; x / 0 -> 0 and MIN / -1 -> MIN (wraps) as the reference does
    return f"({a[1]} == 0 ? ({t})0 : {a[1]} == -1 ? ({t})(0 - ({a[0]})) : ({t})({a[0]} / {a[1]}))"


@_op("rem")
def _rem(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    if is_float(out):
        return f"fmod{_fsuffix(out)}({a[0]}, {a[1]})"
    t = ctype(out)
    if is_unsigned(out):
        return f"({a[1]} == 0 ? ({t})0 : ({t})({a[0]} % {a[1]}))"
    return f"(({a[1]} == 0 || {a[1]} == -1) ? ({t})0 : ({t})({a[0]} % {a[1]}))"


def _minmax_r(sym: str) -> Renderer:
    def r(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
        x, y = a
        if out in (np.dtype(np.float32), np.dtype(np.float64)):
            # NaN propagates, as numpy.maximum/minimum: x when x wins or is NaN, else y (NaN when
            # y is). As a bit blend: GCC left a chain of nested conditionals over strided reads
            # (an NCHW max pool's taps) unvectorized
            blend = "em_blendf" if out == np.dtype(np.float32) else "em_blendd"
            return f"{blend}(({x} {sym} {y}) | ({x} != {x}), {x}, {y})"
        if is_float(out):
            return f"({x} != {x} ? {x} : ({y} != {y} ? {y} : ({x} {sym} {y} ? {x} : {y})))"
        return f"({x} {sym} {y} ? {x} : {y})"

    return r


OPS["max"] = _minmax_r(">")
OPS["min"] = _minmax_r("<")


@_op("neg")
def _neg(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    return f"(-{a[0]})" if is_float(out) else f"(({ctype(out)})(0 - {a[0]}))"


@_op("sign")
def _sign(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    x, t = a[0], ctype(out)
    if is_float(out):
        return f"({x} != {x} ? {x} : ({x} > 0 ? ({t})1 : ({x} < 0 ? ({t})-1 : ({t})0)))"
    if is_unsigned(out):
        return f"(({t})({x} > 0))"
    return f"(({t})(({x} > 0) - ({x} < 0)))"


@_op("abs")
def _abs(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    if is_float(out):
        return f"fabs{_fsuffix(out)}({a[0]})"
    if is_unsigned(out):
        return a[0]
    return f"(({ctype(out)})({a[0]} < 0 ? 0 - {a[0]} : {a[0]}))"


@_op("not")
def _not(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    return f"({a[0]} ^ 1)" if is_bool(out) else f"(({ctype(out)})~{a[0]})"


@_op("select_n")
def _select_n(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    which, cases = a[0], list(a[1:])
    if len(cases) == 1:
        return cases[0]
    if p.get("blend") and is_bool(ins[0]) and out in (np.dtype(np.float32), np.dtype(np.float64)):
        return f"em_blend{'f' if out == np.dtype(np.float32) else 'd'}({which}, {cases[1]}, {cases[0]})"
    if is_bool(ins[0]):
        return f"({which} ? {cases[1]} : {cases[0]})"
    expr = cases[-1]
    for i in range(len(cases) - 2, -1, -1):
        expr = f"({which} <= {i} ? {cases[i]} : {expr})"
    return expr


@_op("convert_element_type")
def _convert(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    src, x, t = ins[0], a[0], ctype(out)
    if src == out:
        return x
    if is_bool(out):
        return f"(({t})({x} != 0))"
    if is_float(src) and not is_float(out):
        info = np.iinfo(out)
        lo, hi = literal(info.min, out), literal(info.max, out)
        # NaN -> 0, saturate at the integer range, truncate toward zero (the reference semantics)
        flo = f"{float(info.min)!r}" if src.itemsize == 8 else f"{float(np.float32(info.min))!r}f"
        fhi = f"{float(info.max)!r}" if src.itemsize == 8 else f"{float(np.float32(info.max))!r}f"
        return f"({x} != {x} ? ({t})0 : ({x} <= {flo} ? {lo} : ({x} >= {fhi} ? {hi} : ({t}){x})))"
    return f"(({t}){x})"


def _libm(name: str) -> Renderer:
    return lambda a, ins, out, p: f"{name}{_fsuffix(out)}({', '.join(a)})"


for _name, _c in (("floor", "floor"), ("ceil", "ceil"), ("sqrt", "sqrt"), ("exp2", "exp2"),
                  ("log1p", "log1p"), ("expm1", "expm1"), ("sin", "sin"), ("cos", "cos"), ("tan", "tan"),
                  ("asin", "asin"), ("acos", "acos"), ("atan", "atan"), ("sinh", "sinh"),
                  ("cosh", "cosh"), ("asinh", "asinh"), ("acosh", "acosh"), ("atanh", "atanh"),
                  ("cbrt", "cbrt"), ("lgamma", "lgamma"), ("atan2", "atan2"),
                  ("nextafter", "nextafter"), ("pow", "pow")):
    OPS[_name] = _libm(_c)


def _inline_or_libm(fname32: str, libm: str) -> Renderer:
    return lambda a, ins, out, p: f"{fname32}({a[0]})" if out.itemsize == 4 else f"{libm}({a[0]})"


OPS["exp"] = _inline_or_libm("em_expf", "exp")
OPS["log"] = _inline_or_libm("em_logf", "log")
OPS["tanh"] = _inline_or_libm("em_tanhf", "tanh")
OPS["logistic"] = _inline_or_libm("em_logisticf", "em_logistic")
OPS["erf"] = _inline_or_libm("em_erff", "erf")
OPS["erfc"] = _inline_or_libm("em_erfcf", "erfc")
OPS["rsqrt"] = lambda a, ins, out, p: f"(1.0{_fsuffix(out)} / sqrt{_fsuffix(out)}({a[0]}))"
OPS["is_finite"] = lambda a, ins, out, p: f"(fabs{_fsuffix(ins[0])}({a[0]}) <= " \
                                          f"{'FLT_MAX' if ins[0].itemsize == 4 else 'DBL_MAX'})"
OPS["round"] = lambda a, ins, out, p: (f"round{_fsuffix(out)}({a[0]})" if p.get("rounding_method", 0) == 0
                                       else f"rint{_fsuffix(out)}({a[0]})")
def _identity(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    return a[0]


for _name in ("copy", "stop_gradient"):
    opinfo.register(_name, OpCategory.IDENTITY, "removed by passes.simplify; in a kernel, the operand")
    OPS[_name] = _identity


def power_by_squaring(x: str, y: int, t: str, one: str, mul: Callable[[str, str], str],
                      recip: Callable[[str], str]) -> str:
    """``x ** y`` (integer ``y != 0``) by square-and-multiply, as a GCC statement expression over
    C type ``t``; ``mul(a, b)`` renders a product, ``recip(r)`` the reciprocal for ``y < 0``."""
    n = abs(y)
    body = [f"{t} b_ = {x}, r_ = {one};"]
    while n:
        if n & 1:
            body.append(f"r_ = {mul('r_', 'b_')};")
        n >>= 1
        if n:
            body.append(f"b_ = {mul('b_', 'b_')};")
    body.append(f"{recip('r_')};" if y < 0 else "r_;")
    return "({ " + " ".join(body) + " })"


@_op("integer_pow")
def _integer_pow(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    y, t = int(p["y"]), ctype(out)
    if y == 0:
        return f"(({t})1)"
    return power_by_squaring(a[0], y, t, f"({t})1", lambda u, v: f"({t})({u} * {v})",
                             lambda r: f"({t})1 / {r}")


@_op("population_count")
def _popcount(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    bits = out.itemsize * 8
    mask = "" if bits == 64 else f" & {(1 << bits) - 1}ULL"
    return f"(({ctype(out)})__builtin_popcountll((uint64_t)({a[0]}){mask}))"


@_op("shift_left")
def _shl(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    bits, t = out.itemsize * 8, ctype(out)
    u = f"uint{bits}_t"
    return f"(({a[1]} >= 0 && {a[1]} < {bits}) ? ({t})(({u}){a[0]} << {a[1]}) : ({t})0)"


@_op("shift_right_logical")
def _shrl(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    bits, t = out.itemsize * 8, ctype(out)
    u = f"uint{bits}_t"
    return f"(({a[1]} >= 0 && {a[1]} < {bits}) ? ({t})(({u}){a[0]} >> {a[1]}) : ({t})0)"


@_op("shift_right_arithmetic")
def _shra(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
    bits, t = out.itemsize * 8, ctype(out)
    s = f"int{bits}_t"
    return f"(({t})(({s}){a[0]} >> ({a[1]} < 0 ? 0 : {a[1]} > {bits - 1} ? {bits - 1} : {a[1]})))"


has_lowering = opinfo.has_lowering


def _table(in_dtypes: Sequence[np.dtype], out_dtype: np.dtype) -> opinfo.RendererTable:
    return COMPLEX_OPS if any(is_complex(np.dtype(d)) for d in (*in_dtypes, out_dtype)) else OPS


def render_op(name: str, args: Sequence[str], in_dtypes: Sequence[np.dtype], out_dtype: np.dtype,
              params: dict) -> str:
    """The C expression of elementwise op ``name`` on the C expressions ``args``, recording the
    headers and prelude functions the op itself uses (``emit/support.py``: resolved from the op
    rendered on placeholder operands, so nested operands are not resolved again)."""
    render = _table(in_dtypes, out_dtype)[name]
    ins, out = list(in_dtypes), np.dtype(out_dtype)
    support.uses(render([f"a{i}_" for i in range(len(args))], ins, out, params))
    return render(args, ins, out, params)


# ---------------------------------------------------------------------------------------------
# Reductions: (init, update statement, OpenMP reduction operator or None)
# ---------------------------------------------------------------------------------------------

for _name, _kind in (("reduce_sum", "sum"), ("reduce_prod", "prod"), ("reduce_max", "max"),
                     ("reduce_min", "min"), ("reduce_and", "and"), ("reduce_or", "or"), ("argmax", "argmax"),
                     ("argmin", "argmin")):
    opinfo.register(_name, OpCategory.REDUCTION, "reduction loop with fused prologue/epilogue (kernel.py)",
                    reduce_kind=_kind)


reduce_kind = opinfo.reduce_kind


def reduce_init(kind: str, d: np.dtype) -> str:
    t = ctype(d)
    if kind == "sum":
        return f"({t})0"
    return {"prod": f"({t})1", "max": min_value(d), "min": max_value(d),
            "or": f"({t})0", "and": "1" if is_bool(d) else f"({t})~({t})0"}[kind]


def nan_flag_type(d: np.dtype) -> str:
    """C type of the NaN flag beside a float max/min accumulator of dtype ``d``: an integer of the
    element's width. An ``int`` flag in the same ``omp simd`` reduction as ``double`` accumulators
    made GCC 12 (-O3, AVX-512) vectorize it in a stack array it then stored to with an aligned move
    at an address 8 bytes off (SIGSEGV: ``jit(vmap(grad(...)))`` of a max in float64)."""
    return {8: "int64_t", 2: "int16_t"}.get(np.dtype(d).itemsize, "int32_t")


def reduce_update(kind: str, acc: str, x: str, d: np.dtype, nan_flag: str | None) -> str:
    if kind == "sum":
        return f"{acc} += {x};"
    if kind == "prod":
        return f"{acc} *= {x};"
    if kind in ("max", "min"):
        sym = ">" if kind == "max" else "<"
        s = f"{acc} = {x} {sym} {acc} ? {x} : {acc};"
        if nan_flag:
            s += f" {nan_flag} |= ({x} != {x});"
        return s
    if kind == "and":
        return f"{acc} &= {x};"
    if kind == "or":
        return f"{acc} |= {x};"
    raise ValueError(kind)


OMP_REDUCTION = {"sum": "+", "prod": "*", "max": "max", "min": "min", "and": "&", "or": "|"}


# ---------------------------------------------------------------------------------------------
# Prelude: inline math (float32), helpers
# ---------------------------------------------------------------------------------------------

# The helpers every program gets; the #include lines in front of them are chosen per program
# (:func:`.c_headers.includes_for`), so these use ``__builtin_memcpy`` and need no <string.h>.
PRELUDE_HEAD = """\
typedef float _Complex em_c64;
typedef double _Complex em_c128;
static inline int64_t em_clampi(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }
static inline float em_f32(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline uint32_t em_u32(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }
/* c ? a : b (c 0 or 1) by bits: both operands evaluated, so a load feeding a stays unconditional */
static inline float em_blendf(uint8_t c, float a, float b) {
    const uint32_t m = -(uint32_t)c;
    return em_f32((em_u32(a) & m) | (em_u32(b) & ~m));
}
static inline double em_blendd(uint8_t c, double a, double b) {
    uint64_t ua, ub; __builtin_memcpy(&ua, &a, 8); __builtin_memcpy(&ub, &b, 8);
    const uint64_t m = -(uint64_t)c; ua = (ua & m) | (ub & ~m);
    double r; __builtin_memcpy(&r, &ua, 8); return r;
}
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define EM_FMA(a, b, c) __builtin_fmaf(a, b, c)
#else
#define EM_FMA(a, b, c) ((a) * (b) + (c))
#endif
"""

# name -> (the prelude functions it calls, its definition): the sections of csrc/prelude_math.h
PRELUDE_FUNCS: dict[str, tuple[tuple[str, ...], str]] = dict(csrc.sections("prelude_math.h"))

_FUNC_RE = re.compile(r"\b(em_[a-z0-9]+)\(")


def prelude_closure(names: Iterable[str]) -> list[str]:
    """The prelude functions among ``names`` with their dependencies, each after what it calls."""
    wanted: list[str] = []

    def want(name: str) -> None:
        if name in PRELUDE_FUNCS and name not in wanted:
            for dep in PRELUDE_FUNCS[name][0]:
                want(dep)
            wanted.append(name)

    for name in names:
        want(name)
    return wanted


def prelude_names_in(code: str) -> list[str]:
    """The prelude functions ``code`` calls (hand-written C; the emission check)."""
    return [n for n in dict.fromkeys(_FUNC_RE.findall(code)) if n in PRELUDE_FUNCS]


def prelude(needs: Iterable[str]) -> str:
    """A translation unit's head: the ``#include`` lines, :data:`PRELUDE_HEAD` and the prelude
    functions, for code that recorded ``needs`` (``emit/support.py``: headers and prelude
    functions among them; the prelude functions bring their dependencies and headers)."""
    needs = list(needs)
    funcs = prelude_closure(needs)
    headers = set(needs)
    for text in (PRELUDE_HEAD, *(PRELUDE_FUNCS[n][1] for n in funcs)):
        headers.update(headers_in(text))
    return include_lines(headers) + PRELUDE_HEAD + "".join(PRELUDE_FUNCS[n][1] for n in funcs)


def prelude_for(source_body: str) -> str:
    """:func:`prelude` for a hand-written ``source_body`` (tests and libraries that are not
    generated programs): its needs are resolved from the names it uses."""
    return prelude((*headers_in(source_body), *prelude_names_in(source_body)))


# register digamma, erf_inv, polygamma, bitcast (c_special) and the complex renderers (c_complex)
from ember._src.native.emit import c_complex, c_special  # noqa: E402, F401


# The backend-internal threefry halves (rewrite/threefry.py declares them; passes.split_threefry
# creates them): their inline C and renderers.
def _threefry_renderer(fname: str) -> Renderer:
    def render(a: Sequence[str], ins: Sequence[np.dtype], out: np.dtype, p: dict) -> str:
        return f"{fname}({', '.join(a)})"

    return render


PRELUDE_FUNCS.setdefault("em_threefrylo", ((), threefry.threefry_c("em_threefrylo", 0)))
PRELUDE_FUNCS.setdefault("em_threefryhi", ((), threefry.threefry_c("em_threefryhi", 1)))
for _p, _fname in ((threefry.threefry_lo_p, "em_threefrylo"), (threefry.threefry_hi_p, "em_threefryhi")):
    opinfo.register(_p, OpCategory.ELEMENTWISE, "elementwise C expression (threefry.py)",
                    render=_threefry_renderer(_fname))
