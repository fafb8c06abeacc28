"""The native backend's float32 ``erfc`` (``em_erfcf`` in csrc/prelude_math.h, inline so GELU's
exact form vectorizes): within 6 ulp of SciPy's float64 ``erfc`` over random float32 bit patterns
of [-12, 12] and a dense grid, exact at the special values, NaN propagated."""

from __future__ import annotations

import numpy as np
from scipy import special

import ember
from ember import lax
from tests.native.conftest import requires_cc

pytestmark = requires_cc


def test_erfc_float32_within_6_ulp():
    rng = np.random.default_rng(7)
    pos = rng.integers(np.float32(1e-30).view(np.int32), np.float32(10.2).view(np.int32), 400_000,
                       dtype=np.int32).view(np.float32)
    x = np.concatenate([pos, -pos, np.linspace(-12, 12, 200_001, dtype=np.float32),
                        np.float32([1e-45, 10.05, 10.06, 10.07])])
    got = np.asarray(ember.jit(lax.erfc)(x)).astype(np.float64)
    ref = special.erfc(x.astype(np.float64))
    ulp = np.maximum(np.spacing(ref.astype(np.float32)).astype(np.float64), 2.0 ** -149)
    err = np.abs(got - ref) / ulp
    assert err.max() <= 6, (err.max(), x[err.argmax()])


def test_erfc_float32_special_values():
    x = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, 30.0, -30.0])
    got = np.asarray(ember.jit(lax.erfc)(x))
    np.testing.assert_array_equal(got[1:], np.float32([0.0, 2.0, 1.0, 1.0, 0.0, 2.0]))
    assert np.isnan(got[0])
