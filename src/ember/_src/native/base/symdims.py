"""Symbolic sizes inside the native backend: C rendering, provable comparisons, nominal values.

A symbolic Program (named dynamic axes) carries :class:`~ember._src.shapes.DimExpr` sizes. The
native backend compiles such a program once: every size that is a ``DimExpr`` becomes a C
expression over the axis values, which the generated code reads from the ``dims`` argument of
``ember_main`` (``const int64_t em_d_batch = dims[0];``). Static sizes stay literals.

* :func:`cdim` renders a size as C text (parenthesized, ``int64_t`` arithmetic);
* :func:`proves_le` / :func:`proves_lt` decide ``a <= b`` only when it holds for *every* binding
  (every axis ``>= 1``), so index simplifications that need a range stay correct;
* :func:`nominal` evaluates a size with every axis at a nominal value, for cost estimates
  (fusion, parallel thresholds) that only affect speed, never results.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ember._src import shapes as sh

INF = float("inf")
NOMINAL = 64  # every axis, for cost estimates
PREFIX = "em_d_"  # C name of an axis value: em_d_batch


def is_sym(d: Any) -> bool:
    return isinstance(d, sh.DimExpr)


def axis_c_name(name: str) -> str:
    return PREFIX + name


def _atom_c(atom: Any) -> str:
    if atom.kind == "var":
        return axis_c_name(atom.args[0])
    if atom.kind == "ceil_sqrt":
        return f"em_ceil_sqrt64({cdim(atom.args[0])})"
    a, b = (cdim(x) for x in atom.args)
    if atom.kind == "floordiv":
        return f"em_floordiv64({a}, {b})"
    if atom.kind == "mod":
        return f"em_mod64({a}, {b})"
    return f"({a} > {b} ? {a} : {b})"


def cdim(d: Any) -> str:
    """C text of a size: an integer literal, or a parenthesized ``int64_t`` expression."""
    if not isinstance(d, sh.DimExpr):
        return str(int(d))
    parts = []
    for mono, c in d.terms:
        factors = []
        for atom, p in mono:
            factors += [_atom_c(atom)] * p
        if not factors:
            parts.append(f"(int64_t){c}" if not parts else str(c))
            continue
        body = "*".join(factors)
        sign_ = "" if c > 0 else "-"
        parts.append(f"{sign_}{body}" if abs(c) == 1 else f"{sign_}{abs(c)}*{body}")
    text = " + ".join(parts).replace("+ -", "- ")
    return f"({text})"


C_HELPERS = """\
static inline int64_t em_floordiv64(int64_t a, int64_t b) {
    int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t em_mod64(int64_t a, int64_t b) {
    int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int64_t em_ceil_sqrt64(int64_t a) {
    if (a <= 0) return 0;
    int64_t s = (int64_t)__builtin_sqrt((double)a);
    while (s * s < a) s++;
    while (s > 1 && (s - 1) * (s - 1) >= a) s--;
    return s; }
"""


def evaluate(d: Any, env: Mapping[str, int]) -> int:
    return sh.evaluate(d, env) if isinstance(d, sh.DimExpr) else int(d)


def nominal(d: Any) -> int:
    """``d`` with every axis at :data:`NOMINAL` (ints pass through)."""
    if not isinstance(d, sh.DimExpr):
        return d
    return max(sh.evaluate(d, {a: NOMINAL for a in d.axes()}), 0)


def _nonneg(d: Any) -> bool:
    """``d >= 0`` for every binding: each monomial over axes is ``>= 1``, so a polynomial whose
    non-constant coefficients are positive is at least its constant plus those coefficients."""
    if not isinstance(d, sh.DimExpr):
        return d >= 0
    if any(at.kind != "var" for at in d.atoms()):
        return False
    pos = {m: c for m, c in d.terms if m and c > 0}
    const = d.constant_term()
    for m, c in d.terms:
        if not m or c > 0:
            continue
        need = -c  # cancel c*m against positive terms whose monomials m divides (M = m*q >= m)
        for big in sorted(pos, key=len):
            if need and _divides_mono(m, big):
                take = min(need, pos[big])
                pos[big] -= take
                need -= take
        if need:  # an uncancelled negative monomial is unbounded below
            return False
    return const + sum(pos.values()) >= 0


def _divides_mono(small: tuple, big: tuple) -> bool:
    powers = dict(big)
    return all(powers.get(atom, 0) >= p for atom, p in small)


def _finite(x: Any) -> bool:
    return not isinstance(x, float) or math.isfinite(x)


def proves_le(a: Any, b: Any) -> bool:
    """``a <= b`` for every binding (False when undecidable); bounds may be +-INF."""
    if not (_finite(a) and _finite(b)):
        return a == -INF or b == INF
    return _nonneg(b - a)


def may_be_zero(d: Any) -> bool:
    """Whether the size ``d`` is 0 under some binding (``seq - 1``, a remainder ``seq - n*s``); a
    static 0 counts too. Reads of an operand with such a dim must be guarded (nothing to read)."""
    if not isinstance(d, sh.DimExpr):
        return int(d) == 0
    return not proves_le(1, d)


def proves_lt(a: Any, b: Any) -> bool:
    """``a < b`` for every binding (False when undecidable)."""
    if not (_finite(a) and _finite(b)):
        return a != b and (a == -INF or b == INF)
    return _nonneg(b - a - 1)


def sign(c: Any) -> int | None:
    """+1 / -1 when ``c`` has that sign for every binding, 0 for zero, else None."""
    if not isinstance(c, sh.DimExpr):
        return (c > 0) - (c < 0)
    if _nonneg(c - 1):
        return 1
    if _nonneg(-c - 1):
        return -1
    return None


def divides(k: Any, c: Any) -> bool:
    """Whether ``k`` divides ``c`` exactly for every binding."""
    if isinstance(k, int) and isinstance(c, int):
        return c % k == 0
    if isinstance(c, int) and c == 0:
        return True
    q = sh.floordiv(c, k)
    if isinstance(q, sh.DimExpr) and any(at.kind != "var" for at in q.atoms()):
        return False
    return q * k == c


def exact_div(c: Any, k: Any) -> Any:
    """``c / k`` when :func:`divides` holds."""
    if isinstance(c, int) and (c == 0 or isinstance(k, int)):
        return c // k if c else 0
    return sh.floordiv(c, k)
