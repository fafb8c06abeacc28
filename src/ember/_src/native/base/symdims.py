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
import re
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
    # a call, not ``a > b ? a : b``: each argument's text once (nested maxima of TF-style padded
    # sizes doubled at each level, 12 MB of C for MobileNetV2), and hoist_sizes names it
    return f"em_max64({a}, {b})"


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
static inline int64_t em_max64(int64_t a, int64_t b) { return a > b ? a : b; }
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


# ---------------------------------------------------------------------------------------------
# Hoisting sizes out of generated functions
# ---------------------------------------------------------------------------------------------

_CAST = "(int64_t)"
_CAST_TOKEN = "\x01"  # stands for ``(int64_t)`` while groups are matched
_INNER = re.compile(r"\(([^()]*)\)")
_SIZE_IDENT = re.compile(r"^(?:em_d_\w+|em_h\d+)$")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_SAFE_CALL = re.compile(r"(em_floordiv64|em_mod64|em_max64|em_ceil_sqrt64)$")


def _size_only(text: str) -> bool:
    """Whether ``text`` (one parenthesized group's contents, casts as tokens) is integer arithmetic
    over axis values and hoisted sizes only: identifiers ``em_d_*``/``em_h*``, integer literals,
    ``+ - *`` (no division, comparison or call: those may be guarded where they stand)."""
    body = text.replace(_CAST_TOKEN, "")
    idents = _IDENT.findall(body)
    if not idents or not all(_SIZE_IDENT.match(i) for i in idents):
        return False
    return re.fullmatch(r"[\w\s+\-*]*", body) is not None


def hoist_sizes(lines: list[str], indent: str = "    ") -> tuple[list[str], list[str]]:
    """Name every repeated or nested size expression of a generated function once.

    Under named dynamic axes every size is a C expression over the axis values (:func:`cdim`), and
    an index expression of a deep network nests them (a ResNet's spatial sizes are floor divisions
    of floor divisions), so the same expressions repeat thousands of times in a function and a
    translation unit grows to megabytes. This returns ``(declarations, lines)``: the lines with each
    size-only group (integer arithmetic over ``em_d_*`` values, ``em_floordiv64``/``em_mod64`` by a
    positive literal, ``em_max64``, ``em_ceil_sqrt64``) replaced by a local ``em_h<k>``, and the declarations
    ``const int64_t em_h<k> = ...;`` to put after the function's axis declarations, in dependency
    order. Only expressions that are safe to evaluate unconditionally move (no division by a size),
    so hoisting them out of a guarded branch or an empty loop changes nothing."""
    text = "\n".join(lines).replace(_CAST, _CAST_TOKEN)
    names: dict[str, str] = {}
    decls: list[str] = []

    def name_for(expr: str) -> str:
        if expr not in names:
            names[expr] = f"em_h{len(names)}"
            decls.append(f"{indent}const int64_t {names[expr]} = {expr.replace(_CAST_TOKEN, _CAST)};"
                         f" (void){names[expr]};")
        return names[expr]

    while True:
        changed = False
        out: list[str] = []
        pos = 0
        for m in _INNER.finditer(text):
            inner, start, end = m.group(1), m.start(), m.end()
            before = text[max(0, start - 16):start]
            call = _SAFE_CALL.search(before)
            after_ident = bool(before) and (before[-1].isalnum() or before[-1] == "_")
            replacement = None
            if call:
                args = [a.strip() for a in inner.split(",")]
                fn = call.group(1)
                ok = all(_size_only(a) or re.fullmatch(r"\d+", a) or _SIZE_IDENT.match(a) for a in args)
                if fn in ("em_floordiv64", "em_mod64"):  # (by a positive literal: never a trap)
                    ok = ok and len(args) == 2 and re.fullmatch(r"[1-9]\d*", args[1]) is not None
                if ok:
                    start -= len(fn)
                    replacement = name_for(f"{fn}({inner})")
            elif _size_only(inner) and re.search(r"[+\-*]", inner.replace(_CAST_TOKEN, "")):
                if after_ident:  # a call's argument list: name the argument, keep the call
                    start, end = start + 1, end - 1
                    replacement = name_for(f"({inner})")
                else:
                    replacement = name_for(f"({inner})")
            elif _SIZE_IDENT.match(inner.strip()) and not after_ident:
                replacement = inner.strip()  # a parenthesized name: the parentheses go
            if replacement is not None:
                out.append(text[pos:start])
                out.append(replacement)
                pos = end
                changed = True
        out.append(text[pos:])
        text = "".join(out)
        if not changed:
            break
    return decls, text.replace(_CAST_TOKEN, _CAST).split("\n")
