"""ember.vsla: results never depend on the stored capacity (the slack past the logical shape is never
read as data), eagerly and under vsla.jit; maps with f(0) != 0 act on the logical region only."""
import numpy as np
import pytest

import ember.numpy as enp
from ember import vsla


def _pad(x, shape):
    return np.pad(x, [(0, s - d) for s, d in zip(shape, x.shape)])


def _at_capacity(x, cap):
    """A VArray of the logical values ``x`` stored at capacity ``cap`` (zero slack)."""
    return vsla.VArray(enp.asarray(_pad(x, cap)), x.shape)


def test_exp_then_promotion_reads_zeros_past_the_logical_shape():
    e = vsla.array([1.0, 2.0, 3.0]).map(enp.exp) + vsla.array([0.0, 0.0, 0.0, 0.0, 5.0])
    np.testing.assert_allclose(e.to_numpy(), [np.e, np.e**2, np.e**3, 0.0, 5.0], rtol=1e-6)
    lg = vsla.array([1.0, 2.0, 3.0]).map(enp.log) + vsla.array([0.0, 0.0, 0.0, 0.0, 5.0])
    np.testing.assert_allclose(lg.to_numpy(), [0.0, np.log(2), np.log(3), 0.0, 5.0], rtol=1e-6)
    assert np.all(np.isfinite(np.asarray(lg.data)))


def test_map_sum_eager_and_jit_agree():
    x = vsla.array([1.0, 2.0, 3.0])
    want = np.exp([1.0, 2.0, 3.0]).sum()  # 30.19: the slack index 3 is not exp(0) = 1
    eager = vsla.sum(x.map(enp.exp)).to_numpy().item()
    jitted = vsla.jit(lambda v: vsla.sum(v.map(enp.exp)))(x).to_numpy().item()
    np.testing.assert_allclose([eager, jitted], [want, want], rtol=1e-6)


def test_scalar_multiply_by_inf_keeps_slack_zero():
    v = vsla.array([1.0, 2.0, 3.0]) * np.inf
    out = v + vsla.array([0.0, 0.0, 0.0, 0.0, 1.0])
    np.testing.assert_array_equal(out.to_numpy(), [np.inf, np.inf, np.inf, 0.0, 1.0])


_OPS_1D = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "scale_neg": lambda a, b: -(2.0 * a) + b,
    "exp_add": lambda a, b: a.map(enp.exp) + b,
    "cos_mul": lambda a, b: a.map(enp.cos) * b.map(enp.cos),
    "conv": lambda a, b: vsla.conv(a, b),
    "conv_exp": lambda a, b: vsla.conv(a, b).map(enp.exp) + a,
    "kron": lambda a, b: vsla.kron(a, b),
    "sum_exp": lambda a, b: vsla.sum(a.map(enp.exp) + b),
    "mean_exp": lambda a, b: vsla.mean(vsla.conv(a, b).map(enp.exp)),
    "softmax": lambda a, b: vsla.softmax(a.map(enp.exp) + b),
    "norms": lambda a, b: vsla.layer_norm(a.map(enp.exp)) + vsla.rms_norm(b.map(enp.cos)),
}


def _ref_1d(name, x, y):
    """NumPy reference: maps on the logical values, explicit zero padding for promotion."""
    n = max(len(x), len(y))
    px, py = _pad(x, (n,)), _pad(y, (n,))
    ex = _pad(np.exp(x), (n,))

    def ln(z, eps=1e-5):
        c = z - z.mean()
        return c / np.sqrt((c * c).mean() + eps)

    def rms(z, eps=1e-6):
        return z / np.sqrt((z * z).mean() + eps)

    conv = np.convolve(x, y)
    return {
        "add": px + py, "sub": px - py, "mul": px * py, "scale_neg": -2.0 * px + py,
        "exp_add": ex + py, "cos_mul": _pad(np.cos(x), (n,)) * _pad(np.cos(y), (n,)),
        "conv": conv, "conv_exp": np.exp(conv) + _pad(x, conv.shape),
        "kron": np.kron(x, y), "sum_exp": np.asarray([(ex + py).sum()]),
        "mean_exp": np.asarray([np.exp(conv).mean()]),
        "softmax": np.exp(ex + py) / np.exp(ex + py).sum(),
        "norms": _pad(ln(np.exp(x)), (n,)) + _pad(rms(np.cos(y)), (n,)),
    }[name]


@pytest.mark.parametrize("name", sorted(_OPS_1D))
def test_results_independent_of_capacity_eager_and_jit(name):
    rng = np.random.default_rng(len(name))
    op = _OPS_1D[name]
    jitted = vsla.jit(op)
    for m, n in [(3, 5), (5, 2), (1, 7)]:
        x = (0.5 * rng.standard_normal(m)).astype(np.float32)
        y = (0.5 * rng.standard_normal(n)).astype(np.float32)
        want = _ref_1d(name, x.astype(np.float64), y.astype(np.float64))
        base = op(vsla.array(x), vsla.array(y))
        for cx, cy in [(8, 8), (16, 32)]:
            other = op(_at_capacity(x, (cx,)), _at_capacity(y, (cy,)))
            assert other.shape == base.shape
            np.testing.assert_array_equal(np.asarray(other.logical()), np.asarray(base.logical()))
        jit_outs = [jitted(vsla.array(x), vsla.array(y)), jitted(_at_capacity(x, (16,)), vsla.array(y))]
        for got in [base] + jit_outs:
            assert got.shape == np.shape(want)
            np.testing.assert_allclose(np.asarray(got.logical()), want, rtol=2e-5, atol=2e-5)
            # every stored entry past the logical shape is zero
            full = np.asarray(got.data)
            assert np.count_nonzero(full) == np.count_nonzero(np.asarray(got.logical()))


def test_rank2_maps_and_matmul_independent_of_capacity():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 2)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)

    def f(u, w):
        return vsla.matmul(u.map(enp.exp), w.map(enp.exp)) + vsla.transpose(w.map(enp.sin))

    want = _pad(np.exp(a), (3, 5)) @ np.exp(b)  # the contracted axis promoted to 5
    want = _pad(want, (3, 5)) + np.sin(b).T
    jf = vsla.jit(f)
    outs = [f(vsla.array(a), vsla.array(b)), f(_at_capacity(a, (8, 4)), _at_capacity(b, (8, 8))),
            jf(vsla.array(a), vsla.array(b))]
    for got in outs:
        assert got.shape == (3, 5)
        np.testing.assert_allclose(np.asarray(got.logical()), want, rtol=1e-5, atol=1e-5)


def test_slack_given_by_the_caller_is_never_read():
    """§4.1: the slack may hold anything and must not be read. A VArray built from data whose slack
    holds garbage (NaN, infinities, large values) gives the results of the same values stored with
    a zero slack, eagerly and under vsla.jit, for +, *, conv (both paths), kron, sum, matmul and
    softmax (NumPy references on the logical values)."""
    rng = np.random.default_rng(31)
    x, y = rng.standard_normal(5).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    junk = np.array([np.nan, np.inf, -3e38], np.float32)
    gx = vsla.VArray(np.concatenate([x, junk]), (5,))
    gy = vsla.VArray(np.concatenate([y, junk[:1]]), (3,))
    assert not np.asarray(gx.data)[5:].any() and not np.asarray(gy.data)[3:].any()
    ops = {
        "add": (lambda a, b: a + b, _pad(x, (5,)) + _pad(y, (5,))),
        "mul": (lambda a, b: a * b, _pad(x, (5,)) * _pad(y, (5,))),
        "conv_direct": (lambda a, b: vsla.conv(a, b, method="direct"), np.convolve(x, y)),
        "conv_fft": (lambda a, b: vsla.conv(a, b, method="fft"), np.convolve(x, y)),
        "kron": (vsla.kron, np.kron(x, y)),
        "sum": (lambda a, b: vsla.sum(a), np.asarray([x.sum()])),
        "softmax": (lambda a, b: vsla.softmax(a), np.exp(x) / np.exp(x).sum()),
    }
    for name, (f, want) in ops.items():
        for got in (f(gx, gy), vsla.jit(f)(gx, gy)):
            np.testing.assert_allclose(np.asarray(got.logical()), want, rtol=2e-5, atol=2e-5, err_msg=name)
    m = rng.standard_normal((2, 3)).astype(np.float32)
    gm = vsla.VArray(np.pad(m, ((0, 2), (0, 1)), constant_values=np.nan), (2, 3))
    mt = vsla.VArray(np.pad(m.T, ((0, 1), (0, 2)), constant_values=np.inf), (3, 2))
    for got in (vsla.matmul(gm, mt), vsla.jit(vsla.matmul)(gm, mt)):
        np.testing.assert_allclose(np.asarray(got.logical()), m @ m.T, rtol=1e-5, atol=1e-5)
