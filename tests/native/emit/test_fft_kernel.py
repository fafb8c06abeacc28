"""The one FFT kernel of the native ``fft`` step (fft_lanes.h) on every path it took over from the
removed double-precision per-line transform: lengths with a prime factor 7..61 (Stockham stages of
odd prime radix), primes above 64 (Bluestein), complex128 / float64 lines in double lanes, real
transforms of odd length (and 1, 2) as full complex lines, a length-1 axis, an empty batch, an axis
that is not the last, the ``ortho`` / ``forward`` norms, NaN and Inf rows, ``jit``, ``grad`` and
``vmap`` -- each against NumPy's float64 transform (or a hand-derived value), at tolerances that
grow with log2(n) * eps."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.prims.fft import fft as lax_fft
from tests.native.conftest import requires_cc
from tests.native.util import run_with_call_step

pytestmark = requires_cc
RNG = np.random.default_rng(33)
ROWS = 19  # full lane groups (16 floats / 8 doubles with AVX-512, else 8 / 4) and a partial one


def cdata(shape, dtype):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def close(got, want, n, dtype):
    """|got - want| <= 8 log2(n) eps max|want|: the growth of a radix-2..5 FFT's rounding, doubled for
    Bluestein's two transforms (eps of the operand's precision)."""
    eps = np.finfo(np.float32 if np.dtype(dtype) in (np.float32, np.complex64) else np.float64).eps
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got.astype(np.complex128), want, rtol=0,
                               atol=8 * max(1.0, math.log2(max(n, 2))) * eps * scale)


def nat(f):
    return ember.jit(f, backend="native")


def wide(x):
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


# odd prime radices 7..61, primes above 64 (Bluestein, also 2 * 67), 2-3-5 lengths, the trivial ones
LENGTHS = [1, 2, 3, 7, 11, 14, 49, 61, 67, 77, 120, 134, 1001, 1031]


def fft_steps(f, *xs):
    """``f(*xs)`` (a tuple) natively, in one program (one compile), asserting its fft call steps."""
    jf = ember.jit(f, backend="native")
    out = [np.asarray(o) for o in jf(*xs)]
    steps = jf.lower(*xs).executable.schedule.steps
    assert sum(st.kind == "call" and st.eqns[0].prim.name == "fft" for st in steps) >= len(out)
    return out


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_fft_and_ifft_every_length_class(dtype):
    xs = [cdata((ROWS, n), dtype) for n in LENGTHS]
    both = ("FFT", "IFFT")
    got = fft_steps(lambda *a: tuple(lax_fft(x, ft, (x.shape[-1],)) for x in a for ft in both), *xs)
    for i, x in enumerate(xs):
        n = x.shape[-1]
        for j, ref in enumerate((np.fft.fft, np.fft.ifft)):
            assert got[2 * i + j].dtype == dtype
            close(got[2 * i + j], ref(wide(x), axis=-1), n, dtype)


REAL_LENGTHS = [1, 2, 3, 5, 7, 9, 15, 49, 99, 1031]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_real_transforms_of_odd_and_tiny_lengths(dtype):
    """Odd lengths (and 1, 2) take the full complex line: the RFFT's first n // 2 + 1 bins, the
    IRFFT's Hermitian extension (imaginary parts of bin 0 and, n even, bin n / 2 ignored)."""
    cdt = np.complex64 if dtype == np.float32 else np.complex128
    xs = [RNG.standard_normal((ROWS, n)).astype(dtype) for n in REAL_LENGTHS]
    hs = [cdata((ROWS, n // 2 + 1), cdt) for n in REAL_LENGTHS]
    k = len(REAL_LENGTHS)
    got = fft_steps(lambda *a: tuple(lax_fft(x, "RFFT", (n,)) for x, n in zip(a[:k], REAL_LENGTHS))
                    + tuple(lax_fft(h, "IRFFT", (n,)) for h, n in zip(a[k:], REAL_LENGTHS)), *xs, *hs)
    for i, n in enumerate(REAL_LENGTHS):
        close(got[i], np.fft.rfft(wide(xs[i]), axis=-1), n, dtype)
        assert got[k + i].dtype == dtype
        close(got[k + i], np.fft.irfft(wide(hs[i]), n, axis=-1), n, dtype)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_axis_not_last_and_norms(dtype):
    """A prime axis in the middle (lines with a stride), a 2-3-5 axis first, and rfftn over an odd
    last axis, with each norm."""
    x = cdata((6, 13, 5), dtype)
    r = RNG.standard_normal((4, 6, 9)).astype(np.float32 if dtype == np.complex64 else np.float64)
    for norm in ("backward", "ortho", "forward"):
        got = np.asarray(nat(lambda a, norm=norm: jnp.fft.fft(a, axis=1, norm=norm))(x))
        close(got, np.fft.fft(wide(x), axis=1, norm=norm), 13, dtype)
        got = np.asarray(nat(lambda a, norm=norm: jnp.fft.ifft(a, axis=0, norm=norm))(x))
        close(got, np.fft.ifft(wide(x), axis=0, norm=norm), 6, dtype)
        got = np.asarray(nat(lambda a, norm=norm: jnp.fft.rfftn(a, norm=norm))(r))
        close(got, np.fft.rfftn(wide(r), norm=norm), r.size, r.dtype)
        h = np.fft.rfftn(wide(r)).astype(dtype)
        got = np.asarray(nat(lambda a, norm=norm: jnp.fft.irfftn(a, r.shape, norm=norm))(h))
        close(got, np.fft.irfftn(h, r.shape, axes=(0, 1, 2), norm=norm), r.size, r.dtype)


@pytest.mark.parametrize("ft, shape, out_shape", [("FFT", (0, 7), (0, 7)), ("RFFT", (0, 9), (0, 5)),
                                                  ("IRFFT", (0, 5), (0, 9)), ("FFT", (3, 1), (3, 1))])
def test_empty_batch_and_length_one(ft, shape, out_shape):
    x = cdata(shape, np.complex128) if ft != "RFFT" else RNG.standard_normal(shape)
    n = out_shape[-1] if ft == "IRFFT" else shape[-1]
    got = np.asarray(nat(lambda a: lax_fft(a, ft, (n,)))(x))
    ref = {"FFT": np.fft.fft, "RFFT": np.fft.rfft}.get(ft, lambda a, axis: np.fft.irfft(a, n, axis=axis))
    assert got.shape == out_shape
    close(got, ref(x, axis=-1), max(n, 1), np.float64)


@pytest.mark.parametrize("case", ["c128 prime", "c64 factor 7", "odd rfft", "odd irfft", "f32 prime rfft"])
def test_nonfinite_rows_stay_in_their_row(case):
    """As NumPy (pocketfft): a line holding NaN or Inf transforms to a line with non-finite entries;
    lines are transformed in vector lanes side by side, and no other line is touched."""
    dtype, n, ft = {"c128 prime": (np.complex128, 67, "FFT"), "c64 factor 7": (np.complex64, 98, "FFT"),
                    "odd rfft": (np.float64, 99, "RFFT"), "odd irfft": (np.complex64, 99, "IRFFT"),
                    "f32 prime rfft": (np.float32, 1031, "RFFT")}[case]
    if ft == "RFFT":
        x = RNG.standard_normal((ROWS, n)).astype(dtype)
        ref = lambda a: np.fft.rfft(a, axis=-1)  # noqa: E731
    elif ft == "IRFFT":
        x = cdata((ROWS, n // 2 + 1), dtype)
        ref = lambda a: np.fft.irfft(a, n, axis=-1)  # noqa: E731
    else:
        x = cdata((ROWS, n), dtype)
        ref = lambda a: np.fft.fft(a, axis=-1)  # noqa: E731
    bad = [1, 8, 18]
    x[1, 3] = np.nan
    x[8, 0] = np.inf
    x[18, -1] = -np.inf
    got, _ = run_with_call_step(lambda a: lax_fft(a, ft, (n,)), "fft", x)
    good = [r for r in range(ROWS) if r not in bad]
    close(got[good], ref(wide(x[good])), n, x.dtype)
    with np.errstate(invalid="ignore"):
        want_bad = ref(wide(x[bad]))
    for i, r in enumerate(bad):
        assert not np.isfinite(got[r]).all() and not np.isfinite(want_bad[i]).all()


def test_jit_grad_and_vmap_on_bluestein_and_odd_real_lengths():
    """grad of sum |fft(x)|^2 is 2 n x for real x (Parseval; the FFT's transpose rule gives it);
    vmap of an odd-length rfft over a middle axis; an ifft(fft(x)) round trip under jit."""
    n = 61
    x = RNG.standard_normal((3, n))
    g = nat(ember.grad(lambda a: jnp.sum(jnp.abs(jnp.fft.fft(a)) ** 2)))(x)
    np.testing.assert_allclose(np.asarray(g), 2 * n * x, rtol=1e-10, atol=1e-10)
    y = RNG.standard_normal((4, 5, 99)).astype(np.float32)
    got = np.asarray(nat(ember.vmap(jnp.fft.rfft, in_axes=1))(y))
    close(got, np.fft.rfft(np.moveaxis(y, 1, 0).astype(np.float64)), 99, np.float32)
    z = cdata((5, 1001), np.complex128)
    got = np.asarray(nat(lambda a: jnp.fft.ifft(jnp.fft.fft(a)))(z))
    close(got, z, 1001, np.complex128)


def test_odd_real_lines_stay_in_their_scratch(monkeypatch):
    """Regression: the full-line path (odd real lengths) took line buffers of n + 1 entries, two of
    which overran the 2n planned per thread; with one thread planned (as on a one-CPU affinity mask)
    the second buffer's last entry landed on the twiddle table the next line group read, and the
    rfft of 17 rows of length 7 came out wrong in the second group's bin 1."""
    from ember._src.native.emit import fft as nfft

    monkeypatch.setattr(nfft, "THREADS", 1)
    for n in (3, 5, 7):
        x = RNG.standard_normal((17, n)).astype(np.float32)
        got = np.asarray(nat(lambda a, n=n: lax_fft(a, "RFFT", (n,)))(x))
        close(got, np.fft.rfft(x.astype(np.float64), axis=-1), n, np.float32)
        h = cdata((17, n // 2 + 1), np.complex64)
        got = np.asarray(nat(lambda a, n=n: lax_fft(a, "IRFFT", (n,)))(h))
        close(got, np.fft.irfft(h.astype(np.complex128), n, axis=-1), n, np.float32)
