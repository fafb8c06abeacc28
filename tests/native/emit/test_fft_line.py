"""The fft step's line kernel (csrc/fft_line.h: batched power-of-two rows one line at a time, SIMD
across the butterflies) against float64/complex128 NumPy: complex rows, real rows through the
half-length line and their inverse, every norm, batches that are empty, single or odd, lengths at
and below the kernel's reach (shorter than a vector: the lane kernel), an axis that is not last
(the lane kernel's columns next to the line kernel's rows), and jit / grad / vmap around it. Each
program holds several transforms (one compile). The AVX2 build of the same paths is checked in
tests/native/runtime/test_avx2_build.py."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.native.emit import fft as nfft
from tests.native.conftest import requires_cc
from tests.native.util import run_with_call_step

pytestmark = requires_cc
RNG = np.random.default_rng(33)


def cdata(shape, dtype):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def close(got, want, dtype, n):
    """Within float rounding of a length-n transform: log2(n) eps relative to the largest output."""
    eps = np.finfo(np.float32 if np.dtype(dtype) in (np.float32, np.complex64) else np.float64).eps
    assert got.shape == want.shape
    if want.size:
        scale = max(1e-30, float(np.abs(want).max()))
        err = float(np.abs(got.astype(np.complex128) - want).max())
        assert err <= 4 * max(1, np.log2(max(n, 2))) * eps * scale, (err / scale, n)


# (batch, n, norm, inverse): lengths 1 .. 8 below a vector, 16 .. 4096 (the line kernel from CW^2:
# 256 float / 64 double points with AVX-512, 64 / 16 with AVX2), 8192 past its reach
ROWS = [(3, 1, None, False), (2, 2, "ortho", True), (5, 3, None, False), (1, 4, "forward", False),
        (2, 8, None, True), (3, 16, None, False), (7, 64, "ortho", False), (17, 256, None, False),
        (1, 512, "forward", True), (0, 1024, None, False), (5, 1024, None, True), (3, 2048, "ortho", False),
        (2, 4096, None, False), (2, 8192, None, False)]


def check_complex_rows(rows, dtype):
    """One program of the complex transforms of ``rows`` ((batch, n, norm, inverse)), each against NumPy."""
    xs = [cdata((b, n), dtype) for b, n, _, _ in rows]

    def f(*a):
        return tuple((jnp.fft.ifft if inv else jnp.fft.fft)(x, norm=norm)
                     for x, (_, _, norm, inv) in zip(a, rows))

    got = ember.jit(f, backend="native")(*xs)
    for g, x, (_, n, norm, inv) in zip(got, xs, rows):
        g = np.asarray(g)
        assert g.dtype == dtype
        close(g, (np.fft.ifft if inv else np.fft.fft)(x.astype(np.complex128), norm=norm), dtype, n)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_rows(dtype):
    check_complex_rows(ROWS, dtype)


# (batch, n, norm): real rows of 2m points through the half-length line (m = n / 2)
REAL = [(1, 2, None), (3, 6, None), (2, 16, "ortho"), (9, 128, None), (4, 512, "forward"), (5, 1024, None),
        (0, 1024, None), (3, 2048, "ortho"), (2, 8192, None), (1, 16384, None)]


def check_real_rows(rows, dtype):
    """One program of the rfft and irfft of ``rows`` ((batch, n, norm)), each against NumPy."""
    cd = np.complex64 if dtype == np.float32 else np.complex128
    xs = [RNG.standard_normal((b, n)).astype(dtype) for b, n, _ in rows]
    hs = [cdata((b, n // 2 + 1), cd) for b, n, _ in rows]

    def f(*a):
        r = tuple(jnp.fft.rfft(x, norm=norm) for x, (_, _, norm) in zip(a[:len(rows)], rows))
        return r + tuple(jnp.fft.irfft(h, n, norm=norm) for h, (_, n, norm) in zip(a[len(rows):], rows))

    got = ember.jit(f, backend="native")(*xs, *hs)
    for i, (_, n, norm) in enumerate(rows):
        g = np.asarray(got[i])
        assert g.dtype == cd
        close(g, np.fft.rfft(xs[i].astype(np.float64), norm=norm), cd, n)
        g = np.asarray(got[len(rows) + i])
        assert g.dtype == dtype
        close(g, np.fft.irfft(hs[i].astype(np.complex128), n, norm=norm), dtype, n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_real_rows_and_their_inverse(dtype):
    check_real_rows(REAL, dtype)


def test_rows_beside_columns_and_fft2():
    """fft2 of 256 x 256 (columns in lanes, their first and last stages fused into the column loads
    and stores; rows in lines), transforms along axis 0 (fewer columns than lanes; 40 columns: two
    whole lane groups and a partial one; 32 columns of 32 points: a single stage after the first),
    one along the last axis of a 3-d array (rows of every leading index), and the column paths in
    double."""
    x, y = cdata((256, 256), np.complex64), cdata((1024, 6), np.complex64)
    z, u = cdata((3, 5, 512), np.complex64), cdata((512, 40), np.complex64)
    v = cdata((2, 32, 32), np.complex64)
    f = lambda a, b, c, d, e: (jnp.fft.fft2(a), jnp.fft.fft(b, axis=0), jnp.fft.ifft(c),  # noqa: E731
                               jnp.fft.fft(d, axis=0, norm="ortho"), jnp.fft.ifft(e, axis=1))
    got = ember.jit(f, backend="native")(x, y, z, u, v)
    close(np.asarray(got[0]), np.fft.fft2(x.astype(np.complex128)), np.complex64, 256 * 256)
    close(np.asarray(got[1]), np.fft.fft(y.astype(np.complex128), axis=0), np.complex64, 1024)
    close(np.asarray(got[2]), np.fft.ifft(z.astype(np.complex128)), np.complex64, 512)
    close(np.asarray(got[3]), np.fft.fft(u.astype(np.complex128), axis=0, norm="ortho"), np.complex64, 512)
    close(np.asarray(got[4]), np.fft.ifft(v.astype(np.complex128), axis=1), np.complex64, 32)
    w = cdata((128, 24), np.complex128)
    got = ember.jit(lambda a: jnp.fft.fft2(a), backend="native")(w)
    close(np.asarray(got), np.fft.fft2(w), np.complex128, 128 * 24)


def check_grad_and_vmap(n, nv):
    """Parseval: sum |fft(x)|^2 = n sum x^2 for real x of n points, so its gradient is 2 n x (the
    backward is itself an fft of the rows); vmap of the 1-d fft over a batch of nv points equals
    NumPy's rows."""
    x = RNG.standard_normal((5, n)).astype(np.float32)
    g = ember.jit(ember.grad(lambda a: jnp.sum(jnp.abs(jnp.fft.fft(a.astype(jnp.complex64))) ** 2)),
                  backend="native")(x)
    np.testing.assert_allclose(np.asarray(g), 2 * n * x, rtol=1e-4, atol=1e-4 * 2 * n * np.abs(x).max())
    c = cdata((6, nv), np.complex64)
    v = ember.jit(ember.vmap(jnp.fft.fft), backend="native")(c)
    close(np.asarray(v), np.fft.fft(c.astype(np.complex128)), np.complex64, nv)


def test_grad_and_vmap_through_the_line_kernel():
    check_grad_and_vmap(1024, 512)


def test_reach_keeps_the_line_kernel_where_it_runs():
    """fft.py's reach gives the line bit to rows of a power of two from the narrower vector's CW^2
    to LINE_MAX (and real rows through the half line), not to columns, lengths with a factor above
    5 or longer rows, and a program's mask keeps it (the step runs natively, against NumPy)."""
    import re

    assert nfft.reach("float", 0, 1024, False, 1, 64, False, 1) & nfft.G_LINE
    assert nfft.reach("float", 1, 2048, True, 1, 64, False, 1) & nfft.G_LINE
    assert nfft.reach("double", 2, 64, True, 1, 64, False, 1) & nfft.G_LINE
    assert not nfft.reach("float", 0, 32, False, 1, 64, False, 1) & nfft.G_LINE
    assert not nfft.reach("float", 0, 1024, False, 4, 64, False, 1) & nfft.G_LINE
    assert not nfft.reach("float", 0, 7 * 128, False, 1, 64, False, 1) & nfft.G_LINE
    assert not nfft.reach("float", 0, 8192, False, 1, 64, False, 1) & nfft.G_LINE
    x = cdata((9, 1024), np.complex64)
    got, exe = run_with_call_step(jnp.fft.fft, "fft", x)
    close(got, np.fft.fft(x.astype(np.complex128)), np.complex64, 1024)
    m = re.search(r'#define EM_FFTB_SYM "ember_fftb_[0-9a-f]+_f32_(\d+)"', exe.source)
    assert m is not None and int(m.group(1)) & nfft.G_LINE
