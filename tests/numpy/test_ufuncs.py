"""Elementwise functions against NumPy: dtypes, broadcasting, 0-d, empty, jit, and properties."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ember
import ember.numpy as jnp
from ember.errors import DTypeError, ShapeError

SHAPES = [(), (0,), (5,), (2, 3), (2, 1, 4)]
rng = np.random.default_rng(0)


def _data(shape, dtype, lo=-2.0, hi=2.0):
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) > 0.5
    if np.dtype(dtype).kind in "iu":
        lo = max(lo, 0) if np.dtype(dtype).kind == "u" else lo
        return rng.integers(int(lo) - 3, int(hi) + 4, size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def _tol(dtype):
    return {np.float32: 2e-6, np.float64: 1e-12}.get(np.dtype(dtype).type, 0)


UNARY_FLOAT = {
    "exp": (np.exp, -3, 3), "log": (np.log, 0.1, 5), "log1p": (np.log1p, -0.5, 5),
    "expm1": (np.expm1, -2, 2), "sqrt": (np.sqrt, 0, 4), "tanh": (np.tanh, -3, 3),
    "sin": (np.sin, -3, 3), "cos": (np.cos, -3, 3), "tan": (np.tan, -1, 1),
    "arcsin": (np.arcsin, -0.9, 0.9), "arccos": (np.arccos, -0.9, 0.9), "arctan": (np.arctan, -3, 3),
    "sinh": (np.sinh, -2, 2), "cosh": (np.cosh, -2, 2), "arcsinh": (np.arcsinh, -3, 3),
    "arccosh": (np.arccosh, 1.1, 4), "arctanh": (np.arctanh, -0.9, 0.9), "exp2": (np.exp2, -3, 3),
    "log2": (np.log2, 0.1, 4), "log10": (np.log10, 0.1, 4), "cbrt": (np.cbrt, -3, 3),
    "reciprocal": (np.reciprocal, 0.5, 3), "floor": (np.floor, -3, 3), "ceil": (np.ceil, -3, 3),
    "trunc": (np.trunc, -3, 3), "rint": (np.rint, -3, 3), "sign": (np.sign, -3, 3),
    "negative": (np.negative, -3, 3), "absolute": (np.absolute, -3, 3), "square": (np.square, -3, 3),
}


@pytest.mark.parametrize("name", sorted(UNARY_FLOAT))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_unary_float(name, dtype, shape):
    ref, lo, hi = UNARY_FLOAT[name]
    x = _data(shape, dtype, lo, hi)
    fn = getattr(jnp, name)
    out = fn(x)
    assert out.dtype == dtype and out.shape == shape
    np.testing.assert_allclose(np.asarray(out), ref(x), rtol=4 * _tol(dtype), atol=_tol(dtype))
    np.testing.assert_allclose(np.asarray(ember.jit(fn)(x)), np.asarray(out), rtol=4 * _tol(dtype))


@pytest.mark.parametrize("name", ["exp", "sqrt", "sin", "log1p"])
def test_unary_int_input_promotes_to_float32(name):
    x = np.array([1, 2, 3], np.int32)
    out = getattr(jnp, name)(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, getattr(np, name)(x.astype(np.float32)), rtol=1e-6)


BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "true_divide": np.true_divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": np.power, "arctan2": np.arctan2,
    "floor_divide": np.floor_divide, "remainder": np.remainder, "fmod": np.fmod,
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal,
}


# int inputs of arctan2 and true_divide promote to float: test_int_true_divide_and_int_power covers them
@pytest.mark.parametrize("name,dtype", [(n, d) for n in sorted(BINARY)
                                        for d in (np.float32, np.float64, np.int32)
                                        if not (n in ("arctan2", "true_divide") and d == np.int32)])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1), (1, 5)), ((), (3,)),
                                    ((0, 3), (3,))])
def test_binary_broadcasting(name, dtype, shapes):
    a = _data(shapes[0], dtype, 0.5 if name == "power" else -3, 3)
    b = _data(shapes[1], dtype, 1 if name == "power" else -3, 3)
    if name in ("floor_divide", "remainder", "fmod", "true_divide"):
        b = np.where(b == 0, 2, b).astype(dtype)
    if name == "power" and dtype == np.int32:
        b = np.abs(b).astype(dtype)
    fn = getattr(jnp, name)
    out = fn(a, b)
    ref = BINARY[name](a, b)
    assert out.shape == ref.shape
    assert out.dtype == ref.dtype
    np.testing.assert_allclose(np.asarray(out), ref, rtol=4 * _tol(dtype), atol=_tol(dtype))
    np.testing.assert_allclose(np.asarray(ember.jit(fn)(a, b)), ref, rtol=4 * _tol(dtype), atol=_tol(dtype))


def test_int_true_divide_and_int_power():
    a = np.array([7, -7, 3], np.int32)
    b = np.array([2, 2, -4], np.int32)
    np.testing.assert_allclose(jnp.true_divide(a, b), (a / b).astype(np.float32))
    assert jnp.true_divide(a, b).dtype == np.float32
    np.testing.assert_array_equal(jnp.floor_divide(a, b), a // b)
    np.testing.assert_array_equal(jnp.remainder(a, b), a % b)
    np.testing.assert_array_equal(jnp.power(a, np.array([3, 2, 0], np.int32)), a ** np.array([3, 2, 0]))
    np.testing.assert_array_equal(jnp.power(a, 3), a ** 3)


def test_bitwise_and_logical():
    a = np.array([1, 6, 12, -3], np.int32)
    b = np.array([3, 5, 10, 7], np.int32)
    for name in ["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"]:
        np.testing.assert_array_equal(getattr(jnp, name)(a, np.abs(b) % 8 if "shift" in name else b),
                                      getattr(np, name)(a, np.abs(b) % 8 if "shift" in name else b))
    np.testing.assert_array_equal(jnp.invert(a), np.invert(a))
    p, q = np.array([True, False, True]), np.array([True, True, False])
    for name in ["logical_and", "logical_or", "logical_xor"]:
        np.testing.assert_array_equal(getattr(jnp, name)(p, q), getattr(np, name)(p, q))
    np.testing.assert_array_equal(jnp.logical_not(a), np.logical_not(a))
    with pytest.raises(DTypeError, match="integer or bool"):
        jnp.bitwise_and(np.ones(2, np.float32), np.ones(2, np.float32))


def test_nan_inf_predicates_and_where_clip():
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], np.float32)
    np.testing.assert_array_equal(jnp.isnan(x), np.isnan(x))
    np.testing.assert_array_equal(jnp.isinf(x), np.isinf(x))
    np.testing.assert_array_equal(jnp.isfinite(x), np.isfinite(x))
    np.testing.assert_array_equal(jnp.maximum(x, 0.5), np.maximum(x, 0.5))  # NaN propagates
    c = np.array([True, False, True, False, True])
    np.testing.assert_array_equal(jnp.where(c, x, -1.0), np.where(c, x, np.float32(-1)))
    y = np.linspace(-2, 2, 7).astype(np.float32)
    np.testing.assert_allclose(jnp.clip(y, -1, 1), np.clip(y, -1, 1))
    np.testing.assert_allclose(jnp.clip(y, max=0.5), np.clip(y, None, 0.5))
    np.testing.assert_allclose(jnp.round(np.array([0.5, 1.5, 2.5, -0.5], np.float32)), [0, 2, 2, -0])


def test_complex_functions():
    z = (rng.normal(size=4) + 1j * rng.normal(size=4)).astype(np.complex64)
    np.testing.assert_allclose(jnp.abs(z), np.abs(z), rtol=1e-6)
    assert jnp.abs(z).dtype == np.float32
    np.testing.assert_allclose(jnp.real(z), z.real)
    np.testing.assert_allclose(jnp.imag(z), z.imag)
    np.testing.assert_allclose(jnp.conj(z), np.conj(z))
    np.testing.assert_allclose(jnp.exp(z), np.exp(z), rtol=1e-5)


def test_operators_on_arrays():
    a = jnp.asarray(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    n = np.asarray(a)
    np.testing.assert_allclose(-a + 2 * a - a / 2 ** a, -n + 2 * n - n / 2 ** n, rtol=1e-6)
    np.testing.assert_allclose(a // 1.5, n // 1.5)
    np.testing.assert_allclose(a % 1.5, n % 1.5)
    np.testing.assert_array_equal(a >= 2, n >= 2)
    np.testing.assert_array_equal((a > 1) & (a < 4), (n > 1) & (n < 4))
    q, r = divmod(a, 1.5)
    np.testing.assert_allclose(q, n // 1.5)
    np.testing.assert_allclose(abs(-a), n)


def test_shape_errors_name_the_operation():
    with pytest.raises(ShapeError, match="add"):
        jnp.add(np.ones((2, 3)), np.ones((4,)))
    with pytest.raises(DTypeError, match="bool"):
        jnp.sign(np.array([True]))


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
                  elements=st.floats(-10, 10)),
       st.sampled_from(["add", "multiply", "maximum", "subtract"]))
def test_property_binary_with_broadcast_row(x, name):
    row = np.linspace(-1, 1, x.shape[-1] if x.ndim else 1)
    if x.ndim == 0:
        row = row.reshape(())
    out = getattr(jnp, name)(x, row)
    np.testing.assert_allclose(np.asarray(out), getattr(np, name)(x, row), rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5),
                  elements=st.floats(-5, 5, width=32)))
def test_property_unary_chain_under_jit(x):
    f = lambda v: jnp.tanh(v) * jnp.exp(-v * v) + jnp.abs(v)  # noqa: E731
    ref = np.tanh(x) * np.exp(-x * x) + np.abs(x)
    np.testing.assert_allclose(np.asarray(ember.jit(f)(x)), ref, rtol=1e-5, atol=1e-6)
