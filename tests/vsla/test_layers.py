"""Dropout, scatter, strided windows, normalisations with gamma/beta and bfloat16 storage, against
NumPy references and hand-derived gradients, eagerly and under vsla.jit."""
import ml_dtypes
import numpy as np
import pytest

from ember import random, vsla

BF16 = np.dtype(ml_dtypes.bfloat16)


def _np(v):
    return np.asarray(v.logical())


def test_dropout_mask_rate_scale_and_capacity_independence():
    key = random.PRNGKey(7)
    x = np.random.default_rng(0).uniform(1, 2, (300, 333)).astype(np.float32)
    out = _np(vsla.dropout(vsla.array(x), 0.3, key))
    kept = out != 0
    assert abs(kept.mean() - 0.7) < 0.01  # 99,900 draws: the standard deviation is 0.0015
    np.testing.assert_allclose(out[kept], x[kept] / 0.7, rtol=1e-6)
    # the same logical entries get the same mask at any capacity, eagerly and under vsla.jit
    f = vsla.jit(lambda v, k: vsla.dropout(v, 0.3, k))
    small = _np(vsla.dropout(vsla.array(x[:5, :7]), 0.3, key))
    np.testing.assert_array_equal(small != 0, kept[:5, :7])
    np.testing.assert_array_equal(_np(f(vsla.array(x[:5, :7]), key)), small)
    wide = vsla.VArray(np.pad(x[:5, :7], [(0, 11), (0, 25)]), (5, 7))  # stored far above its bucket
    np.testing.assert_array_equal(_np(vsla.dropout(wide, 0.3, key)), small)
    assert not np.asarray(vsla.dropout(wide, 0.3, key).data)[5:].any()  # slack stays zero
    other = _np(vsla.dropout(vsla.array(x), 0.3, random.PRNGKey(8)))
    assert ((other != 0) != kept).mean() > 0.3  # another key, another mask


def test_dropout_gradient_reuses_the_forward_mask():
    key = random.PRNGKey(1)
    x = np.arange(1.0, 41.0, dtype=np.float32)
    y = _np(vsla.dropout(vsla.array(x), 0.5, key))
    mask = (y != 0).astype(np.float32)
    w = np.linspace(-1, 1, 40).astype(np.float32)

    def loss(v, k):
        return vsla.sum(vsla.dropout(v, 0.5, k) * vsla.array(w))

    want = w * mask / 0.5  # gX = g_out * M / (1 - p)
    np.testing.assert_allclose(_np(vsla.grad(loss)(vsla.array(x), key)), want)
    np.testing.assert_allclose(_np(vsla.jit(vsla.grad(loss))(vsla.array(x), key)), want)


def test_dropout_edge_rates():
    v = vsla.array([1.0, 2.0, 3.0])
    key = random.PRNGKey(0)
    assert vsla.dropout(v, 0.0, key) == v and vsla.dropout(v, 0.9, key, deterministic=True) == v
    assert vsla.dropout(v, 1.0, key).to_numpy().size == 0
    with pytest.raises(ValueError):
        vsla.dropout(v, 1.5, key)


def test_scatter_adds_like_numpy_and_is_the_gathers_transpose():
    rng = np.random.default_rng(2)
    u = rng.standard_normal((4, 3)).astype(np.float32)
    idx = [2, 0, 2, 5]
    want = np.zeros((6, 3), np.float32)
    np.add.at(want, idx, u)
    f = vsla.jit(lambda v: vsla.scatter(v, idx, axis=0))
    for out in (vsla.scatter(vsla.array(u), idx), f(vsla.array(u))):
        assert out.shape == (6, 3)
        np.testing.assert_allclose(_np(out), want, rtol=1e-6)
    out = vsla.scatter(vsla.array(u), [1, 0, 1], size=4, axis=1)  # axis 1, explicit size
    w1 = np.zeros((4, 4), np.float32)
    np.add.at(w1.T, [1, 0, 1], u.T)
    assert out.shape == (4, 4)
    np.testing.assert_allclose(_np(out), w1, rtol=1e-6)
    # <scatter(u), g> == <u, gather(g)>: the gradient of a scatter is the gather
    g = rng.standard_normal((6, 3)).astype(np.float32)
    loss = lambda v: vsla.sum(vsla.sum(vsla.scatter(v, idx) * vsla.array(g)))  # noqa: E731
    grads = [vsla.grad(loss)(vsla.array(u)), vsla.jit(vsla.grad(loss))(vsla.array(u))]
    for gr in grads:
        np.testing.assert_allclose(_np(gr), g[idx], rtol=1e-6)
    with pytest.raises(ValueError):
        vsla.scatter(vsla.array(u), [3], size=2)


@pytest.mark.parametrize("w,stride", [(3, 1), (3, 2), (2, 2), (2, 3), (4, 4)])
def test_window_with_stride_matches_sliding_windows(w, stride):
    items = [np.arange(1.0, 2.0 + i % 3) * (i + 1) for i in range(9)]  # lengths 1, 2, 3, 1, ...
    outs = list(vsla.window((vsla.array(x) for x in items), w, stride))
    starts = range(0, len(items) - w + 1, stride)
    assert len(outs) == len(starts)
    for out, s in zip(outs, starts):
        rows = items[s:s + w]
        width = max(len(r) for r in rows)
        want = np.stack([np.pad(r, (0, width - len(r))) for r in rows])
        assert out.shape == (w, width)
        np.testing.assert_array_equal(_np(out), want)
    levels = list(vsla.pyramid((vsla.array([float(i)]) for i in range(1, 8)), 2, 2, 1))
    assert [o.shape for o in levels] == [(2, 2, 1)] * 5
    np.testing.assert_array_equal(_np(levels[1]).ravel(), [2, 3, 3, 4])


def _layer_norm_ref(x, eps=1e-5):
    c = x - x.mean(-1, keepdims=True)
    return c / np.sqrt((c * c).mean(-1, keepdims=True) + eps)


def test_layer_norm_and_rms_norm_with_gamma_beta():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    g, b = rng.standard_normal(5).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    want = np.pad(_layer_norm_ref(x.astype(np.float64)) * g, [(0, 0), (0, 2)]) + b  # beta is longer
    f = vsla.jit(lambda v, gg, bb: vsla.layer_norm(v, gamma=gg, beta=bb))
    for out in (vsla.layer_norm(vsla.array(x), gamma=vsla.array(g), beta=vsla.array(b)),
                f(vsla.array(x), vsla.array(g), vsla.array(b))):
        assert out.shape == (3, 7)
        np.testing.assert_allclose(_np(out), want, rtol=1e-5, atol=1e-5)
        assert not np.asarray(out.data)[3:].any()  # beta does not leak into the leading slack
    x64 = x.astype(np.float64)
    rms = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6)
    r = vsla.rms_norm(vsla.array(x), gamma=vsla.array(g[:3]))  # a shorter gain zeroes the rest
    np.testing.assert_allclose(_np(r), rms * np.pad(g[:3], (0, 2)), rtol=1e-5, atol=1e-6)


def test_gamma_beta_gradients_are_the_spec_formulas():
    """``gγ = Σ_rows g_out ⊙ x̂``, ``gβ = Σ_rows g_out`` (§9.4), eagerly and in one vsla.jit compile."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    g, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    w = rng.standard_normal((4, 6)).astype(np.float32)

    def loss(gg, bb, v):
        return vsla.sum(vsla.sum(vsla.layer_norm(v, gamma=gg, beta=bb) * vsla.array(w)))

    xhat = _layer_norm_ref(x.astype(np.float64))
    for gr in (vsla.grad(loss, (0, 1)), vsla.jit(vsla.grad(loss, (0, 1)))):
        dg, db = gr(vsla.array(g), vsla.array(b), vsla.array(x))
        np.testing.assert_allclose(_np(dg), (w * xhat).sum(0), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(_np(db), w.sum(0), rtol=1e-5, atol=1e-6)


def test_bfloat16_storage_computes_in_float32():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 40)).astype(BF16)
    y = rng.standard_normal((3, 40)).astype(BF16)
    m = rng.standard_normal((40, 5)).astype(BF16)
    xf, yf, mf = (t.astype(np.float32).astype(np.float64) for t in (x, y, m))
    va, vb, vm = vsla.array(x), vsla.array(y), vsla.array(m)
    e = np.exp(xf - xf.max(-1, keepdims=True))
    refs = {
        "sum": (vsla.sum(va), xf.sum(-1)),
        "softmax": (vsla.softmax(va), e / e.sum(-1, keepdims=True)),
        "layer_norm": (vsla.layer_norm(va), _layer_norm_ref(xf)),
        "matmul": (vsla.matmul(va, vm), xf @ mf),
        "conv": (vsla.conv(va, vb), np.stack([np.convolve(p, q) for p, q in zip(xf, yf)])),
        "add": (va + vb, xf + yf),
    }
    jitted = vsla.jit(lambda p, q, r: (vsla.sum(p), vsla.softmax(p), vsla.layer_norm(p), vsla.matmul(p, r),
                                       vsla.conv(p, q), p + q))(va, vb, vm)
    for (name, (out, want)), jout in zip(refs.items(), jitted):
        for o in (out, jout):
            assert o.dtype == BF16, name
            # computed in float32 and rounded once to bfloat16 (8 significant bits)
            tol = 2.0**-8
            got = _np(o).astype(np.float64)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max(), err_msg=name)


def test_gather_gradient_under_vsla_jit_and_nan_locality():
    """gather's gradient (a scatter-add) runs in one vsla.jit compile; a NaN reaches only the
    entries that select it, in gather and scatter alike."""
    w = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    loss = lambda v: vsla.sum(vsla.gather(v, [3, 0, 3, 9]) * vsla.array(w))  # noqa: E731
    dl = vsla.jit(vsla.grad(loss))
    for n in (5, 7, 12):
        x = np.arange(1.0, n + 1, dtype=np.float32)
        want = np.zeros(n, np.float32)
        np.add.at(want, [3, 0, 3], w[:3])
        if n > 9:  # index 9 past the logical size reads a zero (and gets no gradient)
            want[9] += w[3]
        np.testing.assert_array_equal(_np(dl(vsla.array(x))), want)
        np.testing.assert_array_equal(_np(vsla.grad(loss)(vsla.array(x))), want)
    assert dl.cache_info()["compiles"] == 1
    x = np.array([1.0, np.nan, 3.0, 4.0], np.float32)
    got = _np(vsla.jit(lambda v: vsla.gather(v, [3, 0, 2]))(vsla.array(x)))
    np.testing.assert_array_equal(got, [4.0, 1.0, 3.0])
    s = _np(vsla.jit(lambda v: vsla.scatter(v, [2, 0, 2]))(vsla.array(x[:3])))
    np.testing.assert_array_equal(s, [np.nan, 0.0, 4.0])
