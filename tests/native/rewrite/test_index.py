"""Index expression algebra: simplification with ranges, reshape round trips, loop merging."""

from __future__ import annotations

import itertools

import numpy as np

from ember._src.native.scheduling import index as ixm
from ember._src.native.scheduling.index import Ix


def _eval(e: Ix, env: dict[str, int]) -> int:
    total = e.const
    for t, c in e.terms.items():
        if isinstance(t, str):
            v = env[t]
        elif isinstance(t, ixm.FloorDiv):
            v = _eval(t.e, env) // t.k
        elif isinstance(t, ixm.Mod):
            v = _eval(t.e, env) % t.k
        elif isinstance(t, ixm.Clamp):
            v = min(max(_eval(t.e, env), t.lo), t.hi)
        else:
            raise AssertionError(t)
        total += c * v
    return total


def test_affine_arithmetic_and_hashing():
    i, j = Ix.var("d0"), Ix.var("d1")
    e = i * 3 + j - 2
    assert e.terms == {"d0": 3, "d1": 1} and e.const == -2
    assert e == (j + i * 3) - 2 and hash(e) == hash((j + i * 3) - 2)
    assert (e - e).is_const() and (e - e).const == 0
    assert i.is_var() == "d0" and e.is_var() is None
    assert (5 - i).terms == {"d0": -1} and (5 - i).const == 5


def test_div_mod_simplify_with_ranges():
    r = {"d0": (0, 3), "d1": (0, 7)}
    flat = Ix.var("d0") * 8 + Ix.var("d1")
    assert ixm.floordiv(flat, 8, r) == Ix.var("d0")
    assert ixm.mod(flat, 8, r) == Ix.var("d1")
    assert ixm.floordiv(Ix.var("d1"), 16, r) == Ix.lit(0)
    opaque = ixm.floordiv(flat, 3, r)
    assert isinstance(next(iter(opaque.terms)), ixm.FloorDiv)
    assert ixm.clamp(Ix.var("d1"), 0, 7, r) == Ix.var("d1")
    assert isinstance(next(iter(ixm.clamp(Ix.var("d1") - 2, 0, 7, r).terms)), ixm.Clamp)


def test_div_mod_split_a_coefficient_the_divisor_does_not_divide():
    """``(385 a + i) // 384`` with ``a + i < 384`` is ``a`` and the remainder ``a + i``: Longformer's
    band read (rows of ``3 w + 1`` over ``w x 3 w`` blocks) becomes contiguous. Every value of the
    simplified forms is checked against Python's ``//`` and ``%``, also where the ranges do not
    prove it and the division stays opaque, and for a negative coefficient."""
    for ra, ri in (((0, 127), (0, 256)), ((0, 127), (0, 300)), ((0, 5), (0, 1000))):
        r = {"a": ra, "i": ri}
        for ca, ci in ((385, 1), (-385, 1), (769, 2), (1, 1)):
            e = Ix.var("a") * ca + Ix.var("i") * ci + (385 if ca < 0 else 0) * 128
            q, m = ixm.floordiv(e, 384, r), ixm.mod(e, 384, r)
            for a in range(ra[0], ra[1] + 1, 7):
                for i in range(ri[0], ri[1] + 1, 13):
                    v = _eval(e, {"a": a, "i": i})
                    assert _eval(q, {"a": a, "i": i}) == v // 384 and _eval(m, {"a": a, "i": i}) == v % 384
    r = {"a": (0, 127), "i": (0, 256)}
    e = Ix.var("a") * 385 + Ix.var("i")
    assert ixm.floordiv(e, 384, r) == Ix.var("a") and ixm.mod(e, 384, r) == Ix.var("a") + Ix.var("i")


def test_reshape_round_trip_collapses_to_affine():
    # reading a (4, 6) buffer through reshape -> (24,) -> (2, 3, 4) collapses back to the flat index
    r = {"d0": (0, 1), "d1": (0, 2), "d2": (0, 3)}
    idx = [Ix.var("d0"), Ix.var("d1"), Ix.var("d2")]
    flat = ixm.linearize(idx, (2, 3, 4))
    src = ixm.delinearize(flat, (4, 6), r)
    offset = ixm.linearize(src, (4, 6))
    assert offset == flat and not offset.opaques()


def test_reshape_round_trip_over_a_sum_of_axes():
    """A ``(layers, heads, past + seq, d)`` cache read through its flat index (a stack of caches,
    imported as reshapes and concatenates) collapses back to affine indices: no per-element
    division by the dynamic length remains."""
    from ember._src import shapes as sh

    total = sh.axis("past") + sh.axis("seq")
    shape = (2, 12, total, 64)
    r = {"d0": (0, 1), "d1": (0, 11), "d2": (0, total - 1), "d3": (0, 63)}
    idx = [Ix.var(d) for d in ("d0", "d1", "d2", "d3")]
    flat = ixm.linearize(idx, shape)
    back = ixm.delinearize(flat, shape, r)
    assert back == idx and not any(e.opaques() for e in back)
    assert ixm.mod(flat, total * 64, r) == Ix.var("d2") * 64 + Ix.var("d3")


def test_delinearize_matches_numpy_everywhere():
    cases = [((6, 4), (3, 8)), ((5, 3), (15,)), ((2, 3, 4), (4, 3, 2)), ((12,), (2, 2, 3))]
    for shape_out, shape_in in cases:
        names = [f"d{k}" for k in range(len(shape_out))]
        r = {n: (0, s - 1) for n, s in zip(names, shape_out)}
        flat = ixm.linearize([Ix.var(n) for n in names], shape_out)
        src = ixm.delinearize(flat, shape_in, r)
        for point in itertools.product(*(range(s) for s in shape_out)):
            env = dict(zip(names, point))
            want = np.unravel_index(np.ravel_multi_index(point, shape_out), shape_in)
            assert tuple(_eval(e, env) for e in src) == tuple(int(w) for w in want)


def test_mergeable_groups():
    # identity access on (4, 5, 6): all three dims merge; a broadcast along dim 1 splits the nest
    dims, sizes = ["d0", "d1", "d2"], [4, 5, 6]
    ident = ixm.linearize([Ix.var(d) for d in dims], sizes)
    assert ixm.mergeable_groups(dims, sizes, [ident]) == [[0, 1, 2]]
    bcast = Ix.var("d0") * 6 + Ix.var("d2")
    assert ixm.mergeable_groups(dims, sizes, [ident, bcast]) == [[0], [1], [2]]
    row = Ix.var("d0")  # reads only the row: dims 1, 2 still merge
    assert ixm.mergeable_groups(dims, sizes, [ident, row]) == [[0], [1, 2]]
    merged = ixm.merge_vars(ident, [["d0"], ["d1", "d2"]], ["m0", "m1"])
    assert merged.terms == {"m0": 30, "m1": 1}


def test_mergeable_groups_leading_unit_dims():
    """Size-1 dims merge into the dim after them whatever their coefficients (their index is
    always 0), so a ``1 x 5 x 6`` map is one loop of 30 that can be split over threads; the merged
    index reads the elements the unmerged nest reads, in the same order."""
    dims, sizes = ["d0", "d1", "d2"], [1, 5, 6]
    ident = ixm.linearize([Ix.var(d) for d in dims], sizes)
    bias = Ix.var("d2")  # a row vector broadcast over d0 and d1: d1 and d2 do not merge
    assert ixm.mergeable_groups(dims, sizes, [ident]) == [[0, 1, 2]]
    assert ixm.mergeable_groups(dims, sizes, [ident, bias]) == [[0, 1], [2]]
    assert ixm.mergeable_groups(["d0", "d1"], [1, 1], [Ix.var("d0") * 7 + Ix.var("d1")]) == [[0, 1]]
    assert ixm.mergeable_groups(["d0", "d1"], [5, 1], [Ix.var("d0") * 3 + Ix.var("d1")]) == [[0], [1]]
    for e in (ident, bias, Ix.var("d0") * 11 + Ix.var("d1") * 6 + Ix.var("d2")):
        groups = ixm.mergeable_groups(dims, sizes, [ident, bias, e])
        names = [f"m{i}" for i in range(len(groups))]
        m = ixm.merge_vars(e, [[dims[i] for i in g] for g in groups], names)
        gsizes = [int(np.prod([sizes[i] for i in g])) for g in groups]
        got = [sum(m.terms.get(nm, 0) * x for nm, x in zip(names, idx)) + m.const
               for idx in np.ndindex(*gsizes)]  # the merged loops visit the nest's order
        want = [sum(e.terms.get(d, 0) * x for d, x in zip(dims, idx)) + e.const for idx in np.ndindex(*sizes)]
        assert got == want


def test_render():
    e = Ix.var("d0") * 4 - Ix.var("d1") + 3
    assert ixm.render(e, {"d0": "i", "d1": "j"}, {}) == "4*i - j + 3"
    assert ixm.render(Ix.lit(0), {}, {}) == "0"
