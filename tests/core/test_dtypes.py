"""Type promotion against JAX's documented promotion table (x64 semantics) and NumPy-style defaults."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src import dtypes as dt

B, U1, U2, U4, U8 = dt.bool_, dt.uint8, dt.uint16, dt.uint32, dt.uint64
I1, I2, I4, I8 = dt.int8, dt.int16, dt.int32, dt.int64
BF, F2, F4, F8, C4, C8 = dt.bfloat16, dt.float16, dt.float32, dt.float64, dt.complex64, dt.complex128

# (a, b, expected) for strong dtypes, from the JAX type-promotion table ("Type promotion semantics").
STRONG_TABLE = [
    (B, B, B), (B, U1, U1), (B, I4, I4), (B, F2, F2), (B, C4, C4),
    (U1, I1, I2), (U2, I1, I4), (U4, I1, I8), (U1, U2, U2), (U4, U8, U8),
    (I1, I2, I2), (I4, I8, I8), (I2, U2, I4), (U8, I8, F8),
    (BF, F2, F4), (F2, F4, F4), (F4, F8, F8), (I4, F2, F2), (I8, BF, BF), (U8, F4, F4),
    (F4, C4, C4), (F8, C4, C8), (C4, C8, C8), (I8, C4, C4),
]


@pytest.mark.parametrize("a,b,expected", STRONG_TABLE)
def test_strong_promotion_table(a, b, expected):
    assert dt.promote_types(a, b) == expected
    assert dt.promote_types(b, a) == expected  # symmetric


# (array dtype, python scalar, expected dtype): weak scalars yield to the array's dtype
WEAK_TABLE = [
    (F4, 2.0, F4), (F2, 2.0, F2), (BF, 2, BF), (I8, 3, I8), (U1, 3, U1), (I1, 3, I1),
    (I4, 2.0, F4), (U8, 2.0, F8), (I8, 2.0, F8),  # 64-bit ints give float64
    (B, 1, I4), (B, 1.5, F4), (F4, 1j, C4), (F8, 1j, C8),
    (I4, 1j, C4),
]


@pytest.mark.parametrize("adt,scalar,expected", WEAK_TABLE)
def test_weak_scalar_promotion(adt, scalar, expected):
    x = jnp.asarray(np.ones(3, dtype=adt))
    assert (x * scalar).dtype == expected
    assert (scalar * x).dtype == expected


def test_python_defaults_and_numpy_inputs():
    assert jnp.asarray(1.5).dtype == F4
    assert jnp.asarray(3).dtype == I4
    assert jnp.asarray([1.0, 2.0]).dtype == F4
    assert jnp.asarray(np.ones(2)).dtype == F8  # NumPy float64 stays float64
    assert (jnp.asarray(np.ones(2)) + 1.0).dtype == F8
    assert jnp.asarray(2**40).dtype == I8


def test_weak_type_is_tracked():
    assert jnp.asarray(2.0).weak_type
    assert not jnp.asarray(np.float32(2.0)).weak_type
    assert (jnp.asarray(2.0) + 1).weak_type
    assert not (jnp.asarray(2.0) + jnp.ones(2, dtype=F4) if hasattr(jnp, "ones") else
                jnp.asarray(2.0) + jnp.asarray(np.ones(2, F4))).weak_type


def test_weak_int_overflow_raises():
    x = jnp.asarray(np.ones(2, dtype=np.int8))
    with pytest.raises(OverflowError, match="out of bounds for int8"):
        x + 1000


def test_all_supported_dtypes_roundtrip():
    for d in dt.SUPPORTED:
        a = np.zeros((2, 3), dtype=d)
        x = jnp.asarray(a)
        assert x.dtype == d and x.shape == (2, 3)
        np.testing.assert_array_equal(np.asarray(x), a)


def test_result_type_and_unsupported():
    assert dt.result_type(F4, 1.0) == F4
    assert dt.result_type(I4, 1.0) == F4
    with pytest.raises(ember.errors.DTypeError):
        dt.canonicalize(np.dtype("U3"))


def test_float_to_int_casts_saturate_and_popcount_uses_bit_pattern():
    from ember import lax
    x = np.array([np.inf, -np.inf, np.nan, 1e30, -3.7], np.float64)
    i64 = np.iinfo(np.int64)
    np.testing.assert_array_equal(lax.convert_element_type(x, np.int64), [i64.max, i64.min, 0, i64.max, -3])
    np.testing.assert_array_equal(lax.convert_element_type(x, np.uint8), [255, 0, 0, 255, 0])
    # two's complement: -1 has every bit set (as XLA counts it)
    np.testing.assert_array_equal(lax.population_count(np.array([-1, 5], np.int32)), [32, 2])
    np.testing.assert_array_equal(lax.population_count(np.array([-2], np.int8)), [7])
