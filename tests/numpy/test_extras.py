"""ember.numpy extras (isclose, kron, cross, insert/delete, block, windows, ...) against NumPy,
eagerly and under ``ember.jit``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember.errors import TracerError
from tests.numpy import helpers


def make(shape, dtype=np.float32, seed=0):
    return helpers.make(shape, dtype, seed, high=20)


def same(got, want, dtype=True, tol=None):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w, dtype, tol)
        return
    g, w = np.asarray(got), np.asarray(want)
    assert g.shape == w.shape, (g.shape, w.shape)
    if dtype:
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
    if tol is None:
        np.testing.assert_array_equal(g, w)
    else:
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def check(fn, *arrays, dtype=True, tol=None, jit=True):
    want = fn(np, *arrays)
    got = fn(jnp, *[jnp.asarray(a) for a in arrays])
    same(got, want, dtype, tol)
    if jit:
        same(ember.jit(lambda *a: fn(jnp, *a))(*[jnp.asarray(a) for a in arrays]), got, dtype, tol)


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 1e-9, np.inf, -np.inf, np.nan, 2.0], np.float32)


@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose_special(equal_nan):
    x, y = np.meshgrid(SPECIAL, SPECIAL)
    check(lambda m, a, b: m.isclose(a, b, equal_nan=equal_nan), x, y)
    check(lambda m, a, b: m.isclose(a, b, rtol=0.1, atol=0.5, equal_nan=equal_nan), x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.complex64])
@pytest.mark.parametrize("shape", [(), (0,), (3, 4)])
def test_isclose_allclose(dtype, shape):
    a = make(shape, dtype)
    b = (a + (np.asarray(1e-7, a.dtype) if a.dtype.kind in "fc" else 0)).astype(dtype)
    check(lambda m, x, y: m.isclose(x, y), a, b, dtype=False)
    assert bool(jnp.allclose(a, b)) == np.allclose(a, b)
    assert bool(jnp.allclose(a, b + 1)) == np.allclose(a, b + 1)
    assert ember.jit(lambda x, y: jnp.allclose(x, y))(a, b).dtype == np.bool_


def test_array_equal_equiv():
    a = np.array([1.0, np.nan, 3.0], np.float32)
    for x, y in [(a, a), (a, a[:2]), ([1, 2], [1, 2]), ([1, 2], [[1, 2]]), (np.zeros((0,)), np.zeros((0,)))]:
        assert bool(jnp.array_equal(x, y)) == np.array_equal(x, y)
        assert bool(jnp.array_equal(x, y, equal_nan=True)) == np.array_equal(x, y, equal_nan=True)
    for x, y in [([1, 2], [[1, 2], [1, 2]]), ([1, 2], [[1, 2], [1, 3]]), ([1, 2], [1, 2, 3]), (3, [3, 3])]:
        assert bool(jnp.array_equiv(x, y)) == np.array_equiv(x, y)


@pytest.mark.parametrize("sa,sb", [((2, 3), (2, 2)), ((3,), (2, 2)), ((), (3,)), ((2, 0), (3, 1)),
                                   ((2, 1, 3), (3, 2))])
def test_kron(sa, sb):
    check(lambda m, a, b: m.kron(a, b), make(sa), make(sb, seed=1))
    check(lambda m, a, b: m.kron(a, b), make(sa, np.int32), make(sb, np.int32, seed=1))


def test_cross():
    a, b = make((4, 3)), make((4, 3), seed=1)
    check(lambda m, x, y: m.cross(x, y), a, b, tol=1e-6)
    check(lambda m, x, y: m.cross(x, y, axisa=0, axisb=0, axisc=0), a.T, b.T, tol=1e-6)
    check(lambda m, x, y: m.cross(x, y, axis=0), a.T, b.T, tol=1e-6)
    check(lambda m, x, y: m.cross(x, y), make((2, 1, 3)), make((5, 3), seed=2), tol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        check(lambda m, x, y: m.cross(x, y), a[:, :2], b, tol=1e-6)
        check(lambda m, x, y: m.cross(x, y), a, b[:, :2], tol=1e-6)
        check(lambda m, x, y: m.cross(x, y), a[:, :2], b[:, :2], tol=1e-6)
    with pytest.raises(ValueError):
        jnp.cross(np.ones((2, 4)), np.ones((2, 3)))


def test_vecdot_matvec_vecmat():
    a, b = make((2, 3, 4), np.complex64), make((3, 4), np.complex64, seed=1)
    check(lambda m, x, y: m.vecdot(x, y), a, b, tol=1e-5)
    check(lambda m, x, y: m.vecdot(x, y, axis=1), make((2, 3, 4)), make((2, 3, 1)), tol=1e-5)
    mat = make((2, 5, 4), np.complex64, seed=2)
    check(lambda m, x, y: m.matvec(x, y), mat, b[:1], tol=1e-5)
    check(lambda m, x, y: m.vecmat(x, y), make((5,), np.complex64), mat, tol=1e-5)
    check(lambda m, x, y: m.matvec(x, y), make((3, 4)), make((4,)), tol=1e-5)
    with pytest.raises(ValueError):
        jnp.vecdot(np.ones(3), np.ones(4))


def test_ix():
    got = jnp.ix_(jnp.asarray([0, 2]), np.array([True, False, True, True]), np.arange(3))
    same(got, np.ix_([0, 2], np.array([True, False, True, True]), np.arange(3)), dtype=False)
    same(jnp.ix_(jnp.asarray([0, 1]), jnp.asarray([])), np.ix_([0, 1], []), dtype=False)
    with pytest.raises(ValueError):
        jnp.ix_(np.ones((2, 2), int))


@pytest.mark.parametrize("n,k,m", [(3, 0, None), (4, 1, None), (4, -1, 6), (3, 5, 2), (0, 0, None)])
def test_triangle_indices(n, k, m):
    same(jnp.tril_indices(n, k, m), np.tril_indices(n, k, m), dtype=False)
    same(jnp.triu_indices(n, k, m), np.triu_indices(n, k, m), dtype=False)
    arr = np.zeros((n, n if m is None else m))
    same(jnp.tril_indices_from(arr, k), np.tril_indices_from(arr, k), dtype=False)
    same(jnp.triu_indices_from(jnp.asarray(arr), k), np.triu_indices_from(arr, k), dtype=False)
    assert jnp.tril_indices(n, k, m)[0].dtype == np.int32


def test_diag_and_mask_indices():
    same(jnp.diag_indices(4), np.diag_indices(4), dtype=False)
    same(jnp.diag_indices(3, 3), np.diag_indices(3, 3), dtype=False)
    same(jnp.diag_indices_from(np.zeros((3, 3, 3))), np.diag_indices_from(np.zeros((3, 3, 3))), dtype=False)
    with pytest.raises(ValueError):
        jnp.diag_indices_from(np.zeros((2, 3)))
    same(jnp.mask_indices(4, jnp.triu, 1), np.mask_indices(4, np.triu, 1), dtype=False)
    same(jnp.mask_indices(3, jnp.tril), np.mask_indices(3, np.tril), dtype=False)
    x = make((4, 4))
    same(jnp.asarray(x)[jnp.tril_indices(4)], x[np.tril_indices(4)])


@pytest.mark.parametrize("shape", [(), (3,), (2, 2)])
@pytest.mark.parametrize("k", [0, 1, -2])
def test_diagflat(shape, k):
    check(lambda m, v: m.diagflat(v, k), make(shape))


def test_append():
    x = make((2, 3))
    check(lambda m, a, b: m.append(a, b), x, make((4,), seed=1))
    check(lambda m, a, b: m.append(a, b, axis=0), x, make((1, 3), seed=1))
    check(lambda m, a, b: m.append(a, b, axis=-1), x, make((2, 2), np.int32), dtype=False)
    check(lambda m, a, b: m.append(a, b), make((0,)), make((0,)))


@pytest.mark.parametrize("obj", [1, -1, 0, 3, [1], [0, 2, 2], [3, 0], slice(0, 2), slice(None, None, -1),
                                 np.array([1, 2])])
@pytest.mark.parametrize("axis", [None, 1, -2])
def test_insert(obj, axis):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    n = x.size if axis is None else x.shape[axis]
    if isinstance(obj, int) and not -n <= obj <= n:
        return
    obj = np.asarray(obj, np.int64) if isinstance(obj, list) else obj  # lists are not arrays to JAX
    check(lambda m, a: m.insert(a, obj, 9.5, axis=axis), x, jit=True)
    vals = np.array([7.0, 8.0], np.float32)
    try:
        want = np.insert(x, obj, vals, axis=axis)
    except ValueError:
        return
    same(jnp.insert(x, obj, vals, axis=axis), want)


def test_insert_values_shapes_and_dtype():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    same(jnp.insert(x, 1, jnp.asarray([7, 8]), axis=1), np.insert(x, 1, [7, 8], axis=1))
    same(jnp.insert(x, jnp.asarray([1]), jnp.asarray([[7], [8]]), axis=1),
         np.insert(x, [1], [[7], [8]], axis=1))
    same(jnp.insert(x, 1, 2.7, axis=0), np.insert(x, 1, 2.7, axis=0))
    with pytest.raises(IndexError):
        jnp.insert(x, 5, 0, axis=1)
    with pytest.raises(TracerError):
        ember.jit(lambda i: jnp.insert(x, i, 0))(1)


@pytest.mark.parametrize("obj", [1, -1, [0, 2], [], slice(None, None, 2), slice(1, 3),
                                 np.array([True, False, True, False])])
def test_delete(obj):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    obj = np.asarray(obj, np.int64) if isinstance(obj, list) else obj  # lists are not arrays to JAX
    check(lambda m, a: m.delete(a, obj, axis=1), x)
    if not isinstance(obj, np.ndarray):
        check(lambda m, a: m.delete(a, obj), x)
    with pytest.raises(IndexError):
        jnp.delete(x, 7, axis=1)


def test_put_along_axis():
    x = make((3, 4))
    idx = np.array([[0], [3], [-1]])
    vals = np.array([[10.0], [20.0], [30.0]], np.float32)

    def np_put(a, i, v, axis):
        a = a.copy()
        np.put_along_axis(a, i, v, axis)
        return a

    def em_put(a, i, v, axis):
        return jnp.put_along_axis(a, i, v, axis, inplace=False)

    same(em_put(x, idx, vals, 1), np_put(x, idx, vals, 1))
    same(em_put(x, idx, 5.0, 1), np_put(x, idx, 5.0, 1))
    i0 = np.array([[2, 0, 1, 1]])
    same(em_put(x, i0, -1.0, 0), np_put(x, i0, -1.0, 0))
    same(em_put(x, np.array([1, 5]), 0.0, None), np_put(x, np.array([1, 5]), 0.0, None))
    same(ember.jit(lambda a, i: em_put(a, i, vals, 1))(x, idx), np_put(x, idx, vals, 1))
    with pytest.raises(ValueError):
        jnp.put_along_axis(x, idx, vals, 1)
    g = ember.grad(lambda a: jnp.sum(em_put(a, idx, vals, 1) * 2.0))(jnp.asarray(x))
    want = np.full(x.shape, 2.0, np.float32)
    want[[0, 1, 2], [0, 3, 3]] = 0
    same(g, want)


@pytest.mark.parametrize("mode", ["wrap", "clip"])
def test_choose(mode):
    choices = [make((3, 4), seed=i) for i in range(3)]
    a = np.array([[0, 1, 2, 5], [-1, 0, 1, 2], [3, 2, 1, 0]])
    check(lambda m, i, c0, c1, c2: m.choose(i, [c0, c1, c2], mode=mode), a, *choices)
    check(lambda m, i, c: m.choose(i, [c, 0.5], mode=mode), np.array([0, 1, 0, 1]), make((3, 4)))


def test_choose_raise():
    choices = [np.arange(3), np.arange(3) * 10]
    same(jnp.choose(jnp.asarray([1, 0, 1]), choices), np.choose([1, 0, 1], choices))
    with pytest.raises(ValueError):
        jnp.choose(jnp.asarray([2, 0, 1]), choices)
    with pytest.raises(TracerError):
        ember.jit(lambda i: jnp.choose(i, choices))(jnp.asarray([0, 1, 1]))


@pytest.mark.parametrize("new_shape", [(2, 5), 7, (0,), (3, 2, 2), (1,)])
def test_resize(new_shape):
    check(lambda m, a: m.resize(a, new_shape), make((2, 3)))
    same(jnp.resize(np.zeros((0,), np.float32), new_shape), np.resize(np.zeros((0,), np.float32), new_shape))


def test_block():
    A, B, C = make((2, 2)), make((2, 3), seed=1), make((1, 5), seed=2)
    check(lambda m, a, b, c: m.block([[a, b], [c]]), A, B, C)
    check(lambda m, a, b: m.block([a, b]), make((3,)), make((2,)))
    check(lambda m, a: m.block([[[a]], [[a]]]), A)
    check(lambda m, a, b: m.block([[a], [b]]), make((3,)), make((3,), np.int32), dtype=False)
    same(jnp.block([1, 2, np.array([3, 4])]), np.block([1, 2, np.array([3, 4])]), dtype=False)
    same(jnp.block(np.float32(3)), np.block(np.float32(3)))
    with pytest.raises(ValueError):
        jnp.block([[A], B])
    with pytest.raises(TypeError):
        jnp.block((A, A))
    with pytest.raises(ValueError):
        jnp.block([])


@pytest.mark.parametrize("axis,start", [(3, 1), (2, 0), (1, 4), (-1, -2), (0, 0), (2, 3)])
def test_rollaxis(axis, start):
    check(lambda m, a: m.rollaxis(a, axis, start), make((2, 3, 4, 5)))


def test_row_stack_pow_asanyarray():
    x, y = make((3,)), make((2, 3), seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        check(lambda m, a, b: m.row_stack([a, b]), x, y)
    check(lambda m, a: m.pow(m.abs(a), 1.5), x, tol=1e-6)
    same(jnp.asanyarray([1, 2], dtype=np.float32), np.asanyarray([1, 2], dtype=np.float32))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16, np.int64, np.uint8])
def test_bitwise_count(dtype):
    info = np.iinfo(dtype)
    x = np.array([0, 1, 7, info.max, info.min, 5], dtype=dtype)
    check(lambda m, a: m.bitwise_count(a), x)


def test_sort_complex():
    z = np.array([[1 + 2j, 1 + 1j, -1j, 3, 1 - 5j], [2, 2j, -2, 0, 1 + 0j]], np.complex64)
    check(lambda m, a: m.sort_complex(a), z)
    same(jnp.sort_complex(np.array([3, 1, 2], np.float32)), np.array([1, 2, 3], np.complex64))
    same(jnp.sort_complex(np.array([3.0, 1.0])), np.sort_complex(np.array([3.0, 1.0])))


@pytest.mark.parametrize("trim", ["fb", "f", "b", "FB"])
def test_trim_zeros(trim):
    for x in [np.array([0, 0, 1, 2, 0, 3, 0, 0]), np.zeros(3), np.array([], np.int32), np.array([4, 5])]:
        same(jnp.trim_zeros(x, trim), np.trim_zeros(x, trim))
    with pytest.raises(TracerError):
        ember.jit(jnp.trim_zeros)(np.array([0, 1]))


def test_real_if_close():
    for x in [np.array([1 + 1e-10j, 2 - 1e-12j]), np.array([1 + 1e-5j], np.complex64),
              np.array([1 + 1e-3j]), np.array([1.0, 2.0], np.float32)]:
        same(jnp.real_if_close(x), np.real_if_close(x))
    z = np.array([1 + 1e-3j])
    same(jnp.real_if_close(z, tol=1e-2), np.real_if_close(z, tol=1e-2))
    with pytest.raises(TracerError):
        ember.jit(jnp.real_if_close)(np.array([1 + 0j]))


def test_fromfunction():
    same(jnp.fromfunction(lambda i, j: i * 10 + j, (2, 3)),
         np.fromfunction(lambda i, j: i * 10 + j, (2, 3), dtype=np.float32))
    same(jnp.fromfunction(lambda i, j: i == j, (3, 3), dtype=int),
         np.fromfunction(lambda i, j: i == j, (3, 3)))
    same(jnp.fromfunction(lambda i, k=1: i + k, (3,), dtype=np.int32, k=5), np.arange(3, dtype=np.int32) + 5)


@pytest.mark.parametrize("name", ["bartlett", "blackman", "hamming", "hanning"])
@pytest.mark.parametrize("M", [-1, 0, 1, 2, 5, 8])
def test_windows(name, M):
    same(getattr(jnp, name)(M), getattr(np, name)(M).astype(np.float32), tol=1e-6)


@pytest.mark.parametrize("M", [0, 1, 4, 9])
@pytest.mark.parametrize("beta", [0.0, 5.0, 14.0])
def test_kaiser(M, beta):
    same(jnp.kaiser(M, beta), np.kaiser(M, beta).astype(np.float32), tol=1e-5)


def test_common_type_min_scalar_type():
    f32, f64, c64 = np.ones(2, np.float32), np.ones(2), np.ones(2, np.complex64)
    assert jnp.common_type(f32) is np.float32
    assert jnp.common_type(f32, f64) is np.float64
    assert jnp.common_type(c64, f64) is np.complex128
    assert jnp.common_type(np.ones(2, np.int32)) is np.float32  # ember's (JAX's) default float
    assert jnp.common_type(jnp.ones(2, np.float16), f32) is np.float32
    with pytest.raises(TypeError):
        jnp.common_type(np.ones(2, bool))
    for v in [10, -1, 300, 1.5, 1e300, 2j, True]:
        assert jnp.min_scalar_type(v) == np.min_scalar_type(v)


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("period", [2 * np.pi, 6.0])
def test_unwrap(axis, period):
    rng = np.random.default_rng(0)
    ph = np.cumsum(rng.uniform(-3, 3, size=(4, 20)), axis=1)
    w = (np.mod(ph + period / 2, period) - period / 2).astype(np.float64)
    check(lambda m, a: m.unwrap(a, axis=axis, period=period), w, tol=1e-9)
    check(lambda m, a: m.unwrap(a, discont=4.0, axis=axis), w, tol=1e-9)
    same(jnp.unwrap(np.zeros((0,), np.float32)), np.unwrap(np.zeros((0,), np.float32)))
    same(jnp.unwrap(np.array([0.0, 1.0, 5.0, 10.0, 2.0]), period=6),
         np.unwrap(np.array([0.0, 1.0, 5.0, 10.0, 2.0]), period=6), tol=1e-12)


def test_grads_of_extras():
    from ember.test_util import check_grads
    a, b = make((2, 3), np.float64), make((3, 2), np.float64, seed=1)
    check_grads(lambda x, y: jnp.kron(x, y), (a, b), order=1)
    check_grads(lambda x, y: jnp.cross(x, y), (make((4, 3), np.float64), make((4, 3), np.float64, seed=2)),
                order=1)
    check_grads(lambda x: jnp.insert(x, jnp.asarray([1, 1]), 0.5, axis=1), (a,), order=1)
    check_grads(lambda x: jnp.delete(x, 1, axis=0), (a,), order=1)
    check_grads(lambda x: jnp.block([[x, x], [x, x]]), (a,), order=1)
    check_grads(lambda x: jnp.unwrap(x * 4.0), (make((10,), np.float64),), order=1)
