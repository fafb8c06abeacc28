"""The native ``fft`` call step (fft.py) against float64/complex128 NumPy: every FFT type, lengths
with small and large prime factors (mixed radix and Bluestein), one to three transformed axes,
batch dims, both precisions, empty operands; and that it runs as a call step, not a fallback."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.native import specialize
from ember._src.native.emit import fft as nfft
from ember._src.native.emit import fft_blocks
from ember._src.prims.fft import fft as lax_fft
from ember._src.prims.movement import slice as lax_slice
from tests.native.conftest import requires_cc
from tests.native.util import run_with_call_step

pytestmark = requires_cc
RNG = np.random.default_rng(5)


def native(f, *args):
    return run_with_call_step(f, "fft", *args)[0]


def cdata(shape, dtype):
    z = RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)
    return z.astype(dtype)


def close(got, want, dtype):
    """Within float rounding of the transform: relative to the largest output magnitude."""
    tol = 2e-6 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-13
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got.astype(np.complex128), want, rtol=0, atol=tol * scale * 4)


LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 20, 30, 40, 49, 61, 64, 67, 96, 97, 100, 127, 128,
           134, 210, 243, 256, 360, 1000, 1024, 1031, 2000, 4096]


def test_plans_cover_both_algorithms():
    assert nfft.plan_of(1000) == ([4, 2, 5, 5, 5], 0, [])
    assert nfft.plan_of(2048)[0] == [4] * 5 + [2]
    fac, m2, fac2 = nfft.plan_of(67)
    assert fac == [] and m2 == 135 and fac2 == [3, 3, 3, 5]  # 2 * 67 - 1 = 133 -> 135 = 3^3 * 5
    assert nfft.plan_of(134)[1] == 270 and nfft.plan_of(61)[1] == 0
    assert nfft.plan_of(49) == ([7, 7], 0, []) and nfft.plan_of(30)[1] == 0
    assert nfft.plan_of(1031)[1] == 2160  # 2061 -> 2^4 * 3^3 * 5


@pytest.mark.parametrize("n", [1, 2, 7, 133, 2061, 4097])
def test_smooth_length_is_the_least_5_smooth(n):
    """Bluestein's length: brute force over m >= n for the first with prime factors 2, 3, 5 only."""
    def smooth(m):
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        return m == 1
    assert nfft._smooth(n) == next(m for m in range(n, 2 * n + 1) if smooth(m))


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_fft_and_ifft_1d(n, dtype):
    x = cdata((3, n), dtype)
    ref = x.astype(np.complex128)
    got = native(lambda a: lax_fft(a, "FFT", (n,)), x)
    assert got.dtype == dtype
    close(got, np.fft.fft(ref, axis=-1), dtype)
    got = native(lambda a: lax_fft(a, "IFFT", (n,)), x)
    close(got, np.fft.ifft(ref, axis=-1), dtype)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rfft_and_irfft_1d(n, dtype):
    x = RNG.standard_normal((2, n)).astype(dtype)
    got = native(lambda a: lax_fft(a, "RFFT", (n,)), x)
    cd = np.complex64 if dtype == np.float32 else np.complex128
    assert got.dtype == cd and got.shape == (2, n // 2 + 1)
    close(got, np.fft.rfft(x.astype(np.float64), axis=-1), dtype)
    h = cdata((2, n // 2 + 1), cd)  # imaginary DC/Nyquist parts are ignored, as NumPy's irfft does
    got = native(lambda a: lax_fft(a, "IRFFT", (n,)), h)
    assert got.dtype == dtype and got.shape == (2, n)
    close(got, np.fft.irfft(h.astype(np.complex128), n=n, axis=-1), dtype)


@pytest.mark.parametrize("shape,k", [((4, 6, 10), 2), ((3, 5, 8), 3), ((2, 67, 12), 2), ((9, 7), 2),
                                     ((2, 24, 48), 2), ((20, 16, 40), 3)])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_multi_axis(shape, k, dtype):
    axes = tuple(range(len(shape) - k, len(shape)))
    lengths = shape[-k:]
    x = cdata(shape, dtype)
    ref = x.astype(np.complex128)
    close(native(lambda a: lax_fft(a, "FFT", lengths), x), np.fft.fftn(ref, axes=axes), dtype)
    close(native(lambda a: lax_fft(a, "IFFT", lengths), x), np.fft.ifftn(ref, axes=axes), dtype)
    rd = np.float32 if dtype == np.complex64 else np.float64
    r = RNG.standard_normal(shape).astype(rd)
    close(native(lambda a: lax_fft(a, "RFFT", lengths), r), np.fft.rfftn(r.astype(np.float64), axes=axes), rd)
    hs = (*shape[:-1], shape[-1] // 2 + 1)
    h = cdata(hs, dtype)
    want = np.fft.irfftn(h.astype(np.complex128), s=lengths, axes=axes)
    close(native(lambda a: lax_fft(a, "IRFFT", lengths), h), want, rd)


def test_numpy_api_roundtrip_and_fusion():
    """jnp.fft functions compose with the fused kernels around the call (one native program)."""
    x = RNG.standard_normal((8, 96)).astype(np.float32)

    def f(a):
        spec = jnp.fft.rfft(a * 2.0, axis=-1)
        return jnp.fft.irfft(spec * jnp.conj(spec), n=96, axis=-1) + jnp.abs(jnp.fft.fft(a)).sum()

    got = native(f, x)
    xd = x.astype(np.float64) * 2
    s = np.fft.rfft(xd, axis=-1)
    want = np.fft.irfft(s * np.conj(s), n=96, axis=-1) + np.abs(np.fft.fft(x.astype(np.float64))).sum()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("shape,ft,lengths,out_shape,out_dtype", [
    ((0, 8), "FFT", (8,), (0, 8), np.complex64), ((3, 0), "RFFT", (0,), (3, 1), np.complex64),
    ((0, 5), "IRFFT", (8,), (0, 8), np.float32)])
def test_empty(shape, ft, lengths, out_shape, out_dtype):
    """An empty operand or a zero length: zeros of the transform's shape (hand-derived)."""
    dtype = np.float32 if ft == "RFFT" else np.complex64
    x = np.zeros(shape, dtype)
    got = np.asarray(ember.jit(lambda a: lax_fft(a, ft, lengths), backend="native")(x))
    assert got.shape == out_shape and got.dtype == out_dtype
    np.testing.assert_array_equal(got, np.zeros(out_shape, out_dtype))


def test_grad_through_fft_runs_natively():
    """The transposes (rfft <-> fft/irfft) lower too: the gradient of a spectral loss."""
    x = RNG.standard_normal((4, 24))

    def loss(a):
        return jnp.sum(jnp.abs(jnp.fft.rfft(a, axis=-1)) ** 2)

    g = native(ember.grad(loss), x)
    # Parseval for rfft: sum |X_k|^2 over the half spectrum -> grad by finite differences
    eps, fd = 1e-6, np.zeros_like(x)
    ref = lambda a: np.sum(np.abs(np.fft.rfft(a, axis=-1)) ** 2)  # noqa: E731
    for idx in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        fd[idx] = (ref(x + d) - ref(x - d)) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [8, 1000, 1031])
@pytest.mark.parametrize("ft", ["FFT", "RFFT", "IRFFT"])
def test_batches_of_lanes_and_nonfinite_rows(n, ft):
    """Rows go through the kernel several at a time (one per vector lane): 19 rows (full groups
    and a partial one), some with NaN/Inf, each row equal to NumPy's transform of that row alone
    (a non-finite row does not leak into its neighbours); a second call reuses the cached tables."""
    rows = 19
    if ft == "IRFFT":
        x = cdata((rows, n // 2 + 1), np.complex64)
        ref = lambda a: np.fft.irfft(a, n=n, axis=-1)  # noqa: E731
    elif ft == "RFFT":
        x = RNG.standard_normal((rows, n)).astype(np.float32)
        ref = lambda a: np.fft.rfft(a, axis=-1)  # noqa: E731
    else:
        x = cdata((rows, n), np.complex64)
        ref = lambda a: np.fft.fft(a, axis=-1)  # noqa: E731
    bad = [2, 9, 17]
    x[2, 1] = np.nan
    x[9, 0] = np.inf
    x[17, -1] = -np.inf
    f = lambda a: lax_fft(a, ft, (n,))  # noqa: E731
    got = native(f, x)
    again = np.asarray(ember.jit(f, backend="native")(x))
    np.testing.assert_array_equal(again, got)
    good = [r for r in range(rows) if r not in bad]
    close(got[good], ref(x[good].astype(np.complex128 if ft != "RFFT" else np.float64)), np.float32)
    for r in bad:
        assert not np.isfinite(got[r]).all()


def test_concurrent_first_calls_share_or_rebuild_the_tables():
    """Separately jitted copies of one program share its compiled library, hence its static
    tables, and each call drops the GIL: threads running them at once race to build the tables
    (one builds the cache, the others private copies). Every thread's result equals NumPy's. A
    Bluestein length used nowhere else, so the tables start unbuilt."""
    import threading

    n, k = 1013, 6
    fs = [ember.jit(lambda a: lax_fft(a, "FFT", (n,)), backend="native") for _ in range(k)]
    xs = [cdata((9, n), np.complex128) for _ in range(k)]
    for f, x in zip(fs, xs):
        f.lower(x)  # compile before the threads start, so they race on the first run only
    outs, gate = [None] * k, threading.Barrier(k)

    def run(i):
        gate.wait()
        outs[i] = np.asarray(fs[i](xs[i]))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, got in zip(xs, outs):
        close(got, np.fft.fft(x, axis=-1), np.complex128)


# ---------------------------------------------------------------------------------------------
# runtime (symbolic) lengths: the length is a named dynamic axis, one C compile for every length
# ---------------------------------------------------------------------------------------------

POW2 = [1 << k for k in range(13)]  # 1 .. 4096
# mixed radix and Bluestein at run time; 360, 1000 and 3000 (complex64 rows, and 600 / 2000's half
# lines for float32) in the line kernel's pair blocks with 16 float lanes, 100 and 600's half line for doubles
RUNTIME_OTHER = [3, 6, 12, 15, 49, 67, 100, 134, 1031, 360, 600, 1000, 2000, 3000]


def symbolic_native(f, axes):
    """A native ``jit`` of ``f`` whose operand's axes are the named dynamic ``axes``."""
    return ember.jit(f, backend="native", dynamic_axes=[axes])


def assert_one_fft_call_step(jf, x):
    """The symbolic program runs the transform as a call step, no fallback."""
    sym = specialize.symbolic_executable(jf.lower(x).program)
    assert sym.fallback_reason is None, sym.fallback_reason
    kinds = [(st.kind.value, st.eqns[0].prim.name) for st in sym.schedule.steps]
    assert ("call", "fft") in kinds and not any(k == "fallback" for k, _ in kinds), kinds


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_runtime_length_fft_and_ifft(dtype):
    fwd = symbolic_native(lambda a: lax_fft(a, "FFT", (a.shape[-1],)), ("b", "n"))
    inv = symbolic_native(lambda a: lax_fft(a, "IFFT", (a.shape[-1],)), ("b", "n"))
    for n in POW2 + RUNTIME_OTHER:
        x = cdata((3, n), dtype)
        ref = x.astype(np.complex128)
        got = np.asarray(fwd(x))
        assert got.dtype == dtype and got.shape == (3, n)
        close(got, np.fft.fft(ref, axis=-1), dtype)
        close(np.asarray(inv(x)), np.fft.ifft(ref, axis=-1), dtype)
    assert fwd.cache_info()["compiles"] == 1 and inv.cache_info()["compiles"] == 1
    assert_one_fft_call_step(fwd, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_runtime_length_rfft_and_irfft(dtype):
    cd = np.complex64 if dtype == np.float32 else np.complex128
    rf = symbolic_native(lambda a: lax_fft(a, "RFFT", (a.shape[-1],)), ("b", "n"))
    # IRFFT of an even length 2 * h: the operand holds h + 1 bins
    irf = symbolic_native(lambda a: lax_fft(a, "IRFFT", (2 * (a.shape[-1] - 1),)), ("b", "h"))
    for n in POW2 + RUNTIME_OTHER:
        x = RNG.standard_normal((5, n)).astype(dtype)
        got = np.asarray(rf(x))
        assert got.dtype == cd and got.shape == (5, n // 2 + 1)
        close(got, np.fft.rfft(x.astype(np.float64), axis=-1), dtype)
        if n % 2 == 0:
            h = cdata((5, n // 2 + 1), cd)
            got = np.asarray(irf(h))
            assert got.dtype == dtype and got.shape == (5, n)
            close(got, np.fft.irfft(h.astype(np.complex128), n=n, axis=-1), dtype)
    assert rf.cache_info()["compiles"] == 1 and irf.cache_info()["compiles"] == 1
    assert_one_fft_call_step(rf, x)


def test_runtime_length_odd_irfft_and_two_axes():
    """An odd runtime IRFFT length (the full complex line, no half-length split) and transforms
    over two symbolic axes, against NumPy."""
    irf = symbolic_native(lambda a: lax_fft(a, "IRFFT", (2 * a.shape[-1] - 1,)), ("b", "h"))
    for n in (1, 3, 5, 67):
        h = cdata((2, n // 2 + 1), np.complex128)
        close(np.asarray(irf(h)), np.fft.irfft(h, n=n, axis=-1), np.complex128)
    f2 = symbolic_native(lambda a: lax_fft(a, "FFT", a.shape[-2:]), ("b", "r", "c"))
    r2 = symbolic_native(lambda a: lax_fft(a, "RFFT", a.shape[-2:]), ("b", "r", "c"))
    i2 = symbolic_native(lambda a: lax_fft(a, "IRFFT", (a.shape[-2], 2 * (a.shape[-1] - 1))), ("b", "r", "c"))
    for r, c in [(1, 2), (4, 8), (6, 10), (16, 32)]:
        x = cdata((2, r, c), np.complex128)
        close(np.asarray(f2(x)), np.fft.fftn(x, axes=(1, 2)), np.complex128)
        xr = x.real.copy()
        close(np.asarray(r2(xr)), np.fft.rfftn(xr, axes=(1, 2)), np.float64)
        h = x[..., : c // 2 + 1].copy()
        close(np.asarray(i2(h)), np.fft.irfftn(h, s=(r, c), axes=(1, 2)), np.float64)
    assert f2.cache_info()["compiles"] == 1 and i2.cache_info()["compiles"] == 1


def test_runtime_length_empty_batch_is_zeros():
    """A batch that is empty only at run time (``k - 1`` rows): the step writes nothing."""
    def f(a, z):
        rows = lax_slice(a, (0, 0), (z.shape[0] - 1, a.shape[1]))
        return lax_fft(rows, "FFT", (a.shape[-1],))

    f = ember.jit(f, backend="native", dynamic_axes=[("b", "n"), ("k",)])
    x = cdata((3, 8), np.complex64)
    close(np.asarray(f(x, np.zeros(3))), np.fft.fft(x[:2].astype(np.complex128)), np.complex64)
    got = np.asarray(f(x, np.zeros(1)))  # an empty batch at run time: zeros of shape (0, 8)
    assert got.shape == (0, 8)


def test_runtime_plan_cache_is_bounded():
    """More distinct runtime lengths than the per-program cache holds (EM_FFT_SLOTS = 64): the
    lengths past it build their tables in the workspace for each call; every result is right,
    before and after the cache fills, and on a second pass."""
    f = symbolic_native(lambda a: lax_fft(a, "FFT", (a.shape[-1],)), ("b", "n"))
    lengths = list(range(2, 2 + 80))
    xs = {n: cdata((2, n), np.complex128) for n in lengths}
    for _ in range(2):
        for n in lengths:
            close(np.asarray(f(xs[n])), np.fft.fft(xs[n], axis=-1), np.complex128)
    assert f.cache_info()["compiles"] == 1


def test_runtime_length_threads_race_on_new_lengths():
    """Threads calling one symbolic program with the same new runtime lengths at once (the call
    drops the GIL): the plan cache's slots are claimed by compare-and-swap, losers use or build
    other copies; every result equals NumPy's."""
    import threading

    f = symbolic_native(lambda a: lax_fft(a, "FFT", (a.shape[-1],)), ("b", "n"))
    f(cdata((9, 4), np.complex128))  # compile first
    k, lengths = 6, [1021, 2048, 1000, 4096]
    xs = [[cdata((9, n), np.complex128) for n in lengths] for _ in range(k)]
    outs, gate = [None] * k, threading.Barrier(k)

    def run(i):
        gate.wait()
        outs[i] = [np.asarray(f(x)) for x in xs[i]]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x_i, got_i in zip(xs, outs):
        for x, got in zip(x_i, got_i):
            close(got, np.fft.fft(x, axis=-1), np.complex128)


def test_runtime_length_gradients():
    """The JVP and transposes with a symbolic length (the IRFFT transpose's bin weights come from
    the runtime length): gradients of a spectral loss against finite differences, one compile."""
    def loss(a):
        n = a.shape[-1]
        spec = lax_fft(a, "RFFT", (n,))
        back = lax_fft(spec * spec, "IRFFT", (n,))
        return jnp.sum(back * a) + jnp.sum(jnp.abs(spec) ** 2)

    g = ember.jit(ember.grad(loss), backend="native", dynamic_axes=[("b", "n")])
    ref = lambda a: np.sum(np.fft.irfft(np.fft.rfft(a) ** 2, n=a.shape[-1]) * a) \
        + np.sum(np.abs(np.fft.rfft(a)) ** 2)  # noqa: E731
    for n in (1, 2, 5, 8, 12):
        x = RNG.standard_normal((2, n))
        eps, fd = 1e-6, np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            d = np.zeros_like(x)
            d[idx] = eps
            fd[idx] = (ref(x + d) - ref(x - d)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(g(x)), fd, rtol=1e-6, atol=1e-6)
    assert g.cache_info()["compiles"] == 1


@pytest.mark.parametrize("n", [1024, 1031, 96])
@pytest.mark.parametrize("ft", ["FFT", "RFFT", "IRFFT"])
@pytest.mark.parametrize("runtime", [False, True])
def test_line_groups_on_the_thread_pool(n, ft, runtime):
    """Enough lines that the step runs its line groups on the thread pool (work above the parallel
    threshold), each thread in its own scratch (Bluestein's buffers included, n = 1031): every row
    equals NumPy's, at a static and at a runtime length."""
    rows = 300
    if ft == "IRFFT":
        x = cdata((rows, n // 2 + 1), np.complex128)
        ref = np.fft.irfft(x, n=n, axis=-1)
        odd = n % 2
        f = lambda a: lax_fft(a, ft, (n,) if not runtime else (2 * a.shape[-1] - 2 + odd,))  # noqa: E731
    else:
        x = cdata((rows, n), np.complex128) if ft == "FFT" else RNG.standard_normal((rows, n))
        ref = np.fft.fft(x, axis=-1) if ft == "FFT" else np.fft.rfft(x, axis=-1)
        f = lambda a: lax_fft(a, ft, (n,) if not runtime else (a.shape[-1],))  # noqa: E731
    axes = [("b", "n")] if runtime else None
    for threads in (None, 1):  # the default, and the num_threads option's one thread
        jf = ember.jit(f, backend="native", num_threads=threads, dynamic_axes=axes)
        exe = jf.lower(x).executable
        if runtime:  # the symbolic library behind this function's specialization (its options)
            exe = exe.specialization(exe.env_from_shapes([x.shape])).run.sym
        run = exe.source.split("em_fft_run_f64(&j_")[1].splitlines()[0]
        # the count is decided per call: num_threads where given, else the OpenMP default, capped
        assert run.endswith(f", em_threads({threads or 0}, {threads or nfft.THREADS}));"), run
        close(np.asarray(jf(x)), ref, np.float64)


@pytest.mark.parametrize("n", [1000, 1024, 1031, 2062])
@pytest.mark.parametrize("ft", ["FFT", "IFFT", "RFFT", "IRFFT"])
def test_float_lanes_on_the_thread_pool(n, ft):
    """Single precision at a power of two, a 2-3-5 length and Bluestein's lengths (a prime, and twice
    one: a real transform's half-length Bluestein) runs in float lanes (fft_lanes.h),
    its line groups on the thread pool at the default thread count and on one thread: every row
    equals NumPy's float64 transform within float32 rounding, 300 rows (full groups of lanes and a
    partial one)."""
    rows = 300
    if ft == "IRFFT":
        x = cdata((rows, n // 2 + 1), np.complex64)
        ref = np.fft.irfft(x.astype(np.complex128), n=n, axis=-1)
    elif ft == "RFFT":
        x = RNG.standard_normal((rows, n)).astype(np.float32)
        ref = np.fft.rfft(x.astype(np.float64), axis=-1)
    else:
        x = cdata((rows, n), np.complex64)
        ref = getattr(np.fft, ft.lower())(x.astype(np.complex128), axis=-1)
    for threads in (None, 1):
        jf = ember.jit(lambda a: lax_fft(a, ft, (n,)), backend="native", num_threads=threads)
        close(np.asarray(jf(x)), ref, np.float32)


@pytest.mark.parametrize("n,rows", [(256, 1), (512, 8), (1024, 3), (2048, 1), (4096, 2), (4096, 15),
                                    (8192, 1), (16384, 1), (65536, 1)])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_few_long_lines_four_step(n, rows, dtype):
    """Few lines of a power-of-two length go through the four-step path (fft_lanes.h: the lanes
    hold columns of one line): FFT and IFFT equal NumPy's complex128 transform of each row within
    the precision's rounding, at one thread, two (fewer lines than threads: each line's two steps
    split between them) and the default alike; a NaN or Inf in one row makes that row non-finite
    and leaves the others exact."""
    x = cdata((rows, n), dtype)
    ref = x.astype(np.complex128)
    for ft in ("FFT", "IFFT"):
        want = getattr(np.fft, ft.lower())(ref, axis=-1)
        for threads in (None, 1, 2):
            jf = ember.jit(lambda a, ft=ft: lax_fft(a, ft, (n,)), backend="native", num_threads=threads)
            close(np.asarray(jf(x)), want, dtype)
    if rows > 1:
        x[0, n // 3] = np.nan
        x[1, 7] = np.inf
        got = native(lambda a: lax_fft(a, "FFT", (n,)), x)
        assert not np.isfinite(got[0]).any() and not np.isfinite(got[1]).all()
        close(got[2:], np.fft.fft(x[2:].astype(np.complex128), axis=-1), dtype)


@pytest.mark.parametrize("n,rows", [(512, 1), (2048, 3), (8192, 1), (32768, 2), (8192, 12), (131072, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_few_long_real_lines_four_step(n, rows, dtype):
    """RFFT and IRFFT of few long lines: the half-length complex line through the four-step path,
    then the split (merge first, for the inverse), against NumPy's float64 transforms, at the default
    threads and at two (a single line's steps split between them)."""
    x = RNG.standard_normal((rows, n)).astype(dtype)
    cd = np.complex64 if dtype == np.float32 else np.complex128
    h = cdata((rows, n // 2 + 1), cd)
    want = np.fft.irfft(h.astype(np.complex128), n=n, axis=-1)
    for threads in (None, 2):
        rf = ember.jit(lambda a: lax_fft(a, "RFFT", (n,)), backend="native", num_threads=threads)
        close(np.asarray(rf(x)), np.fft.rfft(x.astype(np.float64), axis=-1), dtype)
        irf = ember.jit(lambda a: lax_fft(a, "IRFFT", (n,)), backend="native", num_threads=threads)
        close(np.asarray(irf(h)), want, dtype)


@pytest.mark.parametrize("n", [2, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 8192])
def test_rfft_rows_lane_groups_and_nonfinite(n):
    """RFFT of power-of-two lengths over 1, 17 and 70 rows (partial groups of lanes; few rows take
    the four-step from n = 512): from n = 64 (8 lanes) or 128 (16) to 1024 the half-length
    transform's last stage is fused into the split and the store (fft_lanes.h's em_fftl_rlast).
    Every row equals NumPy's float64 rfft within float32 rounding, at the default thread count and
    one thread; a NaN or Inf stays in its row (the first, a middle and the last of a partial group),
    and IRFFT of the finite rows' spectra gives the rows back."""
    for rows in (1, 17, 70):
        x = RNG.standard_normal((rows, n)).astype(np.float32)
        bad = [0, rows // 2, rows - 1] if rows > 1 else []
        for r, v in zip(bad, (np.nan, np.inf, -np.inf)):
            x[r, (r * 7) % n] = v
        good = [r for r in range(rows) if r not in bad]
        want = np.fft.rfft(x[good].astype(np.float64), axis=-1)
        for threads in (None, 1) if rows == 70 else (None,):
            got = np.asarray(ember.jit(lambda a: lax_fft(a, "RFFT", (n,)), backend="native",
                                       num_threads=threads)(x))
            assert got.shape == (rows, n // 2 + 1)
            close(got[good], want, np.float32)
            for r in bad:
                assert not np.isfinite(got[r]).all()
        back = native(lambda a: lax_fft(a, "IRFFT", (n,)), got[good])
        close(back, x[good].astype(np.float64), np.float32)


@pytest.mark.parametrize("n", [4, 6, 14, 16, 18, 30, 32, 34, 62, 64, 66, 126, 130, 256, 1000, 1024, 2062,
                               4096])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_irfft_merges_the_rows_as_read(n, dtype):
    """IRFFT of even lengths over 1, 17 and 70 rows: float lanes merge the half-spectrum's entries
    k and n/2 - k as they read the rows (fft_lanes.h's em_fftl_load_merge: blocks of 8 (4) entries
    with their mirror blocks, the middle entries one by one; lengths around those thresholds,
    powers of two, 2-3-5 lengths and a Bluestein half-length, 1031). Each row equals NumPy's
    float64 irfft (which, as ember, ignores the imaginary parts of the first and last bins, set
    here) at the default thread count and one thread; a NaN or Inf stays in its row (the first, a
    middle and the last of a partial group)."""
    for rows in (1, 17, 70):
        h = cdata((rows, n // 2 + 1), dtype)
        h[:, 0] += 3j
        h[:, -1] -= 2j
        bad = [0, rows // 2, rows - 1] if rows > 1 else []
        for r, v in zip(bad, (np.nan, np.inf, -np.inf)):
            h[r, (r * 7) % (n // 2 + 1)] = v
        good = [r for r in range(rows) if r not in bad]
        want = np.fft.irfft(h[good].astype(np.complex128), n=n, axis=-1)
        for threads in (None, 1) if rows == 70 else (None,):
            got = np.asarray(ember.jit(lambda a: lax_fft(a, "IRFFT", (n,)), backend="native",
                                       num_threads=threads)(h))
            assert got.shape == (rows, n)
            close(got[good], want, dtype)
            for r in bad:
                assert not np.isfinite(got[r]).all()


def test_four_step_last_axis_then_a_column_axis():
    """A 2-d transform whose last axis is long and has few lines (four-step) and whose first axis
    is then transformed over columns (the lanes path), against NumPy's fft2."""
    x = cdata((3, 4096), np.complex64)
    got = native(lambda a: lax_fft(a, "FFT", (3, 4096)), x)
    close(got, np.fft.fft2(x.astype(np.complex128)), np.complex64)


def test_runtime_tables_are_freed_with_their_executables():
    """The malloc'd tables of the runtime plan cache and of ``fft_conv`` belong to the executables:
    programs built, run over new lengths (tables allocated) and dropped give the count of live
    tables back; a program built again from the same source (the library stays loaded) rebuilds
    its tables and is still right."""
    import gc

    from ember._src.native.runtime import fft_tables
    from ember._src.prims.fft import fft_conv

    ember.clear_caches()  # other tests' executables (their tables) go first: clear_caches frees them all
    gc.collect()
    base = fft_tables.live_tables()
    fns = [symbolic_native(lambda a: lax_fft(a, "FFT", (a.shape[-1],)), ("b", "n")),
           symbolic_native(lambda a: lax_fft(a, "RFFT", (a.shape[-1],)), ("b", "n")),
           ember.jit(fft_conv, backend="native", dynamic_axes=[("b", "n"), ("c", "k")])]
    x = None
    for n in (16, 48, 67, 256):
        x = cdata((2, n), np.complex64)
        close(np.asarray(fns[0](x)), np.fft.fft(x.astype(np.complex128), axis=-1), np.complex64)
        r = x.real.copy()
        close(np.asarray(fns[1](r)), np.fft.rfft(r.astype(np.float64), axis=-1), np.float32)
        got = np.asarray(fns[2](r, r))
        close(got, np.stack([np.convolve(v, v) for v in r.astype(np.float64)]), np.float32)
    assert fft_tables.live_tables() >= base + 3 * 4  # (at least) one table per new length and program
    del fns
    ember.clear_caches()
    gc.collect()
    assert fft_tables.live_tables() == base
    again = symbolic_native(lambda a: lax_fft(a, "FFT", (a.shape[-1],)), ("b", "n"))
    close(np.asarray(again(x)), np.fft.fft(x.astype(np.complex128), axis=-1), np.complex64)
    assert fft_tables.live_tables() > base


@pytest.mark.parametrize("target", [["-mavx512f", "-mfma"], ["-mavx2", "-mfma"], ["-mno-avx"]],
                         ids=["avx512", "avx2", "scalar"])
def test_helpers_compile_for_each_target_and_precision(tmp_path, target):
    """The fft step's helpers as the lowering registers them for complex64 and complex128 in one
    unit, after the thread pool's helpers, and each precision's kernel library with every path
    (float lanes on fft_passes.h's passes and fft_conv.h's transposes; the same in double), on each
    instruction set (float vectors of 16 or 8 lanes, double of 8 or 4): no warnings under -Wall."""
    import shutil
    import subprocess
    import types

    from ember._src.native.runtime import threadpool

    class Helpers:
        def __init__(self):
            self.helpers = {}

        def helper(self, name, text):
            self.helpers.setdefault(name, text)

    cc = Helpers()
    for dt in (np.complex64, np.complex128):
        aval = types.SimpleNamespace(dtype=dt)
        nfft._helpers(types.SimpleNamespace(inputs=[types.SimpleNamespace(aval=aval)]), cc)
    assert list(cc.helpers) == ["em_fft_core", "em_fft_f32", "em_fft_f64"]
    unit = "#include <stdint.h>\n#include <string.h>\n#include <math.h>\n" + threadpool.c_helpers()
    compiler = shutil.which("gcc") or shutil.which("cc")
    # the program's side, then each precision's kernel library (emit/fft_blocks.py)
    libs = [fft_blocks.library_source(s, None) for s in ("f32", "f64")]
    for i, text in enumerate([unit + "".join(cc.helpers.values()), *libs]):
        f = tmp_path / f"unit{i}.c"
        f.write_text(text)
        out = subprocess.run([compiler, "-fsyntax-only", "-Wall", "-Werror", "-std=c11", *target, str(f)],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr


# ---- compile time: a program's C reaches only the paths its fft steps can take (fft.py's reach) ----


def _compiled(f, *args, dynamic_axes=None):
    """The EM_FFTG mask in ``f``'s emitted C (None: no mask, everything) and the FFT functions
    left in its shared object (the compiler drops what the mask leaves unreachable), with the
    result of running it."""
    import re
    import shutil
    import subprocess

    from ember._src.native.runtime import compiler

    jf = ember.jit(f, backend="native", dynamic_axes=dynamic_axes)
    exe = jf.lower(*args).executable
    if dynamic_axes:
        exe = exe.specialization(exe.env_from_shapes([a.shape for a in args])).run.sym
    src = exe.source
    m = re.search(r'#define EM_FFTB_SYM "ember_fftb_[0-9a-f]+_f(?:32|64)_(all|\d+)"', src)
    # the program and the FFT kernel libraries it calls (emit/fft_blocks.py)
    sos = [compiler.compile_shared(src, name_hint="fft_gates")] + [
        lib._name for lib, _ in fft_blocks.prepare_for(src)]
    nm = shutil.which("nm")
    syms = None
    if nm:
        out = "".join(subprocess.run([nm, so], capture_output=True, text=True, check=True).stdout
                      for so in sos)
        syms = {ln.split()[-1].split(".")[0] for ln in out.splitlines() if ln.strip()}
    mask = None if m is None or m.group(1) == "all" else int(m.group(1))
    return mask, syms, jf(*args)


def _has(syms, name, want):
    if syms is not None:  # without nm the masks above still decide
        assert (name in syms) == want, (name, sorted(s for s in syms if s.startswith("em_fft")))


G = nfft


def test_simple_fft_compiles_only_its_lane_path():
    """A complex64 fft of length 8 over 6 lines: power-of-two lanes only, no four-step (long-line)
    path, no Bluestein tables, no real transforms, and fft_conv.h's convolution driver is not
    compiled."""
    x = cdata((6, 8), np.complex64)
    mask, syms, got = _compiled(lambda a: jnp.fft.fft(a, 8, 0, None), x)
    close(np.asarray(got), np.fft.fft(x.astype(np.complex128), 8, axis=0), np.complex64)
    assert mask == G.G_AXIS | G.G_P2
    for name in ("em_fftl_long_task_f32", "em_fftc_task_f32", "em_fftl_rfft_f32", "em_fftl_full_f32",
                 "em_fft_work", "em_fft_blue_tables"):
        _has(syms, name, False)
    _has(syms, "em_fftl_task_f32", True)  # (the axis kind itself may be inlined into it)


@pytest.mark.parametrize("case", ["long", "prime", "radix7", "rfft", "irfft_odd", "double"])
def test_gates_keep_the_paths_a_program_reaches(case):
    """Long lines keep the four-step path, a prime length Bluestein's lanes (and the double FFT that
    builds its filter), a factor 7 the odd-radix lanes, an RFFT its fused last stage, an odd IRFFT
    the full-line path; complex128 the same lanes in double (and the four-step for a long line):
    each against NumPy."""
    f = lambda a: jnp.fft.fft(a)  # noqa: E731
    if case == "long":
        x, want_bits, present, absent = cdata((1, 16384), np.complex64), G.G_LONG | G.G_P2, \
            ["em_fftl_long_task_f32"], ["em_fft_work"]
    elif case == "prime":
        x, want_bits, present, absent = cdata((5, 1031), np.complex64), G.G_BLUE, \
            ["em_fft_work", "em_fftp_stage_f32"], ["em_fftl_long_task_f32"]
    elif case == "radix7":
        x, want_bits, present, absent = cdata((5, 49), np.complex64), G.G_MIXED, \
            ["em_fftl_task_f32"], ["em_fft_work", "em_fftl_long_task_f32"]
    elif case == "rfft":
        f = lambda a: jnp.fft.rfft(a)  # noqa: E731
        x, want_bits, present, absent = RNG.standard_normal((20, 1024)).astype(np.float32), \
            G.G_RFFT | G.G_RL8 | G.G_P2R, ["em_fftl_rfft_f32"], ["em_fftl_axis_f32", "em_fftl_full_f32"]
    elif case == "irfft_odd":
        f = lambda a: jnp.fft.irfft(a, 99)  # noqa: E731
        x, want_bits, present, absent = cdata((3, 50), np.complex64), G.G_IRFFT | G.G_FULL | G.G_MIXED, \
            ["em_fftl_task_f32"], ["em_fftl_rfft_f32", "em_fftl_long_task_f32", "em_fft_work"]
    else:
        x, want_bits, present, absent = cdata((1, 16384), np.complex128), G.G_LONG | G.G_P2, \
            ["em_fftl_long_task_f64", "em_fftl_task_f64"], ["em_fftl_rfft_f64", "em_fft_work"]
    mask, syms, got = _compiled(f, x)
    ref = {"rfft": lambda: np.fft.rfft(x.astype(np.float64), axis=-1),
           "irfft_odd": lambda: np.fft.irfft(x.astype(np.complex128), 99, axis=-1)}.get(
        case, lambda: np.fft.fft(x.astype(np.complex128), axis=-1))()
    close(np.asarray(got), ref, x.dtype)
    assert mask is not None and mask & want_bits == want_bits, (mask, want_bits)
    for name in present:
        _has(syms, name, True)
    for name in absent:
        _has(syms, name, False)


def test_gates_join_over_a_programs_fft_steps():
    """Two fft steps of one precision in one program (a power of two and a prime) share one block
    whose mask holds both steps' paths; the runtime-length step of another program keeps every path."""
    x, z = cdata((4, 64), np.complex64), cdata((3, 1031), np.complex64)
    mask, syms, got = _compiled(lambda a, b: (jnp.fft.ifft(a), jnp.fft.fft(b)), x, z)
    close(np.asarray(got[0]), np.fft.ifft(x.astype(np.complex128), axis=-1), np.complex64)
    close(np.asarray(got[1]), np.fft.fft(z.astype(np.complex128), axis=-1), np.complex64)
    assert mask == G.G_AXIS | G.G_P2 | G.G_P2R | G.G_LINE | G.G_BLUE  # (64 = CW^2 of 8 float lanes)
    _has(syms, "em_fftp_stage_f32", True)
    _has(syms, "em_fftp_fft_to_f32", True)
    y = cdata((3, 100), np.complex64)
    mask, syms, got = _compiled(lambda a: lax_fft(a, "FFT", (a.shape[-1],)), y, dynamic_axes=[("b", "n")])
    close(np.asarray(got), np.fft.fft(y.astype(np.complex128), axis=-1), np.complex64)
    assert mask == G.G_AXIS | G.G_PATHS
    for name in ("em_fftl_long_task_f32", "em_fftl_task_f32", "em_fftp_stage_f32"):
        _has(syms, name, True)
