"""Wide accumulation of products (ember._src.vsla.accumulate): the direct conv in double under x64 and
compensated without it, matmul in double with and without x64 (its gradients too), and the float32
FFT path within the specification's O(eps log L) bound; references are float64 NumPy and
hand-derived sums."""
import numpy as np
import pytest

from ember import vsla
from ember._src import flags
from ember._src.native import specialize as native_specialize
from ember._src.native.runtime import toolchain

requires_cc = pytest.mark.skipif(toolchain.find_compiler() is None, reason="no C compiler available")

EPS32 = float(np.finfo(np.float32).eps)


def _direct(a, b):
    return vsla.conv(a, b, method="direct")


@pytest.mark.parametrize("x64", [False, True])
def test_direct_conv_survives_cancellation(x64):
    """``[1e8, 1 x 64, -1e8]`` against ones: output 65 is the exact sum 64; a float32 running sum
    (``np.convolve`` in float32) loses the ones to 1e8's rounding."""
    x = np.array([1e8] + [1.0] * 64 + [-1e8], np.float32)
    y = np.ones(66, np.float32)
    assert np.convolve(x, y)[65] != 64.0  # float32 accumulation visibly fails here
    with flags.override("jax_enable_x64", x64):
        eager = _direct(vsla.array(x), vsla.array(y))
        jitted = vsla.jit(_direct)(vsla.array(x), vsla.array(y))
        assert eager.dtype == jitted.dtype == np.float32
        want = np.convolve(x.astype(np.float64), y.astype(np.float64))
        for out in (eager, jitted):
            np.testing.assert_array_equal(np.asarray(out.logical()), want.astype(np.float32))


@pytest.mark.parametrize("x64", [False, True])
def test_direct_conv_is_the_rounded_exact_result(x64):
    """Random float32 operands: every output is the float32 rounding of the float64 reference (the
    exact products of float32 values are float64 numbers; their sum differs from it by far less
    than a float32 ulp), eagerly and under vsla.jit, float16 operands too."""
    rng = np.random.default_rng(4)
    f = vsla.jit(_direct)
    with flags.override("jax_enable_x64", x64):
        for m, n in [(3, 5), (17, 9), (200, 130)]:
            a, b = rng.standard_normal(m).astype(np.float32), rng.standard_normal(n).astype(np.float32)
            want = np.convolve(a.astype(np.float64), b.astype(np.float64))
            for out in (_direct(vsla.array(a), vsla.array(b)), f(vsla.array(a), vsla.array(b))):
                got = np.asarray(out.logical()).astype(np.float64)
                np.testing.assert_allclose(got, want, rtol=EPS32, atol=1e-6 * EPS32 * np.abs(want).max())
            h = _direct(vsla.array(a.astype(np.float16)), vsla.array(b.astype(np.float16)))
            wh = np.convolve(a.astype(np.float16).astype(np.float64), b.astype(np.float16).astype(np.float64))
            assert h.dtype == np.float16
            np.testing.assert_array_equal(np.asarray(h.logical()), wh.astype(np.float16))


def test_direct_conv_non_finite_stays_local():
    a = np.array([1.0, np.inf, 2.0, 3e38, 5.0], np.float32)
    out = _direct(vsla.array(a), vsla.array(np.array([1.0, 1.0], np.float32))).to_numpy()
    np.testing.assert_array_equal(out, np.convolve(a.astype(np.float64), [1.0, 1.0]).astype(np.float32))


def test_matmul_accumulates_in_double_under_x64():
    a = np.array([[1e8, 1.0, 1.0, 1.0, -1e8], [2.0, 0.5, 0.25, 0.0, 1.0]], np.float32)
    b = np.array([[1.0, 2.0], [1.0, 0.0], [1.0, 4.0], [1.0, 8.0], [1.0, 2.0]], np.float32)
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)  # [[3, 8], [3.75, 7]]
    with flags.override("jax_enable_x64", True):
        va, vb = vsla.array(a), vsla.array(b)
        for out in (vsla.matmul(va, vb), vsla.jit(vsla.matmul)(va, vb)):
            assert out.dtype == np.float32
            np.testing.assert_array_equal(np.asarray(out.logical()), want)


def _cancelling_product():
    """A float32 product whose float32 GEMM is visibly wrong: row 0 is 1e8, 10^4 values of 0.1 and
    -1e8 (exact sum 1000.0000149 in the float32 values), against ones and a random column."""
    rng = np.random.default_rng(11)
    k = 10002
    a = np.empty((3, k), np.float32)
    a[0] = 0.1
    a[0, 0], a[0, -1] = 1e8, -1e8
    a[1:] = rng.standard_normal((2, k))
    b = np.ones((k, 2), np.float32)
    b[:, 1] = rng.standard_normal(k)
    return a, b


@requires_cc
def test_matmul_accumulates_in_double_without_x64():
    """Without x64 the VSLA matmul is the ``wide_matmul`` step (double sums, rounded once): the
    cancelling row gives the float32 rounding of the float64 reference, eagerly, under
    ``vsla.jit`` (one native call step, no fallback) and batched, where float32 accumulation is off
    by thousands of ulps."""
    a, b = _cancelling_product()
    want = a.astype(np.float64) @ b.astype(np.float64)
    plain = a @ b  # NumPy's float32 GEMM
    assert abs(plain[0, 0] - want[0, 0]) > 100 * EPS32 * abs(want[0, 0])
    with flags.override("jax_enable_x64", False):
        f = vsla.jit(vsla.matmul, backend="native")
        va, vb = vsla.array(a), vsla.array(b)
        outs = [vsla.matmul(va, vb), f(va, vb)]
        batched = [vsla.matmul(vsla.array(a[None]), vsla.array(np.stack([b, 2 * b]))),
                   f(vsla.array(a[None]), vsla.array(np.stack([b, 2 * b])))]
        sym = native_specialize.symbolic_executable(f.lower(va, vb).program)
    steps = [(st.kind, st.eqns[0].prim.name) for st in sym.schedule.steps]
    assert ("call", "wide_matmul") in steps and not any(k == "fallback" for k, _ in steps), steps
    for out in outs:
        assert out.dtype == np.float32
        np.testing.assert_allclose(np.asarray(out.logical()), want, rtol=EPS32, atol=0)
    for out in batched:
        assert out.shape == (2, 3, 2) and out.dtype == np.float32
        np.testing.assert_allclose(np.asarray(out.logical()), np.stack([want, 2 * want]), rtol=EPS32, atol=0)


@requires_cc
def test_wide_matmul_gradients_without_x64():
    """The gradients of ``sum(matmul(a, b) * w)`` are ``w b^T`` and ``a^T w`` (float64 references),
    eagerly and in one ``vsla.jit`` compile across shapes; the contracted axis is promoted."""
    rng = np.random.default_rng(12)
    loss = lambda a, b, w: vsla.sum(vsla.sum(vsla.matmul(a, b) * w))  # noqa: E731
    with flags.override("jax_enable_x64", False):
        dl = vsla.jit(vsla.grad(loss, (0, 1)), backend="native")
        for m, k, kb, n in [(3, 5, 5, 2), (4, 7, 9, 3), (6, 30, 20, 5)]:
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((kb, n)).astype(np.float32)
            w = rng.standard_normal((m, n)).astype(np.float32)
            kk = max(k, kb)
            a64, b64 = np.zeros((m, kk)), np.zeros((kk, n))
            a64[:, :k], b64[:kb] = a, b
            ga_want, gb_want = (w @ b64.T)[:, :k], (a64.T @ w)[:kb]
            args = (vsla.array(a), vsla.array(b), vsla.array(w))
            for ga, gb in (vsla.grad(loss, (0, 1))(*args), dl(*args)):
                assert ga.dtype == gb.dtype == np.float32
                np.testing.assert_allclose(_full(ga, (m, k)), ga_want, rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(_full(gb, (kb, n)), gb_want, rtol=1e-5, atol=1e-5)
        assert dl.cache_info()["compiles"] == 1


def _full(v, shape):
    """The logical values of ``v`` zero-extended to ``shape``."""
    x = np.asarray(v.logical(), np.float64)
    out = np.zeros(shape)
    out[tuple(slice(0, d) for d in x.shape)] = x
    return out


@pytest.mark.parametrize("m,n", [(20, 20), (100, 77), (500, 600), (1, 3000), (2000, 2100)])
def test_fft_path_within_the_float32_error_bound(m, n):
    """§15: the FFT's error is O(eps log L); checked as ``max |err| <= eps log2(L) |a|_2 |b|_2``
    against the float64 convolution, eagerly and under vsla.jit (measured: under 0.12 of it)."""
    rng = np.random.default_rng(m + n)
    a, b = rng.standard_normal(m).astype(np.float32), rng.uniform(0, 1, n).astype(np.float32)
    want = np.convolve(a.astype(np.float64), b.astype(np.float64))
    size = 1 << (m + n - 2).bit_length()
    norms = np.linalg.norm(a.astype(np.float64)) * np.linalg.norm(b.astype(np.float64))
    bound = EPS32 * np.log2(size) * norms
    f = vsla.jit(lambda x, y: vsla.conv(x, y, method="fft"))
    for out in (vsla.conv(vsla.array(a), vsla.array(b), method="fft"), f(vsla.array(a), vsla.array(b))):
        assert out.dtype == np.float32
        assert np.abs(np.asarray(out.logical()) - want).max() <= bound


def test_wide_matmul_primitive_vmap_and_float64():
    """The ``wide_matmul`` primitive under ``vmap`` (one operand unbatched: broadcast) and for
    float64 operands, against NumPy in float64."""
    import ember
    from ember._src.prims.wide_dot import wide_matmul

    rng = np.random.default_rng(13)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    y = rng.standard_normal((5, 2)).astype(np.float32)
    got = ember.vmap(wide_matmul, in_axes=(0, None))(x, y)
    want = (x.astype(np.float64) @ y.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(got), want)
    x64, y64 = x.astype(np.float64), np.broadcast_to(y.astype(np.float64), (4, 5, 2))
    np.testing.assert_allclose(np.asarray(ember.jit(wide_matmul)(x64, y64)), x64 @ y64, rtol=1e-14)


@requires_cc
def test_direct_conv_gradient_without_x64_under_vsla_jit():
    """Regression: without x64 the direct conv's compensated sum tests its products (``where`` on
    ``isfinite``), so a tangent computed with it was not linear and ``vsla.jit(vsla.grad(...))``
    of a conv raised ``select_n is not linear in its predicate``; the tangent is now a plain
    (linear) sum. Gradient of ``sum(conv(a, b) * a)`` against the hand-derived float64
    ``conv(a, b)_i + sum_j a_(i+j) b_j``, eagerly and in one compile."""
    loss = lambda a, b: vsla.sum(vsla.conv(a, b, method="direct") * a)  # noqa: E731
    rng = np.random.default_rng(23)
    with flags.override("jax_enable_x64", False):
        f = vsla.jit(vsla.grad(loss), backend="native")
        for m, n in [(3, 2), (9, 4), (12, 12)]:
            a, b = rng.standard_normal(m).astype(np.float32), rng.standard_normal(n).astype(np.float32)
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            want = np.convolve(a64, b64)[:m] + [sum(a64[i + j] * b64[j] for j in range(n) if i + j < m)
                                                for i in range(m)]
            for g in (f(vsla.array(a), vsla.array(b)), vsla.grad(loss)(vsla.array(a), vsla.array(b))):
                assert g.dtype == np.float32
                np.testing.assert_allclose(np.asarray(g.logical()), want, rtol=1e-5, atol=1e-5)
        assert f.cache_info()["compiles"] == 1
