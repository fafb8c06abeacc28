"""ember.vsla precision policy: reductions accumulate wide (float64 under jax_enable_x64, blocked
without it), checked against float64 NumPy sums."""
import numpy as np
import pytest

from ember import vsla
from ember._src import flags


@pytest.mark.parametrize("x64,rtol", [(True, 1e-7), (False, 2e-6)])
def test_sum_of_ten_million_float32(x64, rtol):
    x = np.full(10**7, 0.1, np.float32)
    exact = x.astype(np.float64).sum()  # 1000000.0149 (0.1 rounded to float32, summed exactly)
    with flags.override("jax_enable_x64", x64):
        v = vsla.array(x)
        got = [vsla.jit(vsla.sum)(v), vsla.sum(v), vsla.jit(vsla.mean)(v)]
        assert all(g.dtype == np.float32 for g in got)
        assert all(g.shape == (1,) for g in got)  # a full sum is the rank-1 [s] (no rank 0, §3.2)
        vals = [np.asarray(g.logical()).item() for g in got]
    np.testing.assert_allclose(vals[:2], [exact, exact], rtol=rtol)
    np.testing.assert_allclose(vals[2], exact / 1e7, rtol=rtol)


@pytest.mark.parametrize("x64", [True, False])
def test_blocked_and_wide_sums_match_float64_on_every_size_class(x64):
    rng = np.random.default_rng(11)
    with flags.override("jax_enable_x64", x64):
        f = vsla.jit(lambda v: (vsla.sum(v), vsla.sum(v, 0), vsla.layer_norm(v), vsla.softmax(v)))
        for shape in [(1, 1), (3, 64), (2, 65), (5, 4097), (70, 3)]:
            x = rng.standard_normal(shape).astype(np.float32)
            s1, s0, ln, sm = f(vsla.array(x))
            x64v = x.astype(np.float64)
            np.testing.assert_allclose(s1.to_numpy(), x64v.sum(-1), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(np.asarray(s0.logical()), x64v.sum(0), rtol=1e-5, atol=1e-5)
            c = x64v - x64v.mean(-1, keepdims=True)
            want = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)
            np.testing.assert_allclose(np.asarray(ln.logical()), want, rtol=1e-4, atol=1e-4)
            e = np.exp(x64v - x64v.max(-1, keepdims=True))
            np.testing.assert_allclose(np.asarray(sm.logical()), e / e.sum(-1, keepdims=True), rtol=1e-5,
                                       atol=1e-7)
