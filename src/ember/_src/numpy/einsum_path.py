"""``einsum_path``: the contraction order NumPy's ``einsum_path`` picks (``"greedy"`` or ``"optimal"``)
and its printable report.

Only the shapes of the operands matter, so this is plain Python over index sets:

* greedy: repeatedly contract the pair that removes the most elements (ties: the cheaper one),
  first among pairs that share an index, then, if none qualifies, among all pairs (outer products);
  a pair qualifies when its result fits the memory limit and the running cost stays below the naive
  cost. New candidates are pairs with the freshly made intermediate.
* optimal: every sequence of pairwise contractions whose intermediates fit the memory limit, keeping
  the cheapest (the first found among equals).

The cost of one contraction is ``prod(sizes of the indices involved) * max(1, terms - 1)``, plus one
factor when an index is summed away. The memory limit defaults to the largest operand or output.
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember._src import core

SYMBOLS = string.ascii_uppercase + string.ascii_lowercase


def _shape_of(x: Any) -> tuple[int, ...]:
    if isinstance(x, core.Tracer) or hasattr(x, "shape"):
        return tuple(int(d) for d in x.shape)
    return tuple(np.shape(x))


def _size(indices: Any, sizes: dict) -> int:
    return math.prod(sizes[i] for i in indices)


def _flops(indices: Any, summed: bool, terms: int, sizes: dict) -> int:
    return _size(indices, sizes) * (max(1, terms - 1) + (1 if summed else 0))


def _contract(positions: Sequence[int], sets: list[set], output: set) -> tuple[set, list[set], set, set]:
    """Contract ``positions`` of ``sets``: (result indices, remaining sets with the result last,
    indices summed away, all indices involved)."""
    involved: set = set()
    keep = set(output)
    rest = []
    for i, s in enumerate(sets):
        if i in positions:
            involved |= s
        else:
            rest.append(s)
            keep |= s
    result = keep & involved
    return result, [*rest, result], involved - result, involved


def _greedy(sets: list[set], output: set, sizes: dict, limit: int) -> list[tuple[int, ...]]:
    if len(sets) <= 2:
        return [tuple(range(len(sets)))]
    _, _, summed, involved = _contract(range(len(sets)), sets, output)
    naive = _flops(involved, bool(summed), len(sets), sizes)
    spent = 0
    path: list[tuple[int, ...]] = []
    candidates: list[tuple[tuple[int, int], tuple[int, int]]] = []  # (key, pair)

    def evaluate(pair: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]] | None:
        result, _, removed, inv = _contract(pair, sets, output)
        new = _size(result, sizes)
        if new > limit:
            return None
        cost = _flops(inv, bool(removed), 2, sizes)
        if spent + cost > naive:
            return None
        freed = _size(sets[pair[0]], sizes) + _size(sets[pair[1]], sizes) - new
        return (-freed, cost), pair

    fresh: Any = itertools.combinations(range(len(sets)), 2)
    for _ in range(len(sets) - 1):
        for pair in fresh:
            if sets[pair[0]].isdisjoint(sets[pair[1]]):
                continue
            c = evaluate(pair)
            if c is not None:
                candidates.append(c)
        if not candidates:  # no shared index qualifies: outer products
            every = map(evaluate, itertools.combinations(range(len(sets)), 2))
            candidates = [c for c in every if c is not None]
            if not candidates:
                path.append(tuple(range(len(sets))))
                break
        best_key, (bx, by) = min(candidates, key=lambda c: c[0])
        # keep the candidates disjoint from the chosen pair, renumbered for the shorter list
        moved = []
        for key, (x, y) in candidates:
            if x in (bx, by) or y in (bx, by):
                continue
            moved.append((key, (x - (x > bx) - (x > by), y - (y > bx) - (y > by))))
        candidates = moved
        sets = _contract((bx, by), sets, output)[1]
        last = len(sets) - 1
        fresh = ((i, last) for i in range(last))
        path.append((bx, by))
        spent += best_key[1]
    return path


def _optimal(sets: list[set], output: set, sizes: dict, limit: int) -> list[tuple[int, ...]]:
    states: list[tuple[int, list, list[set]]] = [(0, [], sets)]
    n = len(sets)
    for it in range(n - 1):
        nxt = []
        for cost, steps, remaining in states:
            for pair in itertools.combinations(range(n - it), 2):
                result, new_sets, removed, involved = _contract(pair, remaining, output)
                if _size(result, sizes) > limit:
                    continue
                nxt.append((cost + _flops(involved, bool(removed), 2, sizes), [*steps, pair], new_sets))
        if not nxt:
            return [*min(states, key=lambda s: s[0])[1], tuple(range(n - it))]
        states = nxt
    return min(states, key=lambda s: s[0])[1]


def _parse(subscripts: Any, operands: Sequence[Any]) -> tuple[list[str], str, list[tuple[int, ...]]]:
    """Input terms and output term (single letters, ellipses expanded) and the operand shapes."""
    if not isinstance(subscripts, str):  # interleaved (operand, sublist, ..., [output]) form
        items = [subscripts, *operands]
        k = len(items) // 2
        ops, subs = items[0:2 * k:2], items[1:2 * k:2]
        out_list = items[-1] if len(items) % 2 else None

        def letters(sub: Sequence[Any]) -> str:
            return "".join("..." if s is Ellipsis else SYMBOLS[int(s)] for s in sub)

        subscripts = ",".join(letters(s) for s in subs)
        if out_list is not None:
            subscripts += "->" + letters(out_list)
        operands = ops
    shapes = [_shape_of(x) for x in operands]
    spec = subscripts.replace(" ", "")
    for ch in spec:
        if ch not in ".,->" and ch not in SYMBOLS:
            raise ValueError(f"einsum_path: character {ch!r} is not a valid subscript")
    if spec.count("->") > 1 or spec.count("-") != spec.count(">") or spec.count("-") != spec.count("->"):
        raise ValueError("einsum_path: subscripts can contain only one '->'")
    lhs, arrow, rhs = spec.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum_path: {len(terms)} subscript terms for {len(shapes)} operands")
    used = set(spec) - set(".,->")
    spare = "".join(c for c in SYMBOLS if c not in used)
    longest = 0
    for k, (term, shape) in enumerate(zip(terms, shapes)):
        if "." in term:
            if term.count(".") != 3 or "..." not in term:
                raise ValueError(f"einsum_path: invalid ellipsis in {term!r}")
            n = len(shape) - (len(term) - 3)
            if n < 0:
                raise ValueError(f"einsum_path: operand {k} has too few dimensions for {term!r}")
            longest = max(longest, n)
            terms[k] = term.replace("...", spare[len(spare) - n:] if n else "")
    ell = spare[len(spare) - longest:] if longest else ""
    flat = "".join(terms)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        once = "".join(c for c in sorted(set(flat)) if flat.count(c) == 1 and c not in ell)
        out = ell + once
    for c in out:
        if out.count(c) != 1:
            raise ValueError(f"einsum_path: output subscript {c!r} appears more than once")
        if c not in flat:
            raise ValueError(f"einsum_path: output subscript {c!r} does not appear in the inputs")
    for k, (term, shape) in enumerate(zip(terms, shapes)):
        if len(term) != len(shape):
            raise ValueError(f"einsum_path: subscripts {term!r} do not match operand {k} of rank "
                             f"{len(shape)}")
    return terms, out, shapes


def einsum_path(subscripts: Any, *operands: Any, optimize: Any = "greedy",
                einsum_call: bool = False) -> tuple[list, str]:
    """The contraction order for ``einsum(subscripts, *operands)`` and a report, as
    ``numpy.einsum_path``: ``(["einsum_path", (i, j), ...], report)``.

    ``optimize``: ``"greedy"`` (also ``True``), ``"optimal"``, ``False``/``None`` (one step), an
    explicit ``["einsum_path", ...]`` list, or ``(name, memory_limit)``. Operands may be arrays or
    anything with a ``shape``; only their shapes are used, so this works on traced values too.
    """
    del einsum_call
    kind: Any = optimize
    limit = None
    explicit = None
    if kind is True:
        kind = "greedy"
    if kind is None:
        kind = False
    if kind is False or isinstance(kind, str):
        pass
    elif len(kind) and kind[0] == "einsum_path":
        explicit = [tuple(p) for p in kind[1:]]
    elif len(kind) == 2 and isinstance(kind[0], str) and isinstance(kind[1], (int, float)):
        limit, kind = int(kind[1]), kind[0]
    else:
        raise TypeError(f"einsum_path: did not understand optimize={optimize!r}")
    terms, out, shapes = _parse(subscripts, operands)
    sizes: dict[str, int] = {}
    for k, (term, shape) in enumerate(zip(terms, shapes)):
        for c, d in zip(term, shape):
            if c not in sizes or sizes[c] == 1:
                sizes[c] = d
            elif d not in (1, sizes[c]):
                raise ValueError(f"einsum_path: size of label {c!r} for operand {k} ({d}) does not match "
                                 f"the previous terms ({sizes[c]})")
    sets = [set(t) for t in terms]
    out_set = set(out)
    indices = set("".join(terms))
    largest = max(_size(t, sizes) for t in [*terms, out])
    limit = largest if limit is None else limit
    if explicit is not None:
        path = explicit
    elif kind is False or len(terms) in (1, 2) or indices == out_set:
        path = [tuple(range(len(terms)))]
    elif kind == "greedy":
        path = _greedy(sets, out_set, sizes, limit)
    elif kind == "optimal":
        path = _optimal(sets, out_set, sizes, limit)
    else:
        raise KeyError(f"einsum_path: unknown path type {kind!r}")
    report = _report(terms, out, sizes, path)
    return ["einsum_path", *path], report


def _report(terms: list[str], out: str, sizes: dict, path: list[tuple[int, ...]]) -> str:
    remaining_terms = list(terms)
    sets = [set(t) for t in terms]
    costs, scales, inter, rows = [], [], [], []
    for step, inds in enumerate(path):
        inds = tuple(sorted(inds, reverse=True))
        result, sets, removed, involved = _contract(inds, sets, set(out))
        costs.append(_flops(involved, bool(removed), len(inds), sizes))
        scales.append(len(involved))
        inter.append(_size(result, sizes))
        taken = [remaining_terms.pop(i) for i in inds]
        if step == len(path) - 1:
            res = out
        else:
            res = "".join(c for _, c in sorted((sizes[c], c) for c in result))
        remaining_terms.append(res)
        rows.append((scales[-1], ",".join(taken) + "->" + res, ",".join(remaining_terms) + "->" + out))
    if len(remaining_terms) != 1:
        raise RuntimeError(f"einsum_path: invalid path; {len(remaining_terms) - 1} more operands have to be "
                           f"contracted")
    indices = set("".join(terms))
    inner = sum(len(set(t)) for t in terms) - len(indices) > 0
    naive = _flops(indices, inner, len(terms), sizes)
    optimized = sum(costs) + 1
    lines = [f"  Complete contraction:  {','.join(terms)}->{out}",
             f"         Naive scaling:  {len(indices)}",
             f"     Optimized scaling:  {max(scales)}",
             f"      Naive FLOP count:  {naive:.3e}",
             f"  Optimized FLOP count:  {optimized:.3e}",
             f"   Theoretical speedup:  {naive / optimized:3.3f}",
             f"  Largest intermediate:  {max(inter):.3e} elements",
             "-" * 74,
             f"{'scaling':>6} {'current':>24} {'remaining':>40}",
             "-" * 74]
    lines += [f"{s:>4}    {cur:>24} {rem:>40}" for s, cur, rem in rows]
    return "\n".join(lines)


__all__ = ["einsum_path"]
