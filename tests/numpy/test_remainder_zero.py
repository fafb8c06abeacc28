"""ember.numpy.remainder / mod / divmod: the sign of a zero result follows the divisor, as NumPy,
for signed zeros, infinities, NaN and every float dtype, eagerly and under jit."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp

A = np.array([-0.0, 0.0, -2.0, 2.0, -1.0, 1.0, 5.5, -5.5, np.inf, -np.inf, np.nan, 3.0, -3.0, 6e4, -1e-3])


def _same(got, want):
    got = np.asarray(got)
    ok = ((got == want) & (np.signbit(got) == np.signbit(want))) | (np.isnan(got) & np.isnan(want))
    assert ok.all(), (got[~ok], want[~ok])


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("divisor", [1.0, -1.0, np.inf, -np.inf, 0.0, -0.0, 2.5, -2.5])
def test_remainder_signed_zero(dtype, divisor):
    a = A.astype(dtype)
    b = np.full_like(a, divisor)
    with np.errstate(all="ignore"):
        want = np.remainder(a, b)
    _same(jnp.remainder(a, b), want)
    _same(ember.jit(jnp.mod)(a, b), want)
    _same(jnp.divmod(a, b)[1], want)


def test_remainder_scalars_and_ints():
    assert np.signbit(np.asarray(jnp.remainder(-0.0, 1.0))) == np.signbit(np.remainder(-0.0, 1.0))
    assert np.signbit(np.asarray(jnp.remainder(0.0, -1.0))) == np.signbit(np.remainder(0.0, -1.0))
    i = np.array([-7, -6, 0, 5, 7], np.int32)
    np.testing.assert_array_equal(np.asarray(jnp.remainder(i, np.int32(3))), np.remainder(i, 3))
    np.testing.assert_array_equal(np.asarray(jnp.remainder(i, np.int32(-3))), np.remainder(i, -3))
