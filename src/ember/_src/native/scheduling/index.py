"""Integer index expressions for kernel loop nests.

An :class:`Ix` is an affine form over loop variables (named ``"d0"``, ``"d1"``, ...) plus opaque
terms: floor division and modulo by a constant, clamping, and data-dependent values (an index
loaded from memory, for gathers). Every expression is simplified on construction using the
variables' ranges, so reading a reshaped buffer through ``delinearize(linearize(i))`` collapses
back to an affine offset, which keeps the generated loops vectorizable.

Expressions are immutable and hashable: the kernel builder memoizes on them.

Coefficients, constants, divisors and bounds may be symbolic sizes (:class:`~ember._src.shapes.
DimExpr`, for programs with named dynamic axes). Ranges then hold symbolic bounds, and a
simplification that needs a range is applied only when :mod:`.symdims` proves it for every
binding (every axis ``>= 1``); otherwise the opaque term stays, which is always correct.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ember._src import shapes as sh
from ember._src.native.base import symdims as sd

Ranges = Mapping[str, tuple[Any, Any]]  # loop variable -> inclusive (lo, hi); ints or DimExprs
INF = float("inf")


class Opaque:
    """A non-affine term; subclasses are immutable and hashable."""

    __slots__ = ()

    def key(self) -> tuple:
        raise NotImplementedError

    def __hash__(self) -> int:
        return hash(self.key())

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.key() == other.key()  # type: ignore[union-attr]

    def vars(self) -> set[str]:
        raise NotImplementedError


class _ByConstant(Opaque):
    """``e <op> k`` for a constant ``k`` (``tag`` names the operation in keys, ``symbol`` in text)."""

    __slots__ = ("e", "k")
    tag = symbol = ""

    def __init__(self, e: Ix, k: int):
        self.e, self.k = e, k

    def key(self) -> tuple:
        return (self.tag, self.e, self.k)

    def vars(self) -> set[str]:
        return self.e.vars()

    def __repr__(self) -> str:
        return f"({self.e} {self.symbol} {self.k})"


class FloorDiv(_ByConstant):
    __slots__ = ()
    tag, symbol = "div", "//"


class Mod(_ByConstant):
    __slots__ = ()
    tag, symbol = "mod", "%"


class Clamp(Opaque):
    __slots__ = ("e", "lo", "hi")

    def __init__(self, e: Ix, lo: int, hi: int):
        self.e, self.lo, self.hi = e, lo, hi

    def key(self) -> tuple:
        return ("clamp", self.e, self.lo, self.hi)

    def vars(self) -> set[str]:
        return self.e.vars()

    def __repr__(self) -> str:
        return f"clamp({self.e}, {self.lo}, {self.hi})"


class Data(Opaque):
    """An integer value computed by kernel node ``node`` (e.g. a gathered index)."""

    __slots__ = ("node", "node_vars")

    def __init__(self, node: int, node_vars: frozenset[str]):
        self.node, self.node_vars = node, node_vars

    def key(self) -> tuple:
        return ("data", self.node)

    def vars(self) -> set[str]:
        return set(self.node_vars)

    def __repr__(self) -> str:
        return f"n{self.node}"


class Ix:
    """``const + sum(coef * term)``; a term is a loop variable name or an :class:`Opaque`."""

    __slots__ = ("terms", "const", "_hash")

    def __init__(self, terms: Mapping[Any, Any] | None = None, const: Any = 0):
        self.terms = {k: _num(c) for k, c in (terms or {}).items() if not _is_zero(c)}
        self.const = _num(const)
        self._hash = hash((frozenset(self.terms.items()), self.const))

    # -- construction ------------------------------------------------------------------------
    @staticmethod
    def var(name: str) -> Ix:
        return Ix({name: 1})

    @staticmethod
    def lit(c: int) -> Ix:
        return Ix({}, c)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ix) and self.const == other.const and self.terms == other.terms

    def __add__(self, other: Ix | Any) -> Ix:
        if not isinstance(other, Ix):
            return Ix(self.terms, self.const + other)
        terms = dict(self.terms)
        for k, c in other.terms.items():
            terms[k] = terms.get(k, 0) + c
        return _recombine(Ix(terms, self.const + other.const))

    __radd__ = __add__

    def __neg__(self) -> Ix:
        return self * -1

    def __sub__(self, other: Ix | int) -> Ix:
        return self + (-other if isinstance(other, Ix) else -other)

    def __rsub__(self, other: int) -> Ix:
        return (-self) + other

    def __mul__(self, c: int) -> Ix:
        return Ix({k: v * c for k, v in self.terms.items()}, self.const * c)

    __rmul__ = __mul__

    # -- queries -----------------------------------------------------------------------------
    def is_const(self) -> bool:
        return not self.terms

    def is_var(self) -> str | None:
        """The variable name if this is exactly one loop variable with coefficient 1."""
        if self.const == 0 and len(self.terms) == 1:
            (k, c), = self.terms.items()
            if c == 1 and isinstance(k, str):
                return k
        return None

    def vars(self) -> set[str]:
        out: set[str] = set()
        for k in self.terms:
            out |= {k} if isinstance(k, str) else k.vars()
        return out

    def affine_vars(self) -> dict[str, int]:
        return {k: c for k, c in self.terms.items() if isinstance(k, str)}

    def opaque_vars(self) -> set[str]:
        out: set[str] = set()
        for k in self.terms:
            if not isinstance(k, str):
                out |= k.vars()
        return out

    def opaques(self) -> list[Opaque]:
        return [k for k in self.terms if not isinstance(k, str)]

    def __repr__(self) -> str:
        parts = [(f"{k}" if c == 1 else f"{c}*{k}") for k, c in self.terms.items()]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


def _num(c: Any) -> Any:
    return c if isinstance(c, sh.DimExpr) else int(c)


def _is_zero(c: Any) -> bool:
    return not isinstance(c, sh.DimExpr) and c == 0


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, float) or isinstance(b, float):  # an infinite bound
        return a if isinstance(a, float) else b
    return a + b


def _scale(c: Any, a: Any) -> Any:
    if isinstance(a, float):  # +-INF times a coefficient of known sign
        return a if (sd.sign(c) or 0) > 0 else -a
    return c * a


def _recombine(e: Ix) -> Ix:
    """``c*k*(x // k) + c*(x % k)  ->  c*x`` (undoes delinearize-then-linearize)."""
    divs = [t for t in e.terms if isinstance(t, FloorDiv)]
    if not divs:
        return e
    for d in divs:
        m = Mod(d.e, d.k)
        cd, cm = e.terms.get(d, 0), e.terms.get(m, 0)
        if cm and cd == cm * d.k:
            terms = dict(e.terms)
            del terms[d]
            del terms[m]
            return _recombine(Ix(terms, e.const) + d.e * cm)
    return e


# ---------------------------------------------------------------------------------------------
# Ranges and simplifying constructors
# ---------------------------------------------------------------------------------------------


def term_range(t: Any, ranges: Ranges) -> tuple[Any, Any]:
    if isinstance(t, str):
        return ranges[t]
    if isinstance(t, FloorDiv):
        lo, hi = ix_range(t.e, ranges)
        if isinstance(t.k, int) and not isinstance(lo, sh.DimExpr) and not isinstance(hi, sh.DimExpr):
            return (lo // t.k if lo != -INF else -INF, hi // t.k if hi != INF else INF)
        # symbolic: e >= 0 (callers guarantee it) and k >= 1, so 0 <= e // k <= e
        return (0 if sd.proves_le(0, lo) else -INF, hi if sd.proves_le(0, hi) else INF)
    if isinstance(t, Mod):
        return (0, t.k - 1)
    if isinstance(t, Clamp):
        return (t.lo, t.hi)
    return (-INF, INF)


def ix_range(e: Ix, ranges: Ranges) -> tuple[Any, Any]:
    """Inclusive bounds of ``e``: ints, symbolic sizes, or +-INF when unknown."""
    lo = hi = e.const
    for t, c in e.terms.items():
        a, b = term_range(t, ranges)
        s = sd.sign(c)
        if s is None:
            return (-INF, INF)
        if s > 0:
            lo, hi = _add(lo, _scale(c, a)), _add(hi, _scale(c, b))
        else:
            lo, hi = _add(lo, _scale(c, b)), _add(hi, _scale(c, a))
    return lo, hi


def _within(lo: Any, hi: Any, k: Any) -> bool:
    """``0 <= lo`` and ``hi < k`` for every binding."""
    return sd.proves_le(0, lo) and sd.proves_lt(hi, k)


def floordiv(e: Ix, k: Any, ranges: Ranges) -> Ix:
    """``e // k`` for ``e >= 0`` (callers guarantee non-negative operands)."""
    if isinstance(k, int) and k == 1:
        return e
    lo, hi = ix_range(e, ranges)
    if _within(lo, hi, k):
        return Ix.lit(0)
    q, r = _split(e, k)
    rlo, rhi = ix_range(r, ranges)
    if _within(rlo, rhi, k):
        return Ix({t: sd.exact_div(c, k) for t, c in q.terms.items()}, sd.exact_div(q.const, k))
    return Ix({FloorDiv(e, k): 1})


def mod(e: Ix, k: Any, ranges: Ranges) -> Ix:
    """``e % k`` for ``e >= 0``."""
    if isinstance(k, int) and k == 1:
        return Ix.lit(0)
    lo, hi = ix_range(e, ranges)
    if _within(lo, hi, k):
        return e
    q, r = _split(e, k)
    rlo, rhi = ix_range(r, ranges)
    if _within(rlo, rhi, k):
        return r
    return Ix({Mod(e, k): 1})


def clamp(e: Ix, lo: Any, hi: Any, ranges: Ranges) -> Ix:
    elo, ehi = ix_range(e, ranges)
    if sd.proves_le(lo, elo) and sd.proves_le(ehi, hi):
        return e
    if e.is_const() and not any(isinstance(x, sh.DimExpr) for x in (e.const, lo, hi)):
        return Ix.lit(min(max(e.const, lo), hi))
    return Ix({Clamp(e, lo, hi): 1})


def _split(e: Ix, k: Any) -> tuple[Ix, Ix]:
    """Split ``e`` into (a part whose coefficients k divides, the remainder part). A static
    coefficient ``c`` that ``k`` does not divide splits too, into ``k * (c // k)`` and ``c % k``
    (Longformer's band: ``(385 a + i) // 384`` is ``a + (a + i) // 384``, which the ranges of
    ``a`` and ``i`` then prove to be ``a``)."""
    q = {t: c for t, c in e.terms.items() if sd.divides(k, c)}
    r = {t: c for t, c in e.terms.items() if not sd.divides(k, c)}
    if isinstance(k, int) and k > 0:
        for t, c in list(r.items()):
            if isinstance(c, int) and abs(c) > k:
                q[t], r[t] = k * (c // k), c % k
    if isinstance(e.const, int) and isinstance(k, int):
        return Ix(q, e.const - e.const % k), Ix(r, e.const % k)
    if sd.divides(k, e.const):
        return Ix(q, e.const), Ix(r, 0)
    return Ix(q, 0), Ix(r, e.const)


def strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def linearize(idx: Sequence[Ix], shape: Sequence[int]) -> Ix:
    """Row-major flat offset of the multi-index ``idx`` into an array of ``shape``."""
    total = Ix.lit(0)
    for i, s, n in zip(idx, strides(shape), shape):
        if n != 1:
            total = total + i * s
    return total


# The deepest nesting of divisions by symbolic sizes a kernel's reshape may leave in an index. Each
# reshape over symbolic sizes nests its divisions around the previous ones' (the flat offset divided
# by and reduced modulo each size), and the index's text grows about fourfold per level: Funnel's
# relative-position shift (reshapes and slices over the sequence and its pooled length) gave lines
# of C of megabytes. Past this depth the kernel builder materializes the reshape's operand.
MAX_SYMBOLIC_NESTING = 2


def symbolic_nesting(e: Ix, limit: int = MAX_SYMBOLIC_NESTING + 1) -> int:
    """How deeply divisions and remainders by symbolic sizes nest in ``e`` (those by constants
    count 0), counted up to ``limit``."""
    deepest = 0
    for t in e.opaques():
        if not isinstance(t, _ByConstant):
            continue
        own = 0 if isinstance(t.k, int) else 1
        deepest = max(deepest, own + (symbolic_nesting(t.e, limit - own) if limit > own else 0))
        if deepest >= limit:
            return limit
    return deepest


def delinearize(flat: Ix, shape: Sequence[int], ranges: Ranges) -> list[Ix]:
    """The multi-index of row-major flat offset ``flat`` in an array of ``shape``."""
    if 0 in shape:  # nothing is ever read from an empty array: any index will do
        return [Ix.lit(0)] * len(shape)
    out = []
    for s, n in zip(strides(shape), shape):
        if n == 1:
            out.append(Ix.lit(0))
        else:
            out.append(mod(floordiv(flat, s, ranges), n, ranges))
    return out


def reshape_index(idx: Sequence[Ix], out_shape: Sequence[Any], in_shape: Sequence[Any],
                  ranges: Ranges) -> list[Ix]:
    """The index into a reshape's operand (``in_shape``) of the element at ``idx`` of its result
    (``out_shape``). Leading and trailing axes the reshape keeps (equal sizes in both shapes) pass
    their indices through; only the axes between are flattened and split again. Flattening all of
    them would divide the whole flat offset by every size, symbolic leading ones included: a
    division per element by a value known only at run time, where the kept axes need none."""
    lead = 0
    while lead < min(len(out_shape), len(in_shape)) and sh.same_dim(out_shape[lead], in_shape[lead]):
        lead += 1
    trail = 0
    while (trail < min(len(out_shape), len(in_shape)) - lead
           and sh.same_dim(out_shape[len(out_shape) - 1 - trail], in_shape[len(in_shape) - 1 - trail])):
        trail += 1
    mid_out = slice(lead, len(out_shape) - trail)
    mid_in = in_shape[lead:len(in_shape) - trail]
    if 0 in in_shape:  # nothing is ever read from an empty array: any index will do
        return [Ix.lit(0)] * len(in_shape)
    flat = linearize(idx[mid_out], out_shape[mid_out])
    return [*idx[:lead], *delinearize(flat, mid_in, ranges), *idx[len(out_shape) - trail:]]


# ---------------------------------------------------------------------------------------------
# Rendering and loop merging
# ---------------------------------------------------------------------------------------------


def render(e: Ix, names: Mapping[str, str], data: Mapping[int, str]) -> str:
    """C text of ``e``; ``names`` maps loop variables (or merged variables) to C names and
    ``data`` maps kernel node ids to the C temporaries holding them."""
    parts = []
    for t, c in e.terms.items():
        if isinstance(t, str):
            s = names[t]
        elif isinstance(t, FloorDiv):
            s = f"(({render(t.e, names, data)}) / {_divisor(t.k)})"
        elif isinstance(t, Mod):
            s = f"(({render(t.e, names, data)}) % {_divisor(t.k)})"
        elif isinstance(t, Clamp):
            s = f"em_clampi({render(t.e, names, data)}, {sd.cdim(t.lo)}, {sd.cdim(t.hi)})"
        else:
            s = f"(int64_t){data[t.node]}"
        if isinstance(c, sh.DimExpr):
            parts.append(f"{sd.cdim(c)}*{s}")
            continue
        parts.append(s if c == 1 else f"{c}*{s}" if c > 0 else f"-{-c}*{s}" if c != -1 else f"-{s}")
    text = " + ".join(parts).replace("+ -", "- ")
    if isinstance(e.const, sh.DimExpr):
        return f"{text} + {sd.cdim(e.const)}" if parts else sd.cdim(e.const)
    if e.const or not parts:
        text = f"{text} + {e.const}" if parts and e.const > 0 else \
            f"{text} - {-e.const}" if parts else str(e.const)
    return text


def _divisor(k: Any) -> str:
    """C text of a divisor; a symbolic one that may be 0 (a stride of a possibly-empty operand,
    whose index is then never used to read) divides by 1 instead of trapping."""
    if sd.is_sym(k) and sd.may_be_zero(k):
        c = sd.cdim(k)
        return f"({c} > 0 ? {c} : 1)"
    return sd.cdim(k)


def substitute(e: Ix, mapping: Mapping[str, Ix]) -> Ix:
    """Replace loop variables by expressions (opaque terms are rebuilt recursively)."""
    out = Ix.lit(e.const)
    for t, c in e.terms.items():
        if isinstance(t, str):
            out = out + mapping.get(t, Ix.var(t)) * c
        elif isinstance(t, FloorDiv):
            out = out + Ix({FloorDiv(substitute(t.e, mapping), t.k): c})
        elif isinstance(t, Mod):
            out = out + Ix({Mod(substitute(t.e, mapping), t.k): c})
        elif isinstance(t, Clamp):
            out = out + Ix({Clamp(substitute(t.e, mapping), t.lo, t.hi): c})
        else:
            out = out + Ix({t: c})
    return out


def mergeable_groups(dims: Sequence[str], sizes: Sequence[int], exprs: Iterable[Ix]) -> list[list[int]]:
    """Partition consecutive loop dims into groups that can run as one flat loop.

    Dims ``a`` and ``a+1`` merge when every expression uses them only affinely with
    ``coef[a] == coef[a+1] * size[a+1]`` (contiguous), so ``coef[a+1] * (i_a*size + i_{a+1})``
    replaces both. A group of size-1 dims (index always 0, whatever its coefficients) merges with
    the dim after it, so that a ``1 x seq x d`` map splits its ``seq * d`` loop over threads, not a
    loop of one. Dims used inside an opaque term never merge.
    """
    exprs = list(exprs)
    blocked: set[str] = set()
    for e in exprs:
        blocked |= e.opaque_vars()
    groups: list[list[int]] = []
    for a in range(len(dims)):
        unit = groups and all(isinstance(sizes[i], int) and sizes[i] == 1 and dims[i] not in blocked
                              for i in groups[-1]) and dims[a] not in blocked
        if unit or (groups and _can_merge(dims[groups[-1][-1]], dims[a], sizes[a], exprs, blocked)):
            groups[-1].append(a)
        else:
            groups.append([a])
    return groups


def _can_merge(prev: str, cur: str, cur_size: int, exprs: list[Ix], blocked: set[str]) -> bool:
    if prev in blocked or cur in blocked:
        return False
    for e in exprs:
        if e.terms.get(prev, 0) != e.terms.get(cur, 0) * cur_size:
            return False
    return True


def merge_vars(e: Ix, groups: Sequence[Sequence[str]], merged_names: Sequence[str]) -> Ix:
    """Rewrite ``e`` over merged loop variables (``groups[g]`` are the original dims of merged
    variable ``merged_names[g]``; validity was checked by :func:`mergeable_groups`)."""
    terms = dict(e.terms)
    for dims, name in zip(groups, merged_names):
        if len(dims) == 1:
            if dims[0] in terms:
                terms[name] = terms.pop(dims[0])
            continue
        c = terms.get(dims[-1], 0)
        for d in dims:
            terms.pop(d, None)
        if c:
            terms[name] = c
    return Ix(terms, e.const)
