"""Symbolic dimensions: canonical forms, evaluation, broadcasting and binding errors."""

import pytest

from ember._src import shapes as sh
from ember.errors import ShapeError

batch, seq, time = sh.axis("batch"), sh.axis("seq"), sh.axis("time")


def test_canonical_forms_compare_equal():
    assert batch * seq == seq * batch
    assert (batch + 1) * 2 == 2 * batch + 2
    assert batch + seq - batch == seq
    assert (batch * seq) * 4 == batch * (4 * seq)
    assert hash(batch * seq) == hash(seq * batch)
    assert batch * 0 == 0 and batch - batch == 0


def test_floordiv_mod_max_and_evaluate():
    env = {"batch": 7, "seq": 12}
    assert sh.evaluate(sh.floordiv(batch * 4, 4), env) == 7
    assert sh.floordiv(batch * 4, 2) == batch * 2
    assert sh.evaluate(sh.floordiv(seq, 5), env) == 12 // 5
    assert sh.evaluate(sh.mod(seq, 5), env) == 12 % 5
    assert sh.evaluate(sh.dmax(batch, seq), env) == 12
    assert sh.evaluate(batch * seq + 3, env) == 87
    assert sh.evaluate_shape((batch, 3, seq), env) == (7, 3, 12)



def test_floordiv_by_a_sum_of_axes():
    """An integer multiple of a sum divides exactly (the flat index of a ``past + seq`` cache);
    anything else stays an opaque floordiv that evaluates like Python's ``//``."""
    total = batch + seq
    assert sh.floordiv(total * 24, total) == 24 and sh.floordiv(1536 * batch + 1536 * seq, 64 * total) == 24
    assert sh.floordiv(total, total) == 1
    for a in (total * 3 + 1, 2 * batch + seq, total * 0 + 5):
        q = sh.floordiv(a, total)
        for env in ({"batch": 7, "seq": 12}, {"batch": 1, "seq": 1}, {"batch": 40, "seq": 3}):
            assert sh.evaluate(q, env) == sh.evaluate(a, env) // sh.evaluate(total, env), (a, env)

def test_floordiv_by_a_polynomial_that_divides_exactly():
    """A polynomial multiple of a sum divides to the quotient (torch records Funnel's attention
    sizes as ``(2 s^2 - s) // (2 s - 1)``); a division that is not exact stays an opaque floordiv,
    and each evaluates like Python's ``//`` wherever the divisor is not 0."""
    p = sh.floordiv(seq + 1, 2)
    cases = [(2 * seq * seq - seq, 2 * seq - 1, seq), (batch * seq * seq - batch * time * time, seq - time,
                                                        batch * seq + batch * time),
             (seq * seq - 1, seq + 1, seq - 1), (p * (2 * p + seq), p, 2 * p + seq),
             ((p + 1) * (seq + batch) * 3, 3 * seq + 3 * batch, p + 1)]
    for a, b, want in cases:
        assert sh.floordiv(a, b) == want, (a, b)
    for a, b in ((seq * seq + 1, seq + 1), (3 * seq + 2, seq + 1), (2 * p + seq, p), (batch * seq, seq + 1)):
        q = sh.floordiv(a, b)
        assert isinstance(q, sh.DimExpr) and "floordiv" in str(q)
        for env in ({"batch": 7, "seq": 12, "time": 3}, {"batch": 1, "seq": 1, "time": 5},
                    {"batch": 4, "seq": 9, "time": 2}):
            assert sh.evaluate(q, env) == sh.evaluate(a, env) // sh.evaluate(b, env), (a, b, env)
    for a, b, want in cases:
        for env in ({"batch": 7, "seq": 12, "time": 3}, {"batch": 2, "seq": 5, "time": 1}):
            assert sh.evaluate(want, env) == sh.evaluate(a, env) // sh.evaluate(b, env), (a, b, env)


def test_broadcast_unifies_names_and_reports_conflicts():
    assert sh.broadcast_shapes((batch, 512), (1, 512)) == (batch, 512)
    assert sh.broadcast_shapes((batch, 1), (seq,)) == (batch, seq)
    with pytest.raises(ShapeError, match=r"axis 'batch' vs axis 'time'"):
        sh.broadcast_shapes((batch, 512), (time, 512), op="add")
    with pytest.raises(ShapeError, match=r"add"):
        sh.broadcast_shapes((batch, 512), (time, 512), op="add")
    with pytest.raises(ShapeError, match="3"):
        sh.broadcast_shapes((2, 3), (4,))


def test_bind_axes_conflicts_name_arguments():
    env = sh.bind_axes([("x", (batch, 512), (32, 512)), ("mask", (batch, seq), (32, 10))])
    assert env == {"batch": 32, "seq": 10}
    with pytest.raises(ShapeError, match="axis 'batch' has conflicting sizes: x has 32, mask has 64"):
        sh.bind_axes([("x", (batch, 512), (32, 512)), ("mask", (batch, seq), (64, 10))])


def test_normalize_axis_errors():
    assert sh.normalize_axis(-1, 3) == 2
    with pytest.raises(ShapeError, match="axis 3"):
        sh.normalize_axis(3, 3)


def test_symbolic_size_and_strings():
    assert sh.size((batch, seq, 2)) == 2 * batch * seq
    assert sh.shape_str((batch, 512)) == "(batch, 512)"


def test_symbolic_max_bounds_floordiv_atoms_by_their_arguments():
    # a floordiv of a negative expression was taken to be at least 1 like an axis: max(-(-h // 2)
    # - 1, 0) simplified to 0, but it is 4 at h = 9 (a padded length written as -(-n // s))
    h = sh.axis("h")
    m = sh.dmax(-sh.floordiv(-h, 2) - 1, 0)
    assert [sh.evaluate(m, {"h": v}) for v in (1, 2, 9)] == [max(-(-v // 2) - 1, 0) for v in (1, 2, 9)]
    m = sh.dmax(sh.floordiv(h, 2), 1)  # h // 2 is 0 at h = 1
    assert [sh.evaluate(m, {"h": v}) for v in (1, 2, 7)] == [1, 1, 3]
    # what the bounds do decide
    assert sh.dmax(h - 1, 0) == h - 1
    assert sh.dmax(sh.floordiv(h + 1, 2), 1) == sh.floordiv(h + 1, 2)
    assert sh.dmax(sh.mod(h, 3) + 2, 1) == sh.mod(h, 3) + 2


def test_bounds_and_max_over_axis_ranges():
    """``bounds`` by interval arithmetic over the axes' ranges, against every binding of a grid; a
    ``max``/``min`` that no range decides stays an opaque atom that evaluates like Python's."""
    s, b = sh.axis("s"), sh.axis("b")
    ranges = {"s": (1, 2048), "b": (2, None)}
    for d in (2048 - s, 3 * s - 2 * b + 7, s * b - s, 5 - s * s):
        lo, hi = sh.bounds(d, ranges)
        vals = [sh.evaluate(d, {"s": i, "b": j}) for i in (1, 2, 1000, 2048) for j in (2, 3, 50)]
        assert lo is None or lo <= min(vals)
        assert hi is None or hi >= max(vals)
    assert sh.bounds(2048 - s, ranges) == (0, 2047)
    assert sh.bounds(s * b, ranges) == (2, None)
    assert sh.bounds(sh.floordiv(s, 2), ranges) == (None, None)
    # MPT's position bias: max(0, 2048 - seq) is 2048 - seq for every seq of the range
    assert sh.dmax(0, 2048 - s, ranges) == 2048 - s
    assert 2048 - sh.dmax(0, 2048 - s, ranges) == s
    assert sh.dmin(2048, s, ranges) == s and sh.dmin(s, 4096, ranges) == s
    undecided = sh.dmax(0, 100 - s, ranges)  # negative past s = 100: not decided
    assert [sh.evaluate(undecided, {"s": v}) for v in (1, 99, 100, 2048)] == [99, 1, 0, 0]
    assert sh.is_symbolic(sh.dmax(0, 2048 - s)) and sh.dmax(0, 2048 - s) != 2048 - s  # no ranges


def test_floordiv_moves_whole_multiples_out():
    """``(b q + r) // b`` is ``q + r // b``: coefficients keep only their remainders in [0, b), so
    ConvNeXt's stem size ``1 + (h - 4) // 4`` and its patch grid ``h // 4`` are one expression, and
    ``(x // p) // q`` is ``x // (p q)``. Every form evaluates like Python's ``//`` over a grid."""
    h, w = sh.axis("h"), sh.axis("w")
    assert 1 + sh.floordiv(h - 4, 4) == sh.floordiv(h, 4)
    assert sh.floordiv(1 + sh.floordiv(h - 1, 8), 4) == sh.floordiv(h + 7, 32)
    forms = [(sh.floordiv(h - 4, 4), lambda a, b: (a - 4) // 4),
             (sh.floordiv(-3 * h + 5, 4), lambda a, b: (-3 * a + 5) // 4),
             (sh.floordiv(6 * h - 7 * w + 1, 4), lambda a, b: (6 * a - 7 * b + 1) // 4),
             (sh.floordiv(sh.floordiv(h - 1, 2), 2) + 1, lambda a, b: ((a - 1) // 2) // 2 + 1),
             (sh.floordiv(h * w - 9, 3), lambda a, b: (a * b - 9) // 3)]
    for expr, py in forms:
        for a in range(1, 30):
            for b in (1, 2, 7):
                assert sh.evaluate(expr, {"h": a, "w": b}) == py(a, b), (expr, a, b)


def test_a_size_padded_to_a_multiple_divides_exactly():
    """Swin pads a map of ``a`` rows to ``a + (q - a % q) % q`` and views it as windows of ``q``:
    the constant of a mod's argument keeps its remainder and an inner ``a % q`` reads as ``a``, so
    the padding is ``(-a) % q``; a sum where ``k (e % q)`` cancels against ``k e`` writes the mod out
    (``q ceil(a / q)``), so the padded size divides by ``q`` and by its own quotient exactly. Every
    form evaluates like Python's ``%`` and ``//`` over a grid."""
    h, w = sh.axis("h"), sh.axis("w")
    a = sh.floordiv(h, 4)
    pad = sh.mod(4 - sh.mod(a, 4), 4)
    assert pad == sh.mod(-a, 4)
    padded = a + pad
    assert padded == 4 * sh.floordiv(h + 12, 16)
    assert sh.floordiv(padded, sh.floordiv(padded, 4)) == 4
    assert sh.mod(padded, 4) == 0 and padded - sh.mod(h, 4) != padded
    assert sh.mod(h, 4) - h == -4 * sh.floordiv(h, 4)
    forms = [(padded, lambda a, b: a // 4 + (4 - (a // 4) % 4) % 4),
             (pad, lambda a, b: (4 - (a // 4) % 4) % 4),
             (sh.mod(h + 9, 4), lambda a, b: (a + 9) % 4),
             (sh.mod(3 - sh.mod(h, 8), 4), lambda a, b: (3 - a % 8) % 4),
             (sh.mod(2 * h - sh.mod(w, 3), 3), lambda a, b: (2 * a - b % 3) % 3),
             (h - sh.mod(h, 5), lambda a, b: a - a % 5),
             (w + sh.mod(-w - h, 6) + h, lambda a, b: b + (-b - a) % 6 + a),
             (sh.mod(h, 4) + sh.mod(w, 4), lambda a, b: a % 4 + b % 4)]
    for expr, py in forms:
        for x in range(1, 40):
            for y in (1, 2, 7, 12):
                assert sh.evaluate(expr, {"h": x, "w": y}) == py(x, y), (expr, x, y)


def _expr_strategy():
    """Random size expressions over ``h`` and ``w``: ``+ - *`` with small constants, ``//`` and ``%``
    by positive constants, as ``(symbolic, python)`` pairs built in lockstep."""
    from hypothesis import strategies as st

    leaves = st.sampled_from(["h", "w"]).map(lambda n: (sh.axis(n), lambda e, n=n: e[n])) | \
        st.integers(-6, 9).map(lambda c: (c, lambda e, c=c: c))

    def extend(children):
        two = st.tuples(children, children)
        const = st.integers(1, 8)
        return st.one_of(
            two.map(lambda p: (p[0][0] + p[1][0], lambda e, p=p: p[0][1](e) + p[1][1](e))),
            two.map(lambda p: (p[0][0] - p[1][0], lambda e, p=p: p[0][1](e) - p[1][1](e))),
            st.tuples(children, st.integers(-3, 4)).map(
                lambda p: (p[0][0] * p[1], lambda e, p=p: p[0][1](e) * p[1])),
            st.tuples(children, const).map(
                lambda p: (sh.floordiv(p[0][0], p[1]), lambda e, p=p: p[0][1](e) // p[1])),
            st.tuples(children, const).map(
                lambda p: (sh.mod(p[0][0], p[1]), lambda e, p=p: p[0][1](e) % p[1])))

    return st.recursive(leaves, extend, max_leaves=8)


def test_canonical_forms_evaluate_like_python():
    """Property: whatever canonical form the algebra picks (whole multiples moved out of a floor
    division, a mod's constant reduced, a mod written out where it cancels), the expression
    evaluates like the same Python arithmetic at every binding tried."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=400, deadline=None)
    @given(_expr_strategy(), st.lists(st.tuples(st.integers(1, 60), st.integers(1, 60)), min_size=1,
                                      max_size=6))
    def check(pair, bindings):
        expr, py = pair
        for h, w in bindings:
            assert sh.evaluate(expr, {"h": h, "w": w}) == py({"h": h, "w": w}), (expr, h, w)

    check()
