"""Contractions against NumPy: matmul broadcasting and 1-D rules, dot/vdot/inner/outer/tensordot,
einsum (explicit/implicit, ellipsis, diagonals, traces, sublists), dtype promotion, errors that name
the mismatched dims, symbolic shapes, and equality under ``jit``."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
import ember.numpy as jnp
from ember._src import shapes as sh
from ember._src.core import ShapedArray
from ember._src.program import trace_to_program
from ember.errors import ShapeError
from tests.numpy.helpers import assert_jit_close

rng = np.random.default_rng(2)


def _rand(shape, dtype=np.float32):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        return rng.integers(-3, 4, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _check(f, g, *args, rtol=None, jit=True):
    got = f(*args)
    want = g(*args)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    tol = rtol if rtol is not None else (1e-5 if got.dtype in (np.float32, np.complex64) else 1e-12)
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)
    if jit:
        jitted = ember.jit(f)(*args)
        assert jitted.dtype == got.dtype
        assert_jit_close(jitted, got)
    return got


MATMUL_SHAPES = [
    ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
    ((2, 3), (5, 3, 4)), ((5, 2, 3), (5, 3, 4)), ((5, 1, 2, 3), (4, 3, 2)), ((1, 2, 3), (7, 3, 4)),
    ((6, 1, 2, 3), (1, 5, 3, 4)), ((3,), (2, 3, 4)), ((2, 4, 3), (3,)), ((0, 2, 3), (3, 4)),
    ((2, 0), (0, 3)), ((2, 3), (3, 0)), ((1, 1, 2, 3), (3, 1)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul_matches_numpy(sa, sb):
    _check(jnp.matmul, np.matmul, _rand(sa), _rand(sb))


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int8, np.complex64, np.bool_])
def test_matmul_dtypes(dtype):
    a, b = _rand((2, 3, 4), dtype), _rand((4, 5), dtype)
    got = _check(jnp.matmul, np.matmul, a, b)
    assert got.dtype == np.dtype(dtype)


def test_promotion_without_broadcasting():
    a, b = _rand((2, 3), np.float32), _rand((3, 4), np.float64)
    assert jnp.matmul(a, b).dtype == np.float64
    assert jnp.dot(_rand((3,), np.int32), _rand((3,), np.float32)).dtype == np.float32
    assert jnp.dot(_rand((3,), np.float16), 2.0).dtype == np.float16  # weak scalars yield
    assert jnp.dot(_rand((3,), np.int8), _rand((3,), np.int16)).dtype == np.int16
    assert jnp.einsum("i,i->", _rand((3,), np.int32), _rand((3,), np.float64)).dtype == np.float64
    got = jnp.matmul(_rand((2, 3), np.int8), _rand((3, 2), np.int8), preferred_element_type=np.int32)
    assert got.dtype == np.int32


def test_matmul_operator_and_errors():
    a, b = jnp.asarray(_rand((2, 3))), jnp.asarray(_rand((3, 4)))
    np.testing.assert_allclose(a @ b, np.asarray(a) @ np.asarray(b), rtol=1e-5)
    with pytest.raises(ShapeError, match=r"size 3.*size 5"):
        jnp.matmul(_rand((2, 3)), _rand((5, 4)))
    with pytest.raises(ShapeError, match=r"\(2, 3\).*\(5, 4\)"):
        jnp.matmul(_rand((2, 3)), _rand((5, 4)))
    with pytest.raises(ShapeError, match=r"size 2.*size 3"):
        jnp.matmul(_rand((2, 4, 3)), _rand((3, 3, 5)))
    with pytest.raises(ShapeError, match="0-d"):
        jnp.matmul(_rand(()), _rand((3,)))
    with pytest.raises(ShapeError, match=r"size 3.*size 4"):
        jnp.matmul(_rand((3,)), _rand((4,)))


def test_matmul_symbolic_batch():
    batch, seq = sh.axis("batch"), sh.axis("seq")

    def f(x, w, y):
        return [jnp.matmul(x, w), jnp.matmul(x, y), jnp.einsum("bsd,de->bse", x, w)]

    prog, _ = trace_to_program(f, [ShapedArray((batch, seq, 8), np.float32), ShapedArray((8, 3), np.float32),
                                   ShapedArray((batch, 8, seq), np.float32)])
    assert [v.aval.shape for v in prog.outvars] == [(batch, seq, 3), (batch, seq, seq), (batch, seq, 3)]
    with pytest.raises(ShapeError, match="'batch'.*'seq'|'seq'.*'batch'"):
        trace_to_program(lambda x, y: [jnp.matmul(x, y)],
                         [ShapedArray((batch, 2, 8), np.float32), ShapedArray((seq, 8, 3), np.float32)])


@pytest.mark.parametrize("sa,sb", [((), ()), ((), (3,)), ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)),
                                   ((2, 3), (3, 4)), ((5, 2, 3), (4, 3, 2)), ((2, 3), (2, 3, 4)),
                                   ((0,), (0,))])
def test_dot(sa, sb):
    _check(jnp.dot, np.dot, _rand(sa, np.float64), _rand(sb, np.float64))


def test_dot_errors():
    with pytest.raises(ShapeError, match=r"\(2, 3\).*\(4, 5\)"):
        jnp.dot(_rand((2, 3)), _rand((4, 5)))


@pytest.mark.parametrize("sa,sb", [((), (2,)), ((3,), (3,)), ((2, 3), (4, 3)), ((2, 3, 4), (5, 4)),
                                   ((2, 0), (3, 0))])
def test_inner(sa, sb):
    _check(jnp.inner, np.inner, _rand(sa, np.float64), _rand(sb, np.float64))
    with pytest.raises(ShapeError, match="last"):
        jnp.inner(_rand((2, 3)), _rand((2, 4)))


@pytest.mark.parametrize("sa,sb", [((3,), (4,)), ((2, 3), (4,)), ((), (2,)), ((0,), (3,))])
def test_outer(sa, sb):
    _check(jnp.outer, np.outer, _rand(sa, np.float64), _rand(sb, np.float64))
    _check(jnp.outer, np.outer, _rand(sa, np.bool_), _rand(sb, np.bool_))


def test_vdot():
    _check(jnp.vdot, np.vdot, _rand((2, 3), np.float64), _rand((6,), np.float64))
    _check(jnp.vdot, np.vdot, _rand((4,), np.complex128), _rand((2, 2), np.complex128))
    with pytest.raises(ShapeError, match="elements"):
        jnp.vdot(_rand((3,)), _rand((4,)))


@pytest.mark.parametrize("sa,sb,axes", [((2, 3, 4), (3, 4, 5), 2), ((2, 3), (3, 4), 1), ((2, 3), (4, 5), 0),
                                        ((2, 3, 4), (4, 3, 2), ([1, 0], [1, 2])), ((3, 4), (4, 3), (0, 1)),
                                        ((2, 3, 4), (4, 2), ([-1, 0], [0, -1])), ((3,), (3,), 1)])
def test_tensordot(sa, sb, axes):
    _check(lambda a, b: jnp.tensordot(a, b, axes), lambda a, b: np.tensordot(a, b, axes),
           _rand(sa, np.float64), _rand(sb, np.float64))


def test_tensordot_errors():
    with pytest.raises(ShapeError, match=r"axis 1 of a.*size 3.*axis 0 of b.*size 4"):
        jnp.tensordot(_rand((2, 3)), _rand((4, 5)), ([1], [0]))
    with pytest.raises(ShapeError):
        jnp.tensordot(_rand((2, 3)), _rand((3, 5)), 3)
    with pytest.raises(ShapeError):
        jnp.tensordot(_rand((2, 3)), _rand((3, 5)), ([0, 1], [0]))
    with pytest.raises(ValueError):
        jnp.tensordot(_rand((2, 3)), _rand((3, 5)), -1)


EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("ii", [(3, 3)]), ("ii->i", [(3, 3)]),
    ("ij->", [(2, 3)]), ("ij->ji", [(2, 3)]), ("ij", [(2, 3)]), ("ji", [(2, 3)]), ("i,i", [(3,), (3,)]),
    ("i,j->ij", [(3,), (4,)]), ("i,j", [(3,), (4,)]), ("...ij,...jk->...ik", [(5, 2, 3), (3, 4)]),
    ("bij,bjk->bki", [(2, 3, 4), (2, 4, 5)]), ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]),
    ("ab,ac,bc->", [(2, 3), (2, 4), (3, 4)]), ("iij->j", [(3, 3, 2)]), ("iii->i", [(3, 3, 3)]),
    ("...,...->...", [(1, 3), (2, 3)]), ("i...->...", [(2, 3, 4)]), ("...i", [(2, 3, 4)]),
    ("ijk,kji", [(2, 3, 4), (4, 3, 2)]), ("abc,cd,ae->bed", [(2, 3, 4), (4, 5), (2, 6)]),
    ("ij,ij->ij", [(2, 3), (2, 3)]), ("ij,ij->", [(2, 3), (2, 3)]), (",", [(), ()]), ("->", [()]),
    ("i,->i", [(3,), ()]), ("ij,jk,kl,lm->mi", [(2, 3), (3, 4), (4, 2), (2, 3)]),
    ("bqhd,bkhd->bhqk", [(2, 3, 4, 5), (2, 6, 4, 5)]), ("a...b,b...c->...ac", [(2, 3, 4), (4, 3, 5)]),
    ("ij,jk->ik", [(0, 3), (3, 4)]), ("ij,jk->ik", [(2, 0), (0, 4)]), ("Ab,bA->A", [(3, 2), (2, 3)]),
    ("ii,ij->j", [(3, 3), (3, 4)]),
]


@pytest.mark.parametrize("spec,shapes", EINSUM_CASES)
def test_einsum_matches_numpy(spec, shapes):
    ops = [_rand(s, np.float64) for s in shapes]
    _check(lambda *o: jnp.einsum(spec, *o), lambda *o: np.einsum(spec, *o), *ops,
           jit=len(shapes) > 1)


def test_einsum_dtypes_and_sublists():
    a, b = _rand((2, 3), np.int32), _rand((3, 4), np.int32)
    got = jnp.einsum("ij,jk->ik", a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, a @ b)
    got = jnp.einsum("ij,jk->ik", a.astype(np.int8), b.astype(np.int8), preferred_element_type=np.int32)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, a @ b)
    c = _rand((4, 2), np.float32)
    got = jnp.einsum("ij,jk,kl->il", a.astype(np.float32), b.astype(np.float32), c,
                     preferred_element_type=np.float64)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, a @ b @ c, rtol=1e-5)
    x, y = _rand((2, 3), np.float64), _rand((3, 4), np.float64)
    np.testing.assert_allclose(jnp.einsum(x, [0, 1], y, [1, 2], [2, 0]),
                               np.einsum(x, [0, 1], y, [1, 2], [2, 0]), rtol=1e-12)
    np.testing.assert_allclose(jnp.einsum(x, [Ellipsis, 1], y, [1, 2]),
                               np.einsum(x, [Ellipsis, 1], y, [1, 2]), rtol=1e-12)
    z = _rand((3, 3), np.complex64)
    np.testing.assert_allclose(jnp.einsum("ij,jk", z, z), z @ z, rtol=1e-5)


def test_einsum_contracts_pairwise_with_dot_general():
    ops = [_rand((2, 3)), _rand((3, 4)), _rand((4, 5))]
    prog = ember.make_program(lambda a, b, c: jnp.einsum("ab,bc,cd->ad", a, b, c))(*ops)
    assert str(prog).count("dot_general") == 2
    # an index that occurs in one operand only is summed before contracting
    prog = ember.make_program(lambda a, b: jnp.einsum("ab,bc->c", a, b))(ops[0], ops[1])
    text = str(prog)
    assert text.index("reduce_sum") < text.index("dot_general")


def test_einsum_errors():
    a = _rand((2, 3))
    with pytest.raises(ShapeError, match=r"'j' has size 3 in operand 0 \(axis 1\) but size 4 in operand 1"):
        jnp.einsum("ij,jk", a, _rand((4, 5)))
    with pytest.raises(ShapeError, match="rank"):
        jnp.einsum("ijk", a)
    with pytest.raises(ValueError, match="operands"):
        jnp.einsum("ij,jk", a)
    with pytest.raises(ValueError, match="'z'"):
        jnp.einsum("ij->iz", a)
    with pytest.raises(ValueError, match="repeat"):
        jnp.einsum("ij->ii", a)
    with pytest.raises(ValueError):
        jnp.einsum("i1", a)
    with pytest.raises(ShapeError, match=r"'i' has size 2 in operand 0 \(axis 0\) but size 3"):
        jnp.einsum("ii", a)


# -- property test: random matmul broadcasting -----------------------------------------------


@st.composite
def _matmul_shapes(draw):
    nb = draw(st.integers(0, 3))
    batch = [draw(st.integers(1, 3)) for _ in range(nb)]
    a_batch = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, nb)):]
    b_batch = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, nb)):]
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    sa = (k,) if draw(st.integers(0, 4)) == 0 else (*a_batch, m, k)
    sb = (k,) if draw(st.integers(0, 4)) == 0 else (*b_batch, k, n)
    return sa, sb


@settings(max_examples=60, deadline=None)
@given(_matmul_shapes())
def test_property_matmul_broadcasting(shapes):
    sa, sb = shapes
    _check(jnp.matmul, np.matmul, _rand(sa, np.float64), _rand(sb, np.float64), jit=False)
