"""The rest of NumPy's elementwise functions and the dtype utilities, against NumPy."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember.errors import DTypeError

rng = np.random.default_rng(1)
SPECIAL = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e-30, 3e30], np.float32)


@pytest.mark.parametrize("name", ["hypot", "logaddexp", "logaddexp2", "copysign", "fmax", "fmin",
                                  "heaviside", "nextafter"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_against_numpy(name, dtype):
    a = np.concatenate([SPECIAL, rng.normal(size=7) * 3]).astype(dtype)
    b = np.roll(a, 3)
    ref = getattr(np, name)(a, b)
    out = getattr(jnp, name)(a, b)
    assert out.dtype == ref.dtype
    np.testing.assert_allclose(np.asarray(out), ref, rtol=4e-6 if dtype == np.float32 else 1e-13)
    np.testing.assert_allclose(np.asarray(ember.jit(getattr(jnp, name))(a, b)), ref,
                               rtol=4e-6 if dtype == np.float32 else 1e-13)


@pytest.mark.parametrize("name", ["sinc", "deg2rad", "rad2deg", "signbit", "spacing", "isposinf",
                                  "isneginf", "fabs"])
def test_unary_against_numpy(name):
    x = np.concatenate([SPECIAL[:6], rng.normal(size=6)]).astype(np.float64)
    np.testing.assert_allclose(np.asarray(getattr(jnp, name)(x)), getattr(np, name)(x), rtol=1e-12,
                               atol=1e-300)


def test_nan_to_num_modf_frexp_ldexp():
    x = np.array([np.nan, np.inf, -np.inf, 1.25, -3.5, 0.0, 7e-3], np.float32)
    np.testing.assert_array_equal(np.asarray(jnp.nan_to_num(x)), np.nan_to_num(x))
    np.testing.assert_array_equal(np.asarray(jnp.nan_to_num(x, nan=-1, posinf=9, neginf=-9)),
                                  np.nan_to_num(x, nan=-1, posinf=9, neginf=-9))
    y = x[3:]
    for got, ref in zip(jnp.modf(y), np.modf(y)):
        np.testing.assert_allclose(np.asarray(got), ref)
    z = np.array([8.0, 0.3, -5.0, 0.0, 1.0, 0.5, 1e-20, 3e20])
    for got, ref in zip(jnp.frexp(z), np.frexp(z)):
        np.testing.assert_allclose(np.asarray(got), ref)
    np.testing.assert_allclose(jnp.ldexp(np.array([0.5, 3.0]), np.array([3, -2])),
                               np.ldexp([0.5, 3.0], [3, -2]).astype(np.float32))


def test_integer_functions():
    a = np.array([12, 18, -7, 0, 0, 35], np.int32)
    b = np.array([8, 27, 21, 5, 0, -14], np.int32)
    np.testing.assert_array_equal(jnp.gcd(a, b), np.gcd(a, b))
    np.testing.assert_array_equal(jnp.lcm(a, b), np.lcm(a, b))
    q, r = jnp.divmod(a, np.where(b == 0, 3, b))
    rq, rr = np.divmod(a, np.where(b == 0, 3, b))
    np.testing.assert_array_equal(q, rq)
    np.testing.assert_array_equal(r, rr)
    with pytest.raises(DTypeError, match="integer"):
        jnp.gcd(np.ones(2), np.ones(2))


def test_complex_helpers():
    z = np.array([1 + 1j, -2 + 0j, 0 - 3j, 0j], np.complex64)
    np.testing.assert_allclose(jnp.angle(z), np.angle(z), rtol=1e-6)
    np.testing.assert_allclose(jnp.angle(z, deg=True), np.angle(z, deg=True), rtol=1e-6)
    np.testing.assert_array_equal(jnp.isreal(z), np.isreal(z))
    np.testing.assert_array_equal(jnp.iscomplex(z), np.iscomplex(z))
    assert jnp.iscomplexobj(z) and not jnp.isrealobj(z) and jnp.isrealobj(np.ones(2))


def test_i0():
    x = np.linspace(-10, 10, 21)
    np.testing.assert_allclose(jnp.i0(x), np.i0(x), rtol=1e-12)


def test_dtype_functions():
    assert jnp.promote_types(jnp.int8, jnp.uint8) == np.int16
    assert jnp.result_type(np.float32, 1.0) == np.float32
    assert jnp.can_cast(np.int32, np.float64) and not jnp.can_cast(np.float64, np.float32)
    assert jnp.can_cast(np.float64, np.float32, "same_kind") and jnp.can_cast(np.float64, np.int8, "unsafe")
    assert jnp.isdtype(jnp.float32, "real floating") and not jnp.isdtype(jnp.int8, "real floating")
    assert jnp.isdtype(jnp.uint8, ("bool", "unsigned integer"))
    assert jnp.issubdtype(jnp.bfloat16, np.floating) and jnp.issubdtype(np.int8, np.integer)
    assert jnp.finfo(jnp.bfloat16).bits == 16 and jnp.iinfo(np.int8).max == 127
    assert jnp.dtype("float32") == np.float32
    with pytest.raises(ValueError, match="kind"):
        jnp.isdtype(jnp.float32, "floaty")
