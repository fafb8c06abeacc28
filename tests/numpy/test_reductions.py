"""Reductions against NumPy: axes (None/int/tuple/negative), keepdims, dtype rules, where/initial,
empty and 0-d operands, NaN variants, errors, symbolic shapes, and equality under ``jit``."""

import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
import ember.numpy as jnp
from ember._src import shapes as sh
from ember._src.core import ShapedArray
from ember._src.program import trace_to_program
from ember.errors import DTypeError, ShapeError
from tests.numpy.helpers import assert_jit_close

rng = np.random.default_rng(0)


def _data(shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        return rng.integers(0 if dtype.kind == "u" else -4, 5, size=shape).astype(dtype)
    return rng.uniform(-2, 2, size=shape).astype(dtype)


def _tol(dtype):
    return {np.float32: 1e-5, np.float64: 1e-12}.get(np.dtype(dtype).type, 0)


def _check(name, x, *, np_fn=None, rtol=None, jit=True, **kw):
    """``jnp.<name>(x, **kw)`` equals NumPy's value (and shape); under jit equals eager (exactly
    for integers, within the dtype's jit tolerance for floats)."""
    f = getattr(jnp, name)
    got = f(x, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = (np_fn or getattr(np, name))(x, **kw)
    assert got.shape == np.shape(want), (name, kw, got.shape, np.shape(want))
    tol = _tol(got.dtype) if rtol is None else rtol
    g = np.asarray(got)
    if g.dtype.kind not in "bc":
        g = g.astype(np.float64)
    np.testing.assert_allclose(g, want, rtol=tol, atol=tol)
    if jit:
        jitted = ember.jit(lambda v: f(v, **kw))(x)
        assert jitted.dtype == got.dtype and jitted.shape == got.shape
        assert_jit_close(jitted, got)
    return got


AXES = [None, 0, -1, (0, 2), (-1, -3), (1,), ()]
BASIC = ["sum", "prod", "mean", "var", "std", "max", "min", "ptp"]


@pytest.mark.parametrize("name", BASIC)
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_basic_reductions_axes_keepdims(name, axis, keepdims):
    x = _data((2, 3, 4), np.float32)
    if name == "ptp" and isinstance(axis, tuple) and len(axis) == 0:
        return  # np.ptp rejects an empty axis tuple
    _check(name, x, axis=axis, keepdims=keepdims, jit=axis in (None, (0, 2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int8, np.uint8, np.bool_])
@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean", "var", "std"])
def test_reductions_over_dtypes(name, dtype):
    x = _data((3, 5), dtype)
    _check(name, x, axis=1, rtol=1e-5)
    _check(name, x, rtol=1e-5, jit=False)


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean", "var", "all", "any", "argmax",
                                  "argmin"])
def test_zero_dim_operands(name):
    x = np.array(1.5, np.float32)
    _check(name, x)
    ref = getattr(np, name)  # reducing a 0-d array over axis 0 / -1 is reducing it whole (np.sum)
    _check(name, x, axis=0, np_fn=lambda v, axis: ref(v))
    _check(name, x, axis=-1, np_fn=lambda v, axis: ref(v), jit=False)
    with pytest.raises(ShapeError, match="axis 1"):
        getattr(jnp, name)(x, axis=1)


def test_accumulation_dtypes_follow_jax():
    expect_sum = {np.bool_: np.int32, np.int8: np.int32, np.int16: np.int32, np.uint8: np.uint32,
                  np.int32: np.int32, np.int64: np.int64, np.uint32: np.uint32, np.float16: np.float16,
                  ml_dtypes.bfloat16: ml_dtypes.bfloat16, np.float32: np.float32, np.float64: np.float64}
    for src, want in expect_sum.items():
        x = np.ones((3,), src)
        assert jnp.sum(x).dtype == np.dtype(want), src
        assert jnp.prod(x).dtype == np.dtype(want), src
        assert jnp.cumsum(x).dtype == np.dtype(want), src
    expect_mean = {np.bool_: np.float32, np.int8: np.float32, np.int32: np.float32, np.int64: np.float64,
                   np.float16: np.float16, np.float32: np.float32, np.float64: np.float64}
    for src, want in expect_mean.items():
        x = np.ones((3,), src)
        assert jnp.mean(x).dtype == np.dtype(want), src
        assert jnp.var(x).dtype == np.dtype(want), src
    assert jnp.sum(np.ones(3, np.float32), dtype=np.float64).dtype == np.float64
    assert jnp.argmax(np.ones(3)).dtype == np.int32
    assert jnp.max(np.ones(3, np.int8)).dtype == np.int8
    assert jnp.count_nonzero(np.ones(3)).dtype == np.int32
    assert jnp.var(np.ones(3, np.complex64)).dtype == np.float32
    # Python scalars stay weakly typed
    assert jnp.sum(3).dtype == np.int32 and jnp.sum(3).weak_type
    assert jnp.sum(2.5).weak_type and not jnp.sum(np.float32(2.5)).weak_type


def test_low_precision_accumulates_in_float32():
    x = np.ones(4096, np.float16)  # a float16 running sum saturates at 2048
    assert float(jnp.sum(x)) == 4096.0
    assert jnp.sum(x).dtype == np.float16
    np.testing.assert_allclose(float(jnp.mean(np.full(4096, 0.1, np.float16))), 0.1, rtol=1e-3)
    prog = ember.make_program(jnp.sum)(x)
    assert "f32" in str(prog)
    xb = np.ones(1000, ml_dtypes.bfloat16)
    assert float(jnp.sum(xb)) == 1000.0  # bfloat16 has 8 bits of mantissa: 256 + 1 == 256


def test_int_overflow_wraps_like_int32_accumulator():
    x = np.full(3, 100, np.int8)
    assert int(jnp.sum(x)) == 300  # accumulated in int32, not int8
    assert int(jnp.sum(x, dtype=np.int8)) == np.int8(300 - 256)


def test_empty_reductions():
    x = np.zeros((0, 3), np.float32)
    np.testing.assert_array_equal(jnp.sum(x, axis=0), np.zeros(3))
    np.testing.assert_array_equal(jnp.prod(x, axis=0), np.ones(3))
    assert jnp.sum(x, axis=1).shape == (0,)
    assert float(jnp.sum(x)) == 0.0 and float(jnp.prod(x)) == 1.0
    assert bool(jnp.all(x)) and not bool(jnp.any(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert np.isnan(float(jnp.mean(x)))
    np.testing.assert_array_equal(jnp.max(x, axis=1), np.zeros((0,)))
    with pytest.raises(ValueError, match="axis 0"):
        jnp.max(x, axis=0)
    with pytest.raises(ValueError, match="axis 0"):
        jnp.min(x)
    with pytest.raises(ValueError, match="empty"):
        jnp.argmax(x)
    np.testing.assert_array_equal(jnp.max(x, axis=0, initial=-7.0), np.max(x, axis=0, initial=-7.0))
    np.testing.assert_array_equal(jnp.cumsum(x, axis=0), np.cumsum(x, axis=0))
    assert jnp.sum(x, axis=0, keepdims=True).shape == (1, 3)
    jitted = ember.jit(lambda v: jnp.prod(v, axis=0))(x)
    np.testing.assert_array_equal(jitted, np.ones(3))


def test_bad_axes_raise_naming_the_axis():
    x = np.ones((2, 3), np.float32)
    for fn in (jnp.sum, jnp.mean, jnp.max, jnp.var, jnp.all, jnp.argmax, jnp.cumsum):
        with pytest.raises(ShapeError, match="axis 2"):
            fn(x, axis=2)
        with pytest.raises(ShapeError, match="axis -3"):
            fn(x, axis=-3)
    with pytest.raises(ShapeError, match="repeated"):
        jnp.sum(x, axis=(0, -2))
    with pytest.raises(TypeError):
        jnp.argmax(x, axis=(0, 1))
    with pytest.raises(DTypeError):
        jnp.max(np.ones(2, np.complex64))
    with pytest.raises(NotImplementedError):
        jnp.sum(x, out=np.zeros(3))


def test_where_and_initial_match_numpy():
    x = _data((3, 4), np.float32)
    m = rng.random((3, 4)) > 0.4
    m[1] = False  # one all-masked row
    _check("sum", x, axis=1, where=m)
    _check("prod", x, axis=0, where=m)
    _check("sum", x, axis=1, where=m, initial=2.5)
    _check("prod", x, initial=2.0, rtol=1e-5)
    _check("max", x, axis=1, where=m, initial=-5.0)
    _check("min", x, axis=(0, 1), where=m, initial=5.0)
    _check("max", x, axis=0, initial=1.0)
    _check("mean", x, axis=0, where=m)
    _check("var", x, axis=0, where=m)
    _check("std", x, axis=1, where=m[:, :1])  # a broadcast mask
    _check("all", x > 0, axis=1, where=m)
    _check("any", x > 0, axis=0, where=m)
    with pytest.raises(ValueError, match="initial"):
        jnp.max(x, where=m)
    with pytest.raises(ShapeError):
        jnp.sum(x, where=np.ones((2, 4), bool))


@pytest.mark.parametrize("ddof", [0, 1, 2])
def test_var_std_ddof(ddof):
    x = _data((4, 5), np.float64)
    _check("var", x, axis=0, ddof=ddof)
    _check("std", x, axis=-1, ddof=ddof, keepdims=True)
    np.testing.assert_allclose(jnp.var(x, correction=ddof), np.var(x, ddof=ddof), rtol=1e-12)
    z = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(np.complex128)
    np.testing.assert_allclose(jnp.var(z, axis=1, ddof=ddof), np.var(z, axis=1, ddof=ddof), rtol=1e-12)


def test_mean_of_complex_and_ints():
    z = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(np.complex64)
    _check("mean", z, axis=0, rtol=1e-5)
    _check("mean", np.arange(10, dtype=np.int32), rtol=1e-6)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin(name):
    x = _data((3, 4, 5), np.float32)
    for axis in (None, 0, 1, -1):
        _check(name, x, axis=axis)
        _check(name, x, axis=axis, keepdims=True, jit=False)
    xi = rng.integers(0, 3, (4, 6)).astype(np.int32)  # ties: first occurrence wins
    _check(name, xi, axis=1)
    _check(name, xi > 1, axis=0)
    xn = x.copy()
    xn[1, 2, 3] = np.nan
    _check(name, xn)  # NaN wins, as in NumPy
    _check(name, xn, axis=2)


@pytest.mark.parametrize("name", ["all", "any"])
def test_all_any(name):
    x = rng.integers(0, 2, (3, 4, 2)).astype(np.int32)
    for axis in (None, 1, (0, 2), -1):
        _check(name, x, axis=axis)
        _check(name, x.astype(bool), axis=axis, keepdims=True, jit=False)
        _check(name, x.astype(np.float32), axis=axis, jit=False)
    assert jnp.all(x).dtype == np.bool_


def test_count_nonzero_and_ptp():
    x = rng.integers(-1, 2, (3, 5)).astype(np.float32)
    _check("count_nonzero", x)
    _check("count_nonzero", x, axis=1)
    _check("count_nonzero", x, axis=(0, 1), keepdims=True, jit=False)
    _check("ptp", x, axis=0)
    _check("ptp", x.astype(np.int32), axis=1, keepdims=True)
    with pytest.raises(DTypeError):
        jnp.ptp(x > 0)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_cumulative(name):
    x = _data((3, 4), np.float32)
    for axis in (None, 0, 1, -1):
        _check(name, x, axis=axis, rtol=1e-5)
    _check(name, np.array(2.0, np.float32))
    _check(name, np.zeros((0, 3), np.float32), axis=1)
    xi = rng.integers(1, 3, (5,)).astype(np.int8)
    got = getattr(jnp, name)(xi)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, getattr(np, name)(xi.astype(np.int32)))
    got = getattr(jnp, name)(np.array([True, False, True]))
    np.testing.assert_array_equal(got, getattr(np, name)(np.array([1, 0, 1])))
    assert getattr(jnp, name)(x, dtype=np.float64).dtype == np.float64


@pytest.mark.parametrize("name", ["cumulative_sum", "cumulative_prod"])
def test_cumulative_array_api(name):
    x = _data((3, 4), np.float32)
    for kw in ({"axis": 0}, {"axis": -1, "include_initial": True}):
        got = getattr(jnp, name)(x, **kw)
        np.testing.assert_allclose(got, getattr(np, name)(x, **kw), rtol=1e-5)
    v = _data((5,), np.int16)
    got = getattr(jnp, name)(v, include_initial=True)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, getattr(np, name)(v.astype(np.int32), include_initial=True))
    with pytest.raises(ShapeError, match="axis"):
        getattr(jnp, name)(x)
    with pytest.raises(ShapeError):
        getattr(jnp, name)(np.float32(1))
    jitted = ember.jit(lambda a: getattr(jnp, name)(a, axis=1, include_initial=True))(x)
    np.testing.assert_array_equal(jitted, getattr(jnp, name)(x, axis=1, include_initial=True))


NAN_FUNCS = ["nansum", "nanprod", "nanmean", "nanvar", "nanstd", "nanmax", "nanmin", "nanargmax",
             "nanargmin", "nancumsum", "nancumprod"]


@pytest.mark.parametrize("name", NAN_FUNCS)
def test_nan_functions(name):
    x = _data((4, 5), np.float64)
    x[rng.random((4, 5)) < 0.3] = np.nan
    x[:, 0] = 1.0  # keep every row and column with a number so NumPy's nanarg* does not raise
    x[0, :] = 2.0
    axes = (None, 0, 1) if name.startswith("nanarg") or "cum" in name else (None, 0, 1, (0, 1))
    for axis in axes:
        _check(name, x, axis=axis, jit=axis == 1)
    _check(name, x.astype(np.float32), axis=-1, rtol=1e-5, jit=False)
    _check(name, np.arange(6, dtype=np.int32).reshape(2, 3) + 1, axis=0, rtol=1e-6, jit=False)


def test_all_nan_slices():
    x = np.array([[np.nan, np.nan], [1.0, np.nan]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        np.testing.assert_array_equal(jnp.nanmax(x, axis=1), np.nanmax(x, axis=1))
        np.testing.assert_array_equal(jnp.nanmin(x, axis=1), np.nanmin(x, axis=1))
        np.testing.assert_array_equal(jnp.nanmean(x, axis=1), np.nanmean(x, axis=1))
        np.testing.assert_array_equal(jnp.nansum(x, axis=1), np.nansum(x, axis=1))
    # NumPy raises on an all-NaN slice; a traced function cannot, so (as JAX) the index is -1
    np.testing.assert_array_equal(jnp.nanargmax(x, axis=1), [-1, 0])
    np.testing.assert_array_equal(jnp.nanargmin(x, axis=1), [-1, 0])


def test_average():
    x = _data((3, 4), np.float64)
    w = rng.uniform(0.5, 2, (3, 4))
    for kw in ({}, {"axis": 0}, {"axis": 1, "weights": w}, {"weights": w},
               {"axis": 1, "weights": w[0]}, {"axis": 0, "weights": w[:, 0], "keepdims": True},
               {"axis": (0, 1), "weights": w}):
        got = jnp.average(x, **kw)
        want = np.average(x, **kw)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    avg, wsum = jnp.average(x, axis=1, weights=w, returned=True)
    eavg, ewsum = np.average(x, axis=1, weights=w, returned=True)
    np.testing.assert_allclose(avg, eavg, rtol=1e-12)
    np.testing.assert_allclose(wsum, ewsum, rtol=1e-12)
    avg, cnt = jnp.average(x, axis=0, returned=True)
    np.testing.assert_allclose(cnt, np.full(4, 3.0))
    assert jnp.average(np.arange(4, dtype=np.int32)).dtype == np.float32
    with pytest.raises(ShapeError, match="axis"):
        jnp.average(x, weights=w[0])
    with pytest.raises(ShapeError):
        jnp.average(x, axis=0, weights=w[0])


def test_methods_forward_to_reductions():
    x = jnp.asarray(_data((2, 3), np.float32))
    np.testing.assert_allclose(x.sum(axis=0), np.asarray(x).sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(x.mean(), np.asarray(x).mean(), rtol=1e-6)
    np.testing.assert_array_equal(x.argmax(axis=1), np.asarray(x).argmax(axis=1))
    np.testing.assert_allclose(x.std(ddof=1), np.asarray(x).std(ddof=1), rtol=1e-5)
    np.testing.assert_allclose(x.cumsum(axis=1), np.asarray(x).cumsum(axis=1), rtol=1e-6)


def test_symbolic_axes():
    batch = sh.axis("batch")

    def f(x):
        return [jnp.mean(x, axis=0), jnp.sum(x, axis=1, keepdims=True), jnp.var(x, axis=0),
                jnp.max(x, axis=0), jnp.argmax(x, axis=0), jnp.cumsum(x, axis=0)]

    prog, _ = trace_to_program(f, [ShapedArray((batch, 3), np.float32)])
    shapes = [v.aval.shape for v in prog.outvars]
    assert shapes == [(3,), (batch, 1), (3,), (3,), (3,), (batch, 3)]


def test_vmap_of_reductions():
    x = _data((4, 3, 5), np.float32)
    got = ember.vmap(lambda r: jnp.sum(r, axis=1))(x)
    np.testing.assert_allclose(got, x.sum(axis=2), rtol=1e-6)
    got = ember.vmap(lambda r: jnp.var(r))(x)
    np.testing.assert_allclose(got, x.reshape(4, -1).var(axis=1), rtol=1e-5)


# -- property test: random shape, random axis subset ------------------------------------------

_PROP_FUNCS = ["sum", "prod", "max", "min", "mean", "var", "all", "any"]


@st.composite
def _shape_and_axes(draw):
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    mode = draw(st.sampled_from(["none", "int", "tuple"]))
    if mode == "none" or ndim == 0:
        axis = None
    elif mode == "int":
        axis = draw(st.integers(-ndim, ndim - 1))
    else:
        chosen = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
        axis = tuple(a - ndim if draw(st.booleans()) else a for a in chosen)
    return shape, axis


@settings(max_examples=80, deadline=None)
@given(_shape_and_axes(), st.sampled_from(_PROP_FUNCS), st.booleans(),
       st.sampled_from([np.float32, np.float64, np.int32]))
def test_property_reductions_match_numpy(shape_axis, name, keepdims, dtype):
    shape, axis = shape_axis
    x = _data(shape, dtype)
    axes = range(len(shape)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    if name in ("max", "min") and any(shape[a] == 0 for a in axes):
        with pytest.raises(ValueError):
            getattr(jnp, name)(x, axis=axis, keepdims=keepdims)
        return
    rtol = 1e-4 if name in ("prod", "var") and dtype == np.float32 else None
    np_fn = None
    if name in ("sum", "prod") and np.dtype(dtype).kind == "i":
        # JAX semantics: an int32 sum/prod accumulates (and wraps) in int32; NumPy's default is int64
        np_fn = lambda v, **k: getattr(np, name)(v, dtype=v.dtype, **k)  # noqa: E731
    _check(name, x, np_fn=np_fn, axis=axis, keepdims=keepdims, rtol=rtol, jit=False)
