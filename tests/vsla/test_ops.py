"""ember.vsla reductions, matmul, normalisations, windows, FFT path and gradients vs NumPy / FD."""
import numpy as np
import pytest

import ember
from ember import vsla


def _pad(x, shape):
    return np.pad(x, [(0, s - d) for s, d in zip(shape, x.shape)])


def _rand(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_reductions_and_norms():
    rng = np.random.default_rng(0)
    x = _rand(rng, (3, 5))
    v = vsla.array(x)
    np.testing.assert_allclose(np.asarray(vsla.sum(v, 0).logical()), x.sum(0), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(vsla.mean(v).logical()), x.mean(-1), rtol=1e-5, atol=1e-6)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(vsla.softmax(v).logical()), e / e.sum(-1, keepdims=True), rtol=1e-5)
    r = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(np.asarray(vsla.rms_norm(v).logical()), r, rtol=1e-4, atol=1e-5)
    c = x - x.mean(-1, keepdims=True)
    ln = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(np.asarray(vsla.layer_norm(v).logical()), ln, rtol=1e-4, atol=1e-4)
    assert vsla.transpose(v).shape == (5, 3)
    np.testing.assert_allclose(vsla.transpose(v).to_numpy(), x.T)


def test_matmul_promotes_contracted_axis():
    rng = np.random.default_rng(1)
    a, b = _rand(rng, (2, 3)), _rand(rng, (5, 4))
    out = vsla.matmul(vsla.array(a), vsla.array(b))
    assert out.shape == (2, 4)
    np.testing.assert_allclose(out.to_numpy(), _pad(a, (2, 5)) @ b, rtol=1e-5, atol=1e-5)


def test_window_and_pyramid():
    outs = list(vsla.pyramid((vsla.array([float(i)]) for i in range(1, 9)), 2, 2))
    assert [o.shape for o in outs] == [(2, 2, 1), (2, 2, 1)]
    np.testing.assert_array_equal(outs[0].to_numpy().ravel(), [1, 2, 3, 4])
    np.testing.assert_array_equal(outs[1].to_numpy().ravel(), [5, 6, 7, 8])
    w = list(vsla.window((vsla.array(np.ones(k, np.float32)) for k in (1, 3, 2, 2, 5)), 2))
    assert [x.shape for x in w] == [(2, 3), (2, 2)]


@pytest.mark.parametrize("m,n", [(1, 1), (2, 2), (4, 4), (1, 70), (100, 90)])
def test_direct_and_fft_agree(m, n):
    rng = np.random.default_rng(m + n)
    a, b = vsla.array(_rand(rng, (2, m))), vsla.array(_rand(rng, (2, n)))
    d = vsla.conv(a, b, method="direct").to_numpy()
    f = vsla.conv(a, b, method="fft").to_numpy()
    np.testing.assert_allclose(d, f, rtol=1e-3, atol=1e-3 * max(1.0, np.abs(d).max()))
    assert (m * n > vsla.FFT_THRESHOLD) or np.array_equal(vsla.conv(a, b).to_numpy(), d)


def _fd_grad(f, x, eps=1e-3):
    g = np.zeros_like(x, dtype=np.float64)
    for i in np.ndindex(x.shape):
        xp, xm = x.astype(np.float64).copy(), x.astype(np.float64).copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


@pytest.mark.parametrize("op", ["add", "mul", "conv", "conv_fft", "kron_free_matmul", "softmax", "kron",
                                "stack"])
def test_grad_matches_finite_differences(op):
    rng = np.random.default_rng(11)
    sa, sb = (int(rng.integers(1, 6)),), (int(rng.integers(1, 6)),)
    a, b = _rand(rng, sa), _rand(rng, sb)
    w = _rand(rng, (32,))
    vb = vsla.array(b)

    def fv(va):
        if op == "add":
            r = va + vb
        elif op == "mul":
            r = va * vb
        elif op == "conv":
            r = vsla.conv(va, vb, method="direct")
        elif op == "conv_fft":
            r = vsla.conv(va, vb, method="fft")
        elif op == "kron":
            r = vsla.kron(va, vb)
        elif op == "stack":
            r = vsla.sum(vsla.stack([va, vb, va * vb]), 0)
        elif op == "softmax":
            r = vsla.softmax(va * vb)
        else:
            r = vsla.sum(vsla.matmul(vsla.array(va.logical().reshape((1, -1))),
                                     vsla.array(vb.logical().reshape((-1, 1)))), 0)
        x = r.logical()
        return (x * ember.numpy.asarray(w[: x.shape[0]])).sum()

    def fnp(x):
        return float(np.asarray(fv(vsla.array(x.astype(np.float32)))))

    g = ember.grad(fv)(vsla.array(a))
    np.testing.assert_allclose(np.asarray(g.logical()), _fd_grad(fnp, a), rtol=2e-2, atol=2e-2)


def test_jvp_and_vmap_over_varrays():
    rng = np.random.default_rng(4)
    a, b, t = _rand(rng, (3,)), _rand(rng, (5,)), _rand(rng, (3,))
    vb = vsla.array(b)
    va, vt = vsla.array(a), vsla.array(t)
    primal, tangent = ember.jvp(lambda x: vsla.conv(x, vb), (va,), (vt,))
    np.testing.assert_allclose(primal.to_numpy(), np.convolve(a, b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(tangent.logical()), np.convolve(t, b), rtol=1e-5, atol=1e-5)
    xs = _rand(rng, (4, 3))
    batched = vsla.VArray(ember.numpy.asarray(np.pad(xs, ((0, 0), (0, 1)))), (3,))
    out = ember.vmap(lambda x: vsla.conv(x, vb))(batched)
    want = np.stack([np.convolve(x, b) for x in xs])
    np.testing.assert_allclose(np.asarray(out.data)[:, :7], want, rtol=1e-5, atol=1e-5)


def test_reshape_slice_gather_on_logical_shape():
    rng = np.random.default_rng(9)
    x = _rand(rng, (3, 4))
    v = vsla.array(x)
    np.testing.assert_allclose(vsla.reshape(v, (2, 6)).to_numpy(), x.reshape(2, 6))
    np.testing.assert_allclose(np.asarray(vsla.slice(v, (1, 2), (3, 6)).logical()), _pad(x, (3, 6))[1:3, 2:6])
    assert vsla.slice(v, (1, 2), (3, 6)).shape == (2, 4)
    g = vsla.gather(v, [2, 0, 5], axis=1)
    assert g.shape == (3, 3)
    np.testing.assert_allclose(np.asarray(g.logical()), _pad(x, (3, 6))[:, [2, 0, 5]])
    with pytest.raises(ValueError, match="negative"):
        vsla.gather(v, [-1])


def test_empty_operands_never_crash():
    e = vsla.array(np.zeros((0,), np.float32))
    e2 = vsla.array(np.zeros((2, 0), np.float32))
    assert vsla.sum(e2).shape == (2,) and vsla.sum(e2).to_numpy().size == 0
    assert vsla.softmax(e).shape == (0,) and vsla.layer_norm(e).shape == (0,)
    assert vsla.rms_norm(e2).shape == (2, 0)
    mm = vsla.matmul(e2, vsla.array(np.zeros((0, 3), np.float32)))
    assert mm.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(mm.logical()), np.zeros((2, 3)))
    assert vsla.stack([e, e]).shape == (2, 0) and vsla.conv(e2, e2).shape == (2, 0)
    assert vsla.kron(e, e).shape == (0,) and (e * e).shape == (0,) and vsla.transpose(e2).shape == (0, 2)


def _matmul_reference(a, b):
    """Batch axes broadcast (size 1 repeats), other mismatches zero-extend; contracted axis promoted."""
    k = max(a.shape[-1], b.shape[-2])
    batch = [q if p == 1 else p if q == 1 else max(p, q) for p, q in zip(a.shape[:-2], b.shape[:-2])]
    pa = np.pad(a, [(0, 0 if d == 1 else n - d) for d, n in zip(a.shape[:-2], batch)]
                + [(0, 0), (0, k - a.shape[-1])])
    pb = np.pad(b, [(0, 0 if d == 1 else n - d) for d, n in zip(b.shape[:-2], batch)]
                + [(0, k - b.shape[-2]), (0, 0)])
    return np.matmul(pa, pb)


_BATCH_CASES = [((1, 2, 3), (3, 3, 2)), ((3, 2, 3), (1, 4, 2)), ((2, 2, 3), (3, 3, 2)),
                ((2, 1, 2, 3), (1, 3, 5, 2)), ((0, 2, 2), (1, 2, 2))]


def test_matmul_batch_axes_broadcast():
    rng = np.random.default_rng(12)
    jitted = vsla.jit(vsla.matmul)
    for sa, sb in _BATCH_CASES:
        a, b = _rand(rng, sa), _rand(rng, sb)
        want = _matmul_reference(a, b)
        for got in (vsla.matmul(vsla.array(a), vsla.array(b)), jitted(vsla.array(a), vsla.array(b))):
            assert got.shape == want.shape
            np.testing.assert_allclose(np.asarray(got.logical()), want, rtol=1e-5, atol=1e-5)
            assert np.count_nonzero(np.asarray(got.data)) == np.count_nonzero(want)  # slack zero


def test_matmul_broadcast_gradient():
    rng = np.random.default_rng(13)
    a, b = _rand(rng, (1, 2, 3)), _rand(rng, (3, 3, 2))

    def loss(u, w):
        return vsla.sum(vsla.sum(vsla.sum(vsla.matmul(u, w))))

    # d/du sum_i (u @ w_i) = ones(2, 2) @ sum_i w_i^T; d/dw_i = u^T @ ones(2, 2)
    ga = np.ones((2, 2)) @ b.sum(0).T
    gb = np.broadcast_to(a[0].T @ np.ones((2, 2)), (3, 3, 2))
    for g in (vsla.grad(loss, (0, 1)), vsla.jit(vsla.grad(loss, (0, 1)))):
        da, db = g(vsla.array(a), vsla.array(b))
        np.testing.assert_allclose(np.asarray(da.logical())[0], ga, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(db.logical()), gb, rtol=1e-5)
