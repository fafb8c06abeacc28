"""Symbolic shapes.

A dimension is an ``int`` or a :class:`DimExpr`: a polynomial with integer coefficients over
*atoms*, where an atom is a named axis (``batch``) or an opaque node ``floordiv(a, b)``,
``mod(a, b)``, ``max(a, b)`` or ``ceil_sqrt(a)`` (the segment length of a checkpointed scan).
Expressions are kept in a canonical form, so ``batch*seq`` built along two paths compares equal,
and an expression that simplifies to a constant becomes an ``int``.

Shape inference treats a symbolic dim as ``>= 1`` and never equal to 1 for broadcasting purposes
(as JAX's shape polymorphism does): ``[batch, 512] + [1, 512]`` broadcasts, ``[batch, 512] +
[time, 512]`` raises :class:`ShapeError` naming both axes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Union

from ember.errors import AxisError, ShapeError

Dim = Union[int, "DimExpr"]
Shape = tuple  # tuple[Dim, ...]


class _Atom:
    """An indivisible factor: a named axis, or an opaque floordiv/mod/max/ceil_sqrt node."""

    __slots__ = ("kind", "args", "key")

    def __init__(self, kind: str, args: tuple):
        self.kind = kind
        self.args = args
        self.key = args[0] if kind == "var" else f"{kind}({', '.join(map(str, args))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Atom) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __lt__(self, other: _Atom) -> bool:
        return self.key < other.key

    def __str__(self) -> str:
        return self.key

    def evaluate(self, env: Mapping[str, int]) -> int:
        if self.kind == "var":
            try:
                return int(env[self.args[0]])
            except KeyError:
                raise ShapeError(f"axis {self.args[0]!r} has no size bound") from None
        if self.kind == "ceil_sqrt":
            return _ceil_sqrt_int(evaluate(self.args[0], env))
        a, b = (evaluate(x, env) for x in self.args)
        if self.kind == "floordiv":
            return a // b
        if self.kind == "mod":
            return a % b
        return max(a, b)


_Mono = tuple  # tuple[tuple[_Atom, int], ...], sorted by atom


def _mono_mul(a: _Mono, b: _Mono) -> _Mono:
    powers: dict[_Atom, int] = dict(a)
    for atom, p in b:
        powers[atom] = powers.get(atom, 0) + p
    return tuple(sorted(powers.items()))


class DimExpr:
    """A canonical symbolic dimension expression (use :func:`axis` to make one)."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: dict[_Mono, int]):
        self.terms = tuple(sorted(((m, c) for m, c in terms.items() if c != 0),
                                  key=lambda mc: [(str(a), p) for a, p in mc[0]]))
        self._hash = hash(self.terms)

    # -- construction -------------------------------------------------------------------------
    @staticmethod
    def _make(terms: dict[_Mono, int]) -> Dim:
        nonzero = {m: c for m, c in terms.items() if c != 0}
        if not nonzero:
            return 0
        if set(nonzero) == {()}:
            return nonzero[()]
        for m, c in nonzero.items():
            at = m[0][0] if len(m) == 1 and m[0][1] == 1 else None
            if at is None or at.kind != "mod" or not isinstance(at.args[1], int) or at.args[1] <= 0:
                continue
            # k mod(e, q) next to terms that cancel against k e: write the mod out, so that
            # a + (q - a % q) % q (a size padded to a multiple of q, Swin's windows) becomes
            # q ceil(a / q), which divides by q exactly
            rest = dict(nonzero)
            del rest[m]
            merged = dict(rest)
            for em, ec in DimExpr._terms_of(at.args[0]).items():
                merged[em] = merged.get(em, 0) + c * ec
            if sum(1 for v in merged.values() if v) < len(rest):
                return DimExpr._make(rest) + c * _mod_written_out(at.args[0], at.args[1])
        return DimExpr(nonzero)

    @staticmethod
    def _terms_of(x: Dim) -> dict[_Mono, int]:
        if isinstance(x, DimExpr):
            return dict(x.terms)
        return {(): _as_int(x)}

    # -- arithmetic ---------------------------------------------------------------------------
    def __add__(self, other: Dim) -> Dim:
        t = self._terms_of(self)
        for m, c in self._terms_of(other).items():
            t[m] = t.get(m, 0) + c
        return self._make(t)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return self._make({m: -c for m, c in self.terms})

    def __sub__(self, other: Dim) -> Dim:
        return self + (-other)

    def __rsub__(self, other: Dim) -> Dim:
        return (-self) + other

    def __mul__(self, other: Dim) -> Dim:
        t: dict[_Mono, int] = {}
        for m1, c1 in self._terms_of(self).items():
            for m2, c2 in self._terms_of(other).items():
                m = _mono_mul(m1, m2)
                t[m] = t.get(m, 0) + c1 * c2
        return self._make(t)

    __rmul__ = __mul__

    def __floordiv__(self, other: Dim) -> Dim:
        return floordiv(self, other)

    def __rfloordiv__(self, other: Dim) -> Dim:
        return floordiv(other, self)

    def __mod__(self, other: Dim) -> Dim:
        return mod(self, other)

    def __rmod__(self, other: Dim) -> Dim:
        return mod(other, self)

    # -- comparison ---------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, DimExpr) and self.terms == other.terms

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return self._hash

    def __bool__(self) -> bool:
        return True  # a symbolic dim is >= 1

    def __index__(self) -> int:
        raise ShapeError(f"symbolic dimension {self} used where a concrete integer is needed; "
                         "mark the argument static or avoid Python control flow on its size")

    def __int__(self) -> int:
        return self.__index__()

    def __lt__(self, other: Any) -> bool:
        return _compare(self, other, "<")

    def __le__(self, other: Any) -> bool:
        return _compare(self, other, "<=")

    def __gt__(self, other: Any) -> bool:
        return _compare(self, other, ">")

    def __ge__(self, other: Any) -> bool:
        return _compare(self, other, ">=")

    # -- inspection ---------------------------------------------------------------------------
    def atoms(self) -> set[_Atom]:
        return {a for m, _ in self.terms for a, _ in m}

    def axes(self) -> set[str]:
        out: set[str] = set()
        for a in self.atoms():
            if a.kind == "var":
                out.add(a.args[0])
            else:
                for x in a.args:
                    out |= free_axes(x)
        return out

    def constant_term(self) -> int:
        return dict(self.terms).get((), 0)

    def __str__(self) -> str:
        parts = []
        for m, c in self.terms:
            if not m:
                parts.append(str(c))
                continue
            factor = "*".join(str(a) if p == 1 else f"{a}^{p}" for a, p in m)
            parts.append(factor if c == 1 else f"-{factor}" if c == -1 else f"{c}*{factor}")
        text = " + ".join(parts).replace("+ -", "- ")
        return text

    __repr__ = __str__


def _as_int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        try:
            return int(x.__index__())
        except (AttributeError, TypeError):
            raise ShapeError(f"not a dimension: {x!r}") from None
    return x


def _atom_lower(at: _Atom) -> int | None:
    """A lower bound of an atom's value (axes are at least 1), or None when none is known."""
    if at.kind == "var":
        return 1
    if at.kind in ("mod", "ceil_sqrt"):
        return 0
    if at.kind == "max":
        known = [x for x in map(_lower_bound, at.args) if x is not None]
        return max(known) if known else None
    if at.kind == "floordiv":
        a, b = at.args
        la = _lower_bound(a)
        if la is None:
            return None
        if isinstance(b, int):
            return la // b if b > 0 else None
        return 0 if la >= 0 else None  # (a symbolic divisor is a size: at least 1)
    return None


def _lower_bound(d: Dim) -> int | None:
    """A lower bound of ``d`` over every binding of its axes, or None: the constant plus, for
    each term (all coefficients positive), its coefficient times a lower bound of its factors."""
    if isinstance(d, int):
        return d
    lo = 0
    for m, c in d.terms:
        if not m:
            lo += c
            continue
        if c < 0:
            return None
        f = 1
        for at, p in m:
            la = _atom_lower(at)
            if la is None or la < 0:
                return None
            f *= la ** p
        lo += c * f
    return lo


def _compare(a: Dim, b: Dim, op: str) -> bool:
    diff = a - b
    if isinstance(diff, int):
        return {"<": diff < 0, "<=": diff <= 0, ">": diff > 0, ">=": diff >= 0}[op]
    # diff = c + (terms with positive coefficients over factors of known lower bounds) is
    # decidable in some cases
    lo = _lower_bound(diff)
    if lo is not None:
        if op in (">", ">=") and (lo > 0 if op == ">" else lo >= 0):
            return True
        if op in ("<", "<=") and (lo >= 0 if op == "<" else lo > 0):
            return False
    raise ShapeError(f"cannot decide {a} {op} {b} for symbolic dimensions")


def axis(name: str) -> DimExpr:
    """A symbolic dimension for the named axis."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ShapeError(f"axis name must be an identifier, got {name!r}")
    return DimExpr({((_Atom("var", (name,)), 1),): 1})


def _atom_plus_constant(d: Dim) -> tuple[_Atom | None, int]:
    """``(atom, c)`` where ``d`` is ``atom + c`` (the atom to the first power, coefficient 1), else
    ``(None, 0)``."""
    if not isinstance(d, DimExpr):
        return None, 0
    atoms = [(m, c) for m, c in d.terms if m]
    const = sum(c for m, c in d.terms if not m)
    if len(atoms) == 1:
        (m, c), = atoms
        if c == 1 and len(m) == 1 and m[0][1] == 1:
            return m[0][0], const
    return None, 0


def floordiv(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if isinstance(b, int):
        if b == 0:
            raise ShapeError("symbolic dimension divided by zero")
        if b == 1:
            return a
        if all(c % b == 0 for _, c in a.terms):
            return DimExpr._make({m: c // b for m, c in a.terms})
        if b > 0:
            # (b q + r) // b == q + r // b for integer terms: each coefficient's multiple of b moves
            # out, leaving remainders in [0, b): (h - 4) // 4 is h // 4 - 1, as ConvNeXt's 4 x 4
            # stride-4 stem and a reshape to (h // 4) x (w // 4) patches need to agree
            whole = {m: c // b for m, c in a.terms if c // b}
            if whole:
                rest = DimExpr._make({m: c % b for m, c in a.terms if c % b})
                return DimExpr._make(whole) + floordiv(rest, b)
        inner, c = _atom_plus_constant(a)
        if b > 0 and inner is not None and inner.kind == "floordiv" and isinstance(inner.args[1], int) \
                and inner.args[1] > 0:
            # (x // p + c) // q == (x + c p) // (p q) for positive p, q: a chain of strided layers'
            # sizes (a ResNet's pool then strided convolution) reads the same as one stride's
            p = inner.args[1]
            return floordiv(inner.args[0] + c * p, p * b)
    elif a == b:
        return 1
    elif isinstance(a, DimExpr) and isinstance(b, DimExpr):
        # a polynomial multiple of the divisor: (batch*seq) // seq, (24*past + 24*seq) // (past +
        # seq) (the flat index arithmetic of arrays whose dim is a sum of axes, a key/value cache
        # past + seq), or (2*seq^2 - seq) // (2*seq - 1), a size torch's export records for Funnel
        q = _exact_quotient(a, b)
        if q is not None:
            return q
    return DimExpr({((_Atom("floordiv", (a, b)), 1),): 1})


def _exact_quotient(a: DimExpr, b: DimExpr) -> Dim | None:
    """``a / b`` where ``b`` divides ``a`` as polynomials with integer coefficients (atoms as
    variables), else None: long division by ``b``'s leading term in graded lexicographic order,
    which recovers the quotient of an exact division. An exact quotient is the floor quotient for
    every binding where ``b != 0``."""
    atoms = sorted({at for m, _ in a.terms + b.terms for at, _ in m})

    def order(m: _Mono) -> tuple:
        powers = dict(m)
        return sum(powers.values()), tuple(powers.get(at, 0) for at in atoms)

    lead, lead_c = max(b.terms, key=lambda mc: order(mc[0]))
    rest = dict(a.terms)
    quotient: dict[_Mono, int] = {}
    for _ in range(4 * len(a.terms) + 16):
        rest = {m: c for m, c in rest.items() if c}
        if not rest:
            return DimExpr._make(quotient)
        top = max(rest, key=order)
        powers = dict(top)
        for at, p in lead:
            if powers.get(at, 0) < p:
                return None
            powers[at] -= p
        if rest[top] % lead_c:
            return None
        qm, qc = tuple(sorted((at, p) for at, p in powers.items() if p)), rest[top] // lead_c
        quotient[qm] = quotient.get(qm, 0) + qc
        for m, c in b.terms:
            pm = _mono_mul(qm, m)
            rest[pm] = rest.get(pm, 0) - qc * c
    return None


def _mod_written_out(e: Dim, q: int) -> Dim:
    """``e % q`` for ``q > 0`` without a mod atom: ``q ceil(y / q) - y`` for ``e = -y`` with only
    negative coefficients (the ceiling keeps a lower bound), else ``e - q (e // q)``."""
    if isinstance(e, DimExpr) and all(c < 0 for m, c in e.terms if m):
        y = -e
        return q * floordiv(y + (q - 1), q) - y
    return e - q * floordiv(e, q)


def mod(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    if isinstance(b, int):
        if b == 0:
            raise ShapeError("symbolic dimension modulo zero")
        if all(c % b == 0 for _, c in a.terms):
            return 0
        if b > 0:
            # (u + b k) % b == u % b: the constant keeps its remainder, and an inner x % (b j)
            # reads as x, so (q - a % q) % q is (-a) % q
            terms: dict[_Mono, int] = {}
            for m, c in a.terms:
                at = m[0][0] if len(m) == 1 and m[0][1] == 1 else None
                if not m:
                    c %= b
                elif at is not None and at.kind == "mod" and isinstance(at.args[1], int) \
                        and at.args[1] % b == 0:
                    for im, ic in DimExpr._terms_of(at.args[0]).items():
                        terms[im] = terms.get(im, 0) + c * ic
                    continue
                terms[m] = terms.get(m, 0) + c
            reduced = DimExpr._make(terms)
            if reduced != a:
                return mod(reduced, b)
    elif a == b:
        return 0
    return DimExpr({((_Atom("mod", (a, b)), 1),): 1})


def _ceil_sqrt_int(n: int) -> int:
    return 0 if n <= 0 else math.isqrt(n - 1) + 1


def ceil_sqrt(a: Dim) -> Dim:
    """``ceil(sqrt(a))`` (0 for ``a <= 0``): an int for an int, else an opaque atom."""
    if isinstance(a, int):
        return _ceil_sqrt_int(a)
    return DimExpr({((_Atom("ceil_sqrt", (a,)), 1),): 1})


def bounds(d: Dim, ranges: Mapping[str, Sequence[int | None]]) -> tuple[int | None, int | None]:
    """Lower and upper bounds of ``d`` when each named axis lies in ``ranges[name] = (lo, hi)``
    (``hi`` None: unbounded; an axis not listed: ``[1, inf)``); None for a side that is not known
    (an unbounded side, or an opaque floordiv/mod/max factor)."""
    if isinstance(d, int):
        return d, d
    lo: int | None = 0
    hi: int | None = 0
    for m, c in d.terms:
        mlo, mhi = 1, 1
        for at, p in m:
            if at.kind != "var":
                return None, None
            r = ranges.get(at.args[0]) or (1, None)
            alo, ahi = max(1, r[0] or 1), r[1]
            mlo *= alo ** p
            mhi = None if mhi is None or ahi is None else mhi * ahi ** p
        tlo, thi = (c * mlo, None if mhi is None else c * mhi) if c >= 0 else \
            (None if mhi is None else c * mhi, c * mlo)
        lo = None if lo is None or tlo is None else lo + tlo
        hi = None if hi is None or thi is None else hi + thi
    return lo, hi


def dmax(a: Dim, b: Dim, ranges: Mapping[str, Sequence[int | None]] | None = None) -> Dim:
    """Symbolic ``max``: decided when the difference is known (over every size, or over the axis
    ``ranges`` given, as :func:`bounds` takes them), else an opaque atom."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    try:
        return a if _compare(a, b, ">=") else b
    except ShapeError:
        pass
    try:
        return b if _compare(b, a, ">=") else a
    except ShapeError:
        pass
    if ranges:
        lo, hi = bounds(a - b, ranges)
        if lo is not None and lo >= 0:
            return a
        if hi is not None and hi <= 0:
            return b
    lo, hi = sorted((a, b), key=str)
    return DimExpr({((_Atom("max", (lo, hi)), 1),): 1})


def dmin(a: Dim, b: Dim, ranges: Mapping[str, Sequence[int | None]] | None = None) -> Dim:
    """Symbolic ``min``: ``-dmax(-a, -b, ranges)``."""
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    return -dmax(-a, -b, ranges)


def is_symbolic(d: Any) -> bool:
    return isinstance(d, DimExpr)


def is_static_shape(shape: Iterable[Dim]) -> bool:
    return not any(isinstance(d, DimExpr) for d in shape)


def free_axes(d: Dim) -> set[str]:
    return d.axes() if isinstance(d, DimExpr) else set()


def shape_axes(shape: Iterable[Dim]) -> set[str]:
    out: set[str] = set()
    for d in shape:
        out |= free_axes(d)
    return out


def evaluate(d: Dim, env: Mapping[str, int]) -> int:
    """Concrete value of ``d`` under the axis bindings ``env``."""
    if isinstance(d, int):
        return d
    total = 0
    for m, c in d.terms:
        v = c
        for atom, p in m:
            v *= atom.evaluate(env) ** p
        total += v
    return total


def evaluate_shape(shape: Iterable[Dim], env: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(d, env) for d in shape)


def canonical_dim(d: Any) -> Dim:
    """Accept ints, numpy ints and :class:`DimExpr`; reject anything else."""
    if isinstance(d, DimExpr):
        return d
    if isinstance(d, str):
        return axis(d)
    d = _as_int(d)
    if d < 0:
        raise ShapeError(f"negative dimension {d}")
    return d


def canonical_shape(shape: Any) -> tuple:
    if isinstance(shape, (int, DimExpr)) or hasattr(shape, "__index__"):
        shape = (shape,)
    return tuple(canonical_dim(d) for d in shape)


def size(shape: Sequence[Dim]) -> Dim:
    out: Dim = 1
    for d in shape:
        out = out * d
    return out


def dim_str(d: Dim) -> str:
    if isinstance(d, DimExpr):
        terms = d.terms
        if len(terms) == 1 and terms[0][1] == 1 and len(terms[0][0]) == 1 and terms[0][0][0][1] == 1:
            atom = terms[0][0][0][0]
            if atom.kind == "var":
                return f"axis {atom.args[0]!r}"
        return f"size {d}"
    return f"size {d}"


def shape_str(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def broadcast_shapes(*shapes: Sequence[Dim], op: str = "broadcast") -> tuple:
    """NumPy broadcasting over symbolic shapes, with errors that name the axes."""
    ndim = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for i in range(ndim):
        d: Dim = 1
        for s in padded:
            e = s[i]
            if isinstance(e, int) and e == 1:
                continue
            if isinstance(d, int) and d == 1:
                d = e
            elif d != e:
                shown = " and ".join(shape_str(s) for s in shapes)
                raise ShapeError(f"{op}: incompatible shapes {shown}: {dim_str(d)} vs {dim_str(e)} "
                                 f"at dimension {i - ndim}")
        out.append(d)
    return tuple(out)


def same_dim(a: Any, b: Any) -> bool:
    """Whether two sizes are provably equal (static and equal, or the same expression); False where
    that cannot be decided."""
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - a symbolic comparison that cannot be decided
        return False


def check_equal_dims(a: Dim, b: Dim, what: str) -> None:
    if a != b:
        raise ShapeError(f"{what}: {dim_str(a)} vs {dim_str(b)}")


def normalize_axis(axis_: int, ndim: int, what: str = "axis") -> int:
    """Map a possibly negative axis into ``[0, ndim)``; raise naming the argument when out of range."""
    try:
        a = int(axis_.__index__())
    except AttributeError:
        raise TypeError(f"{what} must be an integer, got {axis_!r}") from None
    if not -ndim <= a < max(ndim, 1) or (ndim == 0 and a not in (0, -1)):
        raise AxisError(f"{what} {a} is out of bounds for an array of dimension {ndim}")
    return a % ndim if ndim else 0


def normalize_axes(axes: Any, ndim: int, what: str = "axis") -> tuple[int, ...]:
    """``None`` means all axes; an int or a sequence of ints; duplicates are an error."""
    if axes is None:
        return tuple(range(ndim))
    if not isinstance(axes, (tuple, list)):
        axes = (axes,)
    out = tuple(normalize_axis(a, ndim, what) for a in axes)
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated {what} in {tuple(axes)}")
    return out


def bind_axes(named: Sequence[tuple[str, Sequence[Dim], Sequence[int]]]) -> dict[str, int]:
    """Solve axis bindings from (argument name, symbolic shape, concrete shape) triples.

    Only dims that are a bare axis name bind it; other expressions are checked afterwards.
    Conflicts raise ``ShapeError: axis 'batch' has conflicting sizes: x has 32, mask has 64``.
    """
    env: dict[str, int] = {}
    origin: dict[str, tuple[str, int]] = {}
    for arg, sym, conc in named:
        if len(sym) != len(conc):
            raise ShapeError(f"{arg}: expected rank {len(sym)} {shape_str(sym)}, got shape {tuple(conc)}")
        for i, (s, c) in enumerate(zip(sym, conc)):
            if isinstance(s, DimExpr) and len(s.terms) == 1 and s.terms[0][1] == 1 \
                    and len(s.terms[0][0]) == 1 and s.terms[0][0][0][0].kind == "var":
                name = s.terms[0][0][0][0].args[0]
                if name in env and env[name] != c:
                    first, j = origin[name]
                    if first == arg:  # two dims of one argument (say, an export that made w = h)
                        first, arg = f"{arg} dimension {j}", f"{arg} dimension {i}"
                    raise ShapeError(f"axis {name!r} has conflicting sizes: {first} has "
                                     f"{env[name]}, {arg} has {c}")
                env.setdefault(name, int(c))
                origin.setdefault(name, (arg, i))
    for arg, sym, conc in named:
        for i, (s, c) in enumerate(zip(sym, conc)):
            if isinstance(s, int):
                if s != c:
                    raise ShapeError(f"{arg}: dimension {i} must be {s}, got {c}")
            elif evaluate(s, env) != c:
                raise ShapeError(f"{arg}: dimension {i} is {s} = {evaluate(s, env)} for "
                                 f"{env}, got {c}")
    return env


def prod(xs: Iterable[int]) -> int:
    return math.prod(xs)
