"""Sorting, searching and set functions against NumPy: dtypes, axes, 0-d/empty, NaNs, jit, size=."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember
import ember.numpy as jnp
from ember.errors import DTypeError, ShapeError, TracerError

rng = np.random.default_rng(0)
DTYPES = [np.float32, np.float64, np.int32]


def _data(shape, dtype, dups=True):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-5, 6 if dups else 1000, size=shape).astype(dtype)
    if dups:
        return rng.integers(-5, 6, size=shape).astype(dtype) / 2
    return rng.normal(size=shape).astype(dtype)


def _eq(a, b):
    a = np.asarray(a)
    assert a.shape == np.shape(b), (a.shape, np.shape(b))
    np.testing.assert_array_equal(a, b)


# -- sort / argsort -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", [((7,), -1), ((3, 5), 0), ((3, 5), -1), ((2, 3, 4), 1),
                                        ((2, 3), None), ((0,), 0), ((2, 0), 1), ((), None)])
def test_sort_argsort(dtype, shape, axis):
    x = _data(shape, dtype)
    _eq(jnp.sort(x, axis=axis), np.sort(x, axis=axis))
    _eq(jnp.argsort(x, axis=axis), np.argsort(x, axis=axis, kind="stable"))
    _eq(ember.jit(lambda v: jnp.sort(v, axis=axis))(x), np.sort(x, axis=axis))
    _eq(ember.jit(lambda v: jnp.argsort(v, axis=axis))(x), np.argsort(x, axis=axis, kind="stable"))
    assert jnp.argsort(x, axis=axis).dtype == np.int32


@pytest.mark.parametrize("dtype", DTYPES)
def test_sort_descending_stable(dtype):
    x = _data((4, 9), dtype)
    _eq(jnp.sort(x, axis=1, descending=True), np.sort(x, axis=1)[:, ::-1])
    # stable descending: equal keys keep their original order
    ref = np.argsort(-x.astype(np.float64), axis=1, kind="stable")
    _eq(jnp.argsort(x, axis=1, descending=True), ref)
    _eq(ember.jit(lambda v: jnp.argsort(v, axis=0, descending=True))(x),
        np.argsort(-x.astype(np.float64), axis=0, kind="stable"))


def test_sort_nans_and_methods():
    x = np.array([3.0, np.nan, -1.0, np.inf, 2.0, np.nan, -np.inf], np.float32)
    _eq(jnp.sort(x), np.sort(x))
    _eq(jnp.argsort(x), np.argsort(x, kind="stable"))
    assert np.isnan(np.asarray(jnp.sort(x, descending=True))[:2]).all()
    _eq(jnp.asarray(x).sort(), np.sort(x))
    _eq(jnp.asarray(x).argsort(), np.argsort(x, kind="stable"))


def test_sort_complex_and_bool():
    z = np.array([1 + 2j, 1 - 1j, -3 + 0j, 1 + 0j], np.complex64)
    _eq(jnp.sort(z), np.sort(z))
    _eq(jnp.argsort(z), np.argsort(z, kind="stable"))
    b = np.array([True, False, True, False])
    _eq(jnp.sort(b), np.sort(b))
    _eq(jnp.argsort(b), np.argsort(b, kind="stable"))


def test_sort_errors():
    with pytest.raises(ShapeError):
        jnp.sort(np.zeros(3), axis=1)
    with pytest.raises(ShapeError):
        jnp.sort(np.float32(1.0))
    with pytest.raises(NotImplementedError):
        jnp.sort(np.zeros(3), order="x")


def test_lexsort():
    a = rng.integers(0, 3, 12)
    b = rng.integers(0, 3, 12)
    c = rng.normal(size=12)
    _eq(jnp.lexsort((c, a, b)), np.lexsort((c, a, b)))
    keys = rng.integers(0, 2, (3, 10))
    _eq(jnp.lexsort(keys), np.lexsort(keys))
    k2 = rng.integers(0, 3, (2, 4, 5))
    _eq(jnp.lexsort((k2[0], k2[1]), axis=0), np.lexsort((k2[0], k2[1]), axis=0))
    _eq(ember.jit(lambda p, q: jnp.lexsort((p, q)))(a, b), np.lexsort((a, b)))
    with pytest.raises(TypeError):
        jnp.lexsort([])


@pytest.mark.parametrize("kth", [0, 3, -1, [1, 4]])
def test_partition(kth):
    x = _data((3, 8), np.float32, dups=False)
    p = np.asarray(jnp.partition(x, kth, axis=1))
    ref = np.partition(x, kth, axis=1)
    for k in np.atleast_1d(kth):
        np.testing.assert_array_equal(p[:, k], ref[:, k])
        assert (p[:, :k % 8] <= p[:, [k]]).all() and (p[:, k % 8:] >= p[:, [k]]).all()
    i = np.asarray(jnp.argpartition(x, kth, axis=1))
    np.testing.assert_array_equal(np.take_along_axis(x, i, 1)[:, kth], ref[:, kth])
    out = ember.jit(lambda v: jnp.partition(v, 2, axis=0))(x)
    np.testing.assert_array_equal(np.asarray(out)[2], np.partition(x, 2, axis=0)[2])
    with pytest.raises(ValueError):
        jnp.partition(x, 8, axis=1)


# -- searchsorted -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("method", ["scan", "compare_all"])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 16])
def test_searchsorted(dtype, side, method, n):
    a = np.sort(_data((n,), dtype))
    v = _data((3, 4), dtype)
    ref = np.searchsorted(a, v, side=side)
    _eq(jnp.searchsorted(a, v, side=side, method=method), ref)
    _eq(ember.jit(lambda p, q: jnp.searchsorted(p, q, side=side, method=method))(a, v), ref)
    _eq(jnp.searchsorted(a, v[0, 0], side=side), np.searchsorted(a, v[0, 0], side=side))


def test_searchsorted_sorter_nan_and_method():
    a = np.array([3.0, np.nan, 1.0, 2.0, 2.0])
    s = np.argsort(a, kind="stable")
    v = np.array([np.nan, 2.0, 0.0, 5.0, 1.5])
    for side in ("left", "right"):
        _eq(jnp.searchsorted(a, v, side=side, sorter=s), np.searchsorted(a, v, side=side, sorter=s))
    srt = np.sort(a)
    _eq(jnp.asarray(srt).searchsorted(v), np.searchsorted(srt, v))
    with pytest.raises(ShapeError):
        jnp.searchsorted(np.zeros((2, 2)), 1.0)
    with pytest.raises(ValueError):
        jnp.searchsorted(srt, v, side="middle")


# -- nonzero family -----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(6,), (3, 4), (2, 3, 2), (0,), (2, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_nonzero_family(shape, dtype):
    x = (rng.integers(0, 3, shape) * (rng.random(shape) > 0.4)).astype(dtype)
    for got, ref in zip(jnp.nonzero(x), np.nonzero(x)):
        _eq(got, ref)
        assert got.dtype == np.int32
    _eq(jnp.flatnonzero(x), np.flatnonzero(x))
    _eq(jnp.argwhere(x), np.argwhere(x))
    _eq(jnp.asarray(x).nonzero()[0], np.nonzero(x)[0])


def test_nonzero_size_under_jit():
    x = np.array([[0, 1, 0], [2, 0, 3]])
    ref = np.nonzero(x)
    out = ember.jit(lambda v: jnp.nonzero(v, size=5, fill_value=-1))(x)
    for got, r in zip(out, ref):
        _eq(got, np.concatenate([r, [-1, -1]]))
    out = ember.jit(lambda v: jnp.nonzero(v, size=2))(x)
    for got, r in zip(out, ref):
        _eq(got, r[:2])
    out = ember.jit(lambda v: jnp.nonzero(v, size=4, fill_value=(7, 8)))(x)
    _eq(out[0], [0, 1, 1, 7])
    _eq(out[1], [1, 0, 2, 8])
    _eq(ember.jit(lambda v: jnp.flatnonzero(v, size=4))(x), [1, 3, 5, 0])
    _eq(ember.jit(lambda v: jnp.argwhere(v, size=4, fill_value=9))(x), [[0, 1], [1, 0], [1, 2], [9, 9]])
    _eq(ember.jit(lambda v: jnp.where(v > 0, v, 0))(x), np.where(x > 0, x, 0))
    for f in (jnp.nonzero, jnp.flatnonzero, jnp.argwhere, lambda v: jnp.where(v)):
        with pytest.raises(TracerError, match="size="):
            ember.jit(f)(x)


def test_nonzero_0d_and_where_one_arg():
    with pytest.raises(ValueError):
        jnp.nonzero(np.float32(1))
    _eq(jnp.argwhere(np.int32(3)), np.argwhere(np.int32(3)))
    _eq(jnp.argwhere(np.int32(0)), np.argwhere(np.int32(0)))
    x = np.array([0, 3, 0, 1])
    _eq(jnp.where(x)[0], np.where(x)[0])


def test_extract_compress():
    x = np.arange(12).reshape(3, 4)
    c = np.array([True, False, True])
    _eq(jnp.compress(c, x, axis=0), np.compress(c, x, axis=0))
    _eq(jnp.compress(jnp.asarray([0, 1, 1, 0]), x, axis=-1), np.compress([0, 1, 1, 0], x, axis=-1))
    _eq(jnp.compress(jnp.asarray([True, False]), x), np.compress([True, False], x))
    _eq(jnp.compress(jnp.asarray([False, True, False, False]), x, axis=0),
        np.compress([False, True], x, axis=0))
    _eq(jnp.extract(x % 3 == 0, x), np.extract(x % 3 == 0, x))
    _eq(ember.jit(lambda v: jnp.extract(v % 5 == 0, v, size=4, fill_value=-1))(x), [0, 5, 10, -1])
    _eq(ember.jit(lambda v, cc: jnp.compress(cc, v, axis=0, size=3))(x, c),
        np.concatenate([np.compress(c, x, axis=0), np.zeros((1, 4), int)]))
    with pytest.raises(IndexError):
        jnp.compress(jnp.asarray([False, False, False, True]), x, axis=0)
    with pytest.raises(TracerError, match="size="):
        ember.jit(lambda v: jnp.extract(v > 3, v))(x)


def test_select_piecewise():
    x = np.linspace(-2, 2, 9).astype(np.float32)
    conds = [x < -1, x > 1, x == 0]
    choices = [x * 2, x ** 2, np.ones_like(x)]
    _eq(jnp.select(conds, choices, default=-7), np.select(conds, choices, default=-7))
    assert jnp.select(conds, choices).dtype == np.float32
    _eq(ember.jit(lambda v: jnp.select([v < 0, v > 0], [v, 2 * v], 5.0))(x),
        np.select([x < 0, x > 0], [x, 2 * x], 5.0))
    _eq(jnp.select([x < 0], [1], default=np.arange(9)), np.select([x < 0], [1], default=np.arange(9)))
    with pytest.raises(DTypeError):
        jnp.select([np.arange(9)], [x])
    with pytest.raises(ValueError):
        jnp.select([x < 0], [x, x])
    funcs = [lambda v: -v, lambda v: v * 10, 0.5]
    _eq(jnp.piecewise(x, [x < -1, x > 1], funcs), np.piecewise(x, [x < -1, x > 1], funcs))
    _eq(jnp.piecewise(x, x > 0, [lambda v: v + 1]), np.piecewise(x, x > 0, [lambda v: v + 1]))
    _eq(ember.jit(lambda v: jnp.piecewise(v, [v < 0], [0.0, lambda u: u * u]))(x),
        np.piecewise(x, [x < 0], [0.0, lambda u: u * u]))
    x0 = np.float32(3)
    _eq(jnp.piecewise(x0, [True, False], [1, 2]), np.piecewise(x0, [True, False], [1, 2]))


# -- unique and set functions ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(10,), (3, 4), (0,), ()])
def test_unique(dtype, shape):
    x = _data(shape, dtype)
    got = jnp.unique(x, return_index=True, return_inverse=True, return_counts=True)
    ref = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    for g, r in zip(got, ref):
        _eq(g, r)
    _eq(jnp.unique(x), np.unique(x))


def test_unique_nans():
    x = np.array([2.0, np.nan, 1.0, np.nan, 2.0])
    _eq(jnp.unique(x), np.unique(x))
    _eq(jnp.unique(x, equal_nan=False), np.unique(x, equal_nan=False))
    _eq(jnp.unique_values(x), np.unique_values(x))
    g, r = jnp.unique_counts(x), np.unique_counts(x)
    _eq(g.values, r.values)
    _eq(g.counts, r.counts)


def test_unique_array_api():
    x = rng.integers(0, 4, (3, 5))
    g, r = jnp.unique_all(x), np.unique_all(x)
    for f in ("values", "indices", "inverse_indices", "counts"):
        _eq(getattr(g, f), getattr(r, f))
    g, r = jnp.unique_inverse(x), np.unique_inverse(x)
    _eq(g.values, r.values)
    _eq(g.inverse_indices, r.inverse_indices)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unique_axis(axis):
    x = rng.integers(0, 2, (6, 3))
    x = np.concatenate([x, x[:2]], 0)
    got = jnp.unique(x, axis=axis, return_index=True, return_inverse=True, return_counts=True)
    ref = np.unique(x, axis=axis, return_index=True, return_inverse=True, return_counts=True)
    for g, r in zip(got, ref):
        _eq(g, r.reshape(-1) if r.ndim == 1 else r)


def test_unique_size_jit():
    x = np.array([3, 1, 2, 1, 3, 5, 3], np.int32)
    vals, idx, inv, cnt = ember.jit(lambda v: jnp.unique(v, return_index=True, return_inverse=True,
                                                          return_counts=True, size=6))(x)
    rv, ri, rinv, rc = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    _eq(vals, np.concatenate([rv, [1, 1]]))  # padded with the smallest value, as JAX
    _eq(np.asarray(idx)[:4], ri)
    _eq(inv, rinv)
    _eq(cnt, np.concatenate([rc, [0, 0]]))
    _eq(ember.jit(lambda v: jnp.unique(v, size=2))(x), [1, 2])
    _eq(ember.jit(lambda v: jnp.unique(v, size=6, fill_value=-1))(x), [1, 2, 3, 5, -1, -1])
    _eq(ember.jit(lambda v: jnp.unique_values(v, size=5, fill_value=0))(x), [1, 2, 3, 5, 0])
    with pytest.raises(TracerError, match="size="):
        ember.jit(jnp.unique)(x)


@pytest.mark.parametrize("method", ["auto", "compare_all", "sort"])
def test_isin(method):
    e = rng.integers(0, 10, (3, 4))
    t = rng.integers(0, 10, 6)
    _eq(jnp.isin(e, t, method=method), np.isin(e, t))
    _eq(jnp.isin(e, t, invert=True, method=method), np.isin(e, t, invert=True))
    _eq(ember.jit(lambda a, b: jnp.isin(a, b, method=method))(e, t), np.isin(e, t))
    big = rng.integers(0, 200, 100)
    _eq(jnp.isin(e * 20, big, method=method), np.isin(e * 20, big))
    f = np.array([1.0, np.nan, 2.5])
    _eq(jnp.isin(f, jnp.asarray([np.nan, 2.5]), method=method), np.isin(f, [np.nan, 2.5]))
    _eq(jnp.isin(f, np.zeros(0)), np.isin(f, np.zeros(0)))
    _eq(jnp.in1d(e, t), np.isin(e.ravel(), t))


def test_set_functions():
    a = np.array([5, 1, 2, 3, 3, 9, 1])
    b = np.array([3, 7, 1, 1, 8])
    _eq(jnp.intersect1d(a, b), np.intersect1d(a, b))
    for g, r in zip(jnp.intersect1d(a, b, return_indices=True), np.intersect1d(a, b, return_indices=True)):
        _eq(g, r)
    _eq(jnp.union1d(a, b), np.union1d(a, b))
    _eq(jnp.setdiff1d(a, b), np.setdiff1d(a, b))
    _eq(jnp.setdiff1d(np.array([4, 2, 9]), b, assume_unique=True),
        np.setdiff1d(np.array([4, 2, 9]), b, assume_unique=True))
    _eq(jnp.setxor1d(a, b), np.setxor1d(a, b))
    f = np.array([1.5, np.nan, 2.0])
    _eq(jnp.union1d(f, jnp.asarray([2.0, np.nan])), np.union1d(f, [2.0, np.nan]))
    _eq(jnp.intersect1d(f, jnp.asarray([np.nan, 1.5])), np.intersect1d(f, [np.nan, 1.5]))
    _eq(jnp.union1d(np.zeros(0), np.zeros(0)), np.union1d(np.zeros(0), np.zeros(0)))


def test_set_functions_size_jit():
    a = np.array([5, 1, 2, 3, 3, 9, 1])
    b = np.array([3, 7, 1, 1, 8])
    j = ember.jit
    _eq(j(lambda p, q: jnp.intersect1d(p, q, size=4, fill_value=0))(a, b), [1, 3, 0, 0])
    _eq(j(lambda p, q: jnp.union1d(p, q, size=9))(a, b), [1, 2, 3, 5, 7, 8, 9, 1, 1])
    _eq(j(lambda p, q: jnp.setdiff1d(p, q, size=4, fill_value=-1))(a, b), [2, 5, 9, -1])
    _eq(j(lambda p, q: jnp.setxor1d(p, q, size=3))(a, b), [2, 5, 7])
    with pytest.raises(TracerError, match="size="):
        j(jnp.setdiff1d)(a, b)


# -- properties -------------------------------------------------------------------------------------

_floats = hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=6),
                     elements=st.one_of(st.integers(-3, 3).map(float), st.floats(-100, 100),
                                        st.just(float("nan"))))


@settings(max_examples=30, deadline=None)
@given(_floats, st.booleans())
def test_prop_sort_argsort(x, descending):
    s = np.asarray(jnp.sort(x, axis=-1, descending=descending))
    i = np.asarray(jnp.argsort(x, axis=-1, descending=descending))
    np.testing.assert_array_equal(np.take_along_axis(x, i, -1), s)
    if descending:
        ref_i = np.flip(np.argsort(np.flip(x, -1), axis=-1, kind="stable"), -1)
        ref_i = x.shape[-1] - 1 - ref_i
        np.testing.assert_array_equal(i, ref_i)
    else:
        np.testing.assert_array_equal(s, np.sort(x, axis=-1))
        np.testing.assert_array_equal(i, np.argsort(x, axis=-1, kind="stable"))


@settings(max_examples=30, deadline=None)
@given(hnp.arrays(np.int32, st.integers(0, 12), elements=st.integers(-20, 20)),
       hnp.arrays(np.int32, st.integers(0, 8), elements=st.integers(-25, 25)),
       st.sampled_from(["left", "right"]))
def test_prop_searchsorted(a, v, side):
    a = np.sort(a)
    ref = np.searchsorted(a, v, side=side)
    np.testing.assert_array_equal(jnp.searchsorted(a, v, side=side), ref)
    np.testing.assert_array_equal(jnp.searchsorted(a, v, side=side, method="compare_all"), ref)


# -- transformations and dynamic axes ---------------------------------------------------------------


def test_vmap_grad_dynamic_axes():
    x = rng.normal(size=(3, 6))
    _eq(ember.vmap(lambda r: jnp.searchsorted(jnp.sort(r), 0.0))(x),
        [np.searchsorted(np.sort(r), 0.0) for r in x])
    _eq(ember.vmap(lambda r: jnp.nonzero(r > 0, size=6, fill_value=-1)[0])(x),
        [np.concatenate([np.nonzero(r > 0)[0], [-1] * (6 - (r > 0).sum())]) for r in x])
    _eq(ember.vmap(jnp.argsort)(x), np.argsort(x, axis=1, kind="stable"))
    g = ember.grad(lambda v: (jnp.sort(v) * jnp.arange(6.0)).sum())(x[0])
    np.testing.assert_allclose(g, np.argsort(np.argsort(x[0])).astype(float))
    for f, ref in ((lambda v: jnp.sort(v, axis=0), lambda v: np.sort(v, axis=0)),
                   (lambda v: jnp.searchsorted(jnp.sort(v[:, 0]), v),
                    lambda v: np.searchsorted(np.sort(v[:, 0]), v)),
                   (lambda v: jnp.unique(v, size=4), lambda v: np.unique(v)[:4])):
        g = ember.jit(f, dynamic_axes=["batch, _"])
        for n in (4, 7):
            v = rng.integers(0, 5, (n, 3)).astype(np.float64)
            _eq(g(v), ref(v))
