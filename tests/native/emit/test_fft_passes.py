"""The one family of FFT passes (csrc/fft_passes.h) under its three users: the ``fft`` step's lanes,
the 1-D ``fft_conv`` step and the 2-D convolution by FFT (conv_fft.h, which had its own radix-4/2/3/5
stage before). References: NumPy's FFT and float64 direct sums."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.csrc import load
from ember._src.native.emit import conv_fft
from ember._src.prims.fft import fft_conv
from tests.native.conftest import requires_cc
from tests.native.emit.test_conv_native import NHWC, ref

pytestmark = requires_cc
RNG = np.random.default_rng(33)


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NHWC)


def _plan(x, w):
    (e,) = [e for e in ember.make_program(_conv)(x, w).eqns if e.prim.name == "conv"]
    return conv_fft._plan(e)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_program_runs_all_three_users_on_one_copy_of_the_passes(dtype, monkeypatch):
    """An fft step, an fft_conv step and a convolution by FFT in one program: fft_passes.h is
    emitted once per precision (a second copy would not compile) and each result matches NumPy."""
    monkeypatch.setattr(conv_fft, "RATIO", 1e9)  # the small convolution by FFT, not the direct kernel
    monkeypatch.setenv("EMBER_PROGRAM_CACHE", "0")
    cdt = np.complex64 if dtype == np.float32 else np.complex128
    z = (RNG.standard_normal((5, 96)) + 1j * RNG.standard_normal((5, 96))).astype(cdt)
    a, b = RNG.standard_normal((6, 40)).astype(dtype), RNG.standard_normal((6, 23)).astype(dtype)
    x, w = RNG.standard_normal((1, 12, 12, 3)).astype(dtype), RNG.standard_normal((7, 7, 3, 4)).astype(dtype)

    def f(z, a, b, x, w):
        return jnp.fft.fft(z), fft_conv(a, b, 62), _conv(x, w)

    g = ember.jit(f, backend="native")  # (the suite runs with 64-bit dtypes enabled: tests/conftest.py)
    src = g.lower(z, a, b, x, w).executable.source
    got = [np.asarray(v) for v in g(z, a, b, x, w)]
    s = "f32" if dtype == np.float32 else "f64"
    assert src.count(load("fft_passes.h")) == 1 and f"#define EM_T(name) name##_{s}" in src  # one copy
    assert f"em_cf_bin_{s}" in src and f"em_fftc_run_{s}" in src
    eps = np.finfo(dtype).eps
    want = np.fft.fft(z.astype(np.complex128))
    np.testing.assert_allclose(got[0], want, rtol=0, atol=8 * np.log2(96) * eps * np.abs(want).max())
    want = np.stack([np.convolve(a[i].astype(np.float64), b[i]) for i in range(6)])
    np.testing.assert_allclose(got[1], want, rtol=0, atol=8 * np.log2(64) * eps * np.abs(want).max() * 4)
    want = ref(x.astype(np.float64), w.astype(np.float64), (1, 1), ((3, 3), (3, 3)), (1, 1), NHWC, 1)
    np.testing.assert_allclose(got[2], want, rtol=0, atol=16 * np.log2(32) * eps * np.abs(want).max() * 4)


# (images, size) -> the transform lengths (P, Q) the plan takes, covering each pass of the family:
# 8; 3 x 5; 4 x 4 and 4 x 8 (a 4 then a 2 merged into radix 8, tiles); 5 x 5; 4 x 3 x 3; 4 x 4 x 3;
# 4 x 5; 4 x 4 and 8 x 3 (tiles)
CASES = {(1, 1): (8, 8), (1, 12): (15, 15), (1, 29): (16, 32), (2, 22): (25, 25), (2, 33): (36, 36),
         (2, 45): (48, 48), (1, 16): (20, 20), (2, 20): (16, 24)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,hw", sorted(CASES))
def test_convolution_by_fft_on_each_radix(n, hw, dtype, monkeypatch):
    """The 2-D convolution by FFT, now on fft_passes.h's em_fftp_mixed, at transform lengths whose
    factors cover radices 8, 4, 3, 5 and 2; against float64 direct sums (errors of the FFT's order:
    log2 of the length times the precision's epsilon, relative to the output's size)."""
    monkeypatch.setattr(conv_fft, "RATIO", 1e9)
    monkeypatch.setenv("EMBER_PROGRAM_CACHE", "0")
    x = RNG.standard_normal((n, hw, hw, 5)).astype(dtype)
    w = RNG.standard_normal((7, 7, 5, 3)).astype(dtype)
    pl = _plan(x, w)
    assert pl is not None and (pl.P, pl.Q) == CASES[n, hw]
    got = np.asarray(ember.jit(_conv, backend="native")(x, w))
    want = ref(x.astype(np.float64), w.astype(np.float64), (1, 1), ((3, 3), (3, 3)), (1, 1), NHWC, 1)
    eps = np.finfo(dtype).eps
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=0, atol=32 * np.log2(pl.P * pl.Q) * eps * np.abs(want).max())


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("n,rows", [(64, 16), (256, 33), (1024, 17), (2048, 3)])
def test_complex_rows_last_stage_fused_into_the_store(n, rows, dtype):
    """Complex rows of a power of two (the last Stockham stage of radix 8 or 4 fused into the
    register-transposed store, em_fftl_clast, up to 8 KB rows; past that the plain store), full and
    partial lane groups, forward and inverse, each norm; against NumPy's FFT in double precision,
    errors within a multiple of log2(n) epsilon of the spectrum's size."""
    x = (RNG.standard_normal((rows, n)) + 1j * RNG.standard_normal((rows, n))).astype(dtype)
    eps = np.finfo(dtype).eps
    modes = (("fft", None), ("ifft", "ortho")) if n != 256 else (("ifft", None), ("fft", "forward"))
    for name, norm in modes:
        fn = functools.partial(getattr(jnp.fft, name), norm=norm)
        got = np.asarray(ember.jit(fn, backend="native")(x))
        want = getattr(np.fft, name)(x.astype(np.complex128), norm=norm)
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=4 * np.log2(n) * eps * np.abs(want).max())


def test_complex_rows_along_a_leading_axis_and_under_grad_and_vmap():
    """Power-of-two complex lines along a leading axis (the strided-column path beside the rows'
    fused store), under vmap, and the gradient (whose transpose is an fft of the cotangent):
    against NumPy."""
    x = (RNG.standard_normal((512, 9)) + 1j * RNG.standard_normal((512, 9))).astype(np.complex64)
    got = np.asarray(ember.jit(lambda a: jnp.fft.fft(a, axis=0), backend="native")(x))
    want = np.fft.fft(x.astype(np.complex128), axis=0)
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * 9 * 1.2e-7 * np.abs(want).max())
    got = np.asarray(ember.jit(ember.vmap(jnp.fft.ifft), backend="native")(x.T))
    want = np.fft.ifft(x.T.astype(np.complex128))
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * 9 * 1.2e-7 * np.abs(want).max())
    r = RNG.standard_normal((4, 256))
    loss = lambda a: jnp.sum(jnp.real(jnp.fft.fft(a)) ** 2)  # noqa: E731
    g = np.asarray(ember.jit(ember.grad(loss), backend="native")(r))
    # d/dr sum(Re(F r)^2) = 2 Re(F)^T Re(F r), Re(F) symmetric: 2 Re(F) Re(F r)
    want = 2 * np.real(np.fft.fft(np.real(np.fft.fft(r))))
    np.testing.assert_allclose(g, want, rtol=0, atol=1e-9 * np.abs(want).max())
