"""Array creation against NumPy: dtypes (Python defaults float32/int32, NumPy dtypes kept), shapes
(0-d, empty, symbolic), ``*_like`` on traced values, arange/linspace/logspace/geomspace, eye,
meshgrid and indices; each also under ``jit``."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src import shapes as sh
from ember._src.core import ShapedArray
from ember._src.program import trace_to_program
from ember.errors import DTypeError, ShapeError, TracerError

rng = np.random.default_rng(1)


def _same(got, want, dtype=None, rtol=0.0):
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    assert got.dtype == np.dtype(dtype if dtype is not None else np.asarray(want).dtype), got.dtype
    if rtol:
        np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(np.asarray(got), want)


# -- array ------------------------------------------------------------------------------------


def test_array_dtypes_and_copies():
    _same(jnp.array([1, 2, 3]), np.array([1, 2, 3]), np.int32)
    _same(jnp.array([1.0, 2.5]), np.array([1.0, 2.5]), np.float32)
    _same(jnp.array([[True, False]]), np.array([[True, False]]))
    _same(jnp.array(np.arange(3, dtype=np.int64)), np.arange(3), np.int64)  # NumPy dtype kept
    _same(jnp.array(np.float64(2.0)), np.float64(2.0))
    _same(jnp.array([1, 2], dtype=np.float64), np.array([1.0, 2.0]))
    _same(jnp.array(3.0), np.array(3.0), np.float32)
    assert jnp.array(3.0).weak_type and not jnp.array([3.0]).weak_type
    _same(jnp.array(np.ones(2), ndmin=3), np.ones((1, 1, 2)))
    _same(jnp.array(np.zeros((0, 2), np.float32)), np.zeros((0, 2), np.float32))
    a = jnp.array([1.0, 2.0])
    b = jnp.array(a)
    assert b is not a
    b.delete()  # a copy owns its buffer: deleting it leaves the original usable
    _same(a, np.array([1.0, 2.0], np.float32))
    assert jnp.array(a, copy=False) is a


def test_array_of_traced_values_under_jit():
    def f(x, y):
        return jnp.array([[x, y], [y, x]]), jnp.array([x, 2.0, 3.0])

    x, y = np.float32(1.5), np.float32(-2.0)
    m, v = ember.jit(f)(x, y)
    _same(m, np.array([[1.5, -2.0], [-2.0, 1.5]], np.float32))
    _same(v, np.array([1.5, 2.0, 3.0], np.float32))
    z = ember.jit(lambda t: jnp.array(t, dtype=np.int32, ndmin=2))(np.arange(3.0))
    _same(z, np.arange(3).reshape(1, 3), np.int32)
    with pytest.raises(ShapeError, match="inhomogeneous"):
        ember.jit(lambda t: jnp.array([t, np.ones(3)]))(np.ones(2))


# -- zeros / ones / full / empty --------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), 0, 3, (2, 3), (2, 0, 4), [1, 2]])
@pytest.mark.parametrize("dtype", [None, np.float64, np.int32, np.bool_, np.complex64])
def test_constant_fills(shape, dtype):
    want_dtype = np.float32 if dtype is None else dtype
    _same(jnp.zeros(shape, dtype), np.zeros(shape, want_dtype))
    _same(jnp.ones(shape, dtype), np.ones(shape, want_dtype))
    e = jnp.empty(shape, dtype)
    assert e.shape == np.empty(shape).shape and e.dtype == np.dtype(want_dtype)
    _same(jnp.full(shape, 7, dtype), np.full(shape, 7, np.int32 if dtype is None else dtype))


def test_full_dtype_rules_and_array_fill():
    _same(jnp.full((2,), 1.5), np.full((2,), 1.5, np.float32))
    assert jnp.full((2,), 1.5).weak_type  # a Python scalar fill is weak, as in JAX
    _same(jnp.full((2,), True), np.full((2,), True))
    _same(jnp.full((2,), np.float64(1.5)), np.full((2,), 1.5))
    _same(jnp.full((3, 2), np.array([1, 2], np.int16)), np.full((3, 2), np.array([1, 2], np.int16)))
    _same(jnp.full((2, 2), np.arange(2.0), dtype=np.float32), np.full((2, 2), np.arange(2.0), np.float32))
    with pytest.raises(ShapeError):
        jnp.full((2, 3), np.arange(2))
    with pytest.raises(ShapeError):
        jnp.zeros((2, -1))


def test_like_functions():
    x = rng.standard_normal((2, 3)).astype(np.float64)
    for name in ("zeros_like", "ones_like", "empty_like"):
        ref = getattr(np, name)
        got = getattr(jnp, name)(x)
        assert got.shape == x.shape and got.dtype == x.dtype
        if name != "empty_like":
            _same(got, ref(x))
        other = getattr(jnp, name)(x, dtype=np.int8, shape=(4,))
        assert other.shape == (4,) and other.dtype == np.int8
    _same(jnp.full_like(x, 3), np.full_like(x, 3))
    _same(jnp.full_like(x, 2.5, dtype=np.int32), np.full_like(x, 2.5, dtype=np.int32))
    _same(jnp.full_like(x, np.array([1.0, 2.0, 3.0])), np.full_like(x, np.array([1.0, 2.0, 3.0])))
    _same(jnp.ones_like(np.int8(3)), np.ones_like(np.int8(3)))
    _same(jnp.zeros_like(jnp.asarray([1, 2])), np.zeros(2, np.int32))
    assert jnp.zeros_like(2.0).weak_type


def test_like_functions_on_tracers():
    def f(x):
        return jnp.zeros_like(x) + jnp.ones_like(x, dtype=np.float32) * 2, jnp.full_like(x, 5, shape=(2,))

    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    a, b = ember.jit(f)(x)
    _same(a, np.full((2, 3), 2.0, np.float32))
    _same(b, np.array([5, 5], np.int32))
    prog = ember.make_program(lambda v: jnp.zeros_like(v))(x)
    assert not prog.consts  # built from a scalar broadcast, not a captured constant


def test_symbolic_shapes():
    batch = sh.axis("batch")

    def f(x):
        n = x.shape[0]
        return [jnp.zeros((n, 4)), jnp.ones_like(x), jnp.full((2, n), 3, np.int8), jnp.arange(n),
                jnp.eye(n), jnp.zeros_like(x, shape=(n, n)), jnp.linspace(0.0, 1.0, 5) + jnp.zeros((n, 1))]

    prog, _ = trace_to_program(f, [ShapedArray((batch, 3), np.float32)])
    shapes = [v.aval.shape for v in prog.outvars]
    assert shapes == [(batch, 4), (batch, 3), (2, batch), (batch,), (batch, batch), (batch, batch),
                      (batch, 5)]
    assert prog.outvars[3].aval.dtype == np.int32


# -- arange -----------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [(5,), (0,), (-3,), (2, 9), (9, 2), (1, 10, 3), (10, 1, -3), (5, 5),
                                  (-4, 7, 2)])
def test_arange_ints(args):
    _same(jnp.arange(*args), np.arange(*args), np.int32)


@pytest.mark.parametrize("args", [(5.0,), (0.5, 3.0), (0, 1, 0.1), (1.0, -1.0, -0.25), (0, 2.5, 0.5),
                                  (0.0, 1.0, 0.3)])
def test_arange_floats(args):
    got = jnp.arange(*args)
    want = np.arange(*args)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_arange_dtypes_and_errors():
    _same(jnp.arange(np.int64(4)), np.arange(4), np.int64)
    _same(jnp.arange(np.float64(0), 1, 0.25), np.arange(0, 1, 0.25))
    _same(jnp.arange(5, dtype=np.float64), np.arange(5, dtype=np.float64))
    _same(jnp.arange(0.5, 4, dtype=np.int32), np.arange(0.5, 4, dtype=np.int32))
    _same(jnp.arange(jnp.asarray(np.int32(3))), np.arange(3, dtype=np.int32))
    with pytest.raises(ValueError, match="step"):
        jnp.arange(0, 5, 0)
    with pytest.raises(TracerError, match="arange"):
        ember.jit(lambda n: jnp.arange(n))(np.int32(4))
    _same(ember.jit(lambda: jnp.arange(2, 10, 2))(), np.arange(2, 10, 2), np.int32)
    prog = ember.make_program(lambda: jnp.arange(1000))()
    assert "iota" in str(prog) and not prog.consts
    with pytest.raises(DTypeError):
        jnp.arange(0, 3 + 1j)


# -- linspace / logspace / geomspace ----------------------------------------------------------


@pytest.mark.parametrize("num", [0, 1, 2, 7, 50])
@pytest.mark.parametrize("endpoint", [True, False])
def test_linspace_scalars(num, endpoint):
    got, step = jnp.linspace(-1.0, 3.0, num, endpoint=endpoint, retstep=True)
    want, wstep = np.linspace(-1.0, 3.0, num, endpoint=endpoint, retstep=True)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(step, wstep, rtol=1e-6)
    if num > 1 and endpoint:
        assert float(np.asarray(got)[-1]) == 3.0  # the endpoint is exact


def test_linspace_arrays_axis_and_dtype():
    start, stop = np.array([0.0, 1.0, -2.0]), np.array([[1.0], [5.0]])
    for axis in (0, 1, -1, 2):
        got = jnp.linspace(start, stop, 4, axis=axis)
        want = np.linspace(start, stop, 4, axis=axis)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12)
    _same(jnp.linspace(0, 10, 4, dtype=np.int32), np.linspace(0, 10, 4, dtype=np.int32))
    _same(jnp.linspace(-5, 5, 4, dtype=np.int32), np.linspace(-5, 5, 4, dtype=np.int32))
    got = ember.jit(lambda a, b: jnp.linspace(a, b, 6))(np.float32(1), np.float32(2))
    np.testing.assert_allclose(got, np.linspace(1, 2, 6), rtol=1e-6)
    with pytest.raises(ValueError):
        jnp.linspace(0, 1, -1)


def test_logspace_geomspace():
    np.testing.assert_allclose(jnp.logspace(0, 3, 4), np.logspace(0, 3, 4), rtol=1e-5)
    np.testing.assert_allclose(jnp.logspace(0, 3, 4, endpoint=False, base=2.0),
                               np.logspace(0, 3, 4, endpoint=False, base=2.0), rtol=1e-5)
    np.testing.assert_allclose(jnp.logspace(np.array([0.0, 1.0]), 2.0, 3, axis=1, base=np.array([2.0, 3.0])),
                               np.logspace(np.array([0.0, 1.0]), 2.0, 3, axis=1, base=np.array([2.0, 3.0])),
                               rtol=1e-12)
    for args, kw in [((1, 1000, 4), {}), ((-1, -256, 9), {}), ((2.0, 50.0, 5), {"endpoint": False}),
                     ((np.array([1.0, 10.0]), np.array([100.0, 1000.0]), 3), {"axis": 1})]:
        got = jnp.geomspace(*args, **kw)
        want = np.geomspace(*args, **kw)
        np.testing.assert_allclose(got, want, rtol=1e-5)
    got = np.asarray(jnp.geomspace(3.0, 300.0, 3))
    assert got[0] == 3.0 and got[-1] == 300.0
    with pytest.raises(ValueError, match="zero"):
        jnp.geomspace(0.0, 1.0, 3)


# -- eye / identity / meshgrid / indices ------------------------------------------------------


@pytest.mark.parametrize("n,m,k", [(3, None, 0), (3, 5, 1), (4, 2, -1), (3, 3, 5), (0, 2, 0), (1, 1, 0)])
def test_eye(n, m, k):
    _same(jnp.eye(n, m, k), np.eye(n, m, k, dtype=np.float32))
    _same(jnp.eye(n, m, k, dtype=np.int8), np.eye(n, m, k, dtype=np.int8))


def test_eye_identity_under_jit_with_traced_k():
    got = ember.jit(lambda k: jnp.eye(4, 5, k))(np.int32(2))
    _same(got, np.eye(4, 5, 2, dtype=np.float32))
    _same(jnp.identity(3, dtype=bool), np.identity(3, dtype=bool))
    _same(jnp.identity(2), np.identity(2, dtype=np.float32))


@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("sparse", [False, True])
def test_meshgrid(indexing, sparse):
    xs = [np.arange(3), np.linspace(0, 1, 4).astype(np.float32), np.array([5, 6])]
    for n in (1, 2, 3):
        got = jnp.meshgrid(*xs[:n], indexing=indexing, sparse=sparse)
        want = np.meshgrid(*xs[:n], indexing=indexing, sparse=sparse)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w)
    got = ember.jit(lambda a, b: jnp.meshgrid(a, b))(xs[0], xs[1])
    for g, w in zip(got, np.meshgrid(xs[0], xs[1])):
        np.testing.assert_array_equal(g, w)
    assert jnp.meshgrid() == []
    with pytest.raises(ValueError):
        jnp.meshgrid(xs[0], indexing="ji")


def test_indices():
    for dims in [(2, 3), (4,), (2, 0, 3), ()]:
        _same(jnp.indices(dims), np.indices(dims).astype(np.int32), np.int32)
    for g, w in zip(jnp.indices((2, 3), sparse=True), np.indices((2, 3), sparse=True)):
        _same(g, w.astype(np.int32))
    _same(jnp.indices((2, 2), dtype=np.float32), np.indices((2, 2), dtype=np.float32))
