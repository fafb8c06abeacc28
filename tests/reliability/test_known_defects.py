"""Regression tests for defects found where features meet (issue 32): integer division at INT_MIN,
eager operations with a broken C compiler, thread settings honoured by every parallel path, one
formula for the logistic tails on every backend, and a crash of ``jit(vmap(grad(f)))`` in float64.
Each compares eager mode, the NumPy reference backend and the native backend with NumPy (or a
hand-derived value); anything that could kill the process runs in a subprocess."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import ember
import ember.lax as lax
import ember.nn as nn
import ember.numpy as jnp
from tests.helpers import child_env

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def _everywhere(f, *args):
    """``f`` eagerly, under jit on the NumPy backend and on the native backend."""
    return {"eager": np.asarray(f(*[jnp.asarray(a) for a in args])),
            "numpy": np.asarray(ember.jit(f, backend="numpy")(*args)),
            "native": np.asarray(ember.jit(f, backend="native")(*args))}


def _int_edges(dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of the dtype's edge values (MIN, MAX, 0, +-1, small odd numbers)."""
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    vals = sorted({lo, lo + 1, -7, -3, -1, 0, 1, 2, 3, 7, hi - 1, hi})
    vals = np.array([v for v in vals if info.min <= v <= info.max], dtype)
    x, y = np.meshgrid(vals, vals)
    return x.ravel(), y.ravel()


def test_int32_floor_divide_and_remainder_at_int_min():
    a = np.array([-2**31, 7, 2**30, -2**31, 5], np.int32)
    b = np.array([3, -2**31, -2**31, 2**31 - 1, -2**31], np.int32)
    for where, got in _everywhere(jnp.floor_divide, a, b).items():
        np.testing.assert_array_equal(got, a // b, err_msg=where)
    for where, got in _everywhere(jnp.remainder, a, b).items():
        np.testing.assert_array_equal(got, a % b, err_msg=where)
    # the values NumPy gives, written out: -2**31 // 3 rounds down, 7 % -2**31 takes the divisor's sign
    np.testing.assert_array_equal(np.asarray(jnp.floor_divide(a, b)), [-715827883, -1, -1, -2, -1])


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_integer_floor_divide_remainder_match_numpy_on_edges(dtype):
    # NumPy's integer answers, division by zero included: x // 0 == x % 0 == 0 and MIN // -1 wraps to MIN
    x, y = _int_edges(dtype)
    with np.errstate(all="ignore"):
        want_q, want_r = np.floor_divide(x, y), np.remainder(x, y)
    for where, got in _everywhere(jnp.floor_divide, x, y).items():
        np.testing.assert_array_equal(got, want_q, err_msg=f"floor_divide {where}")
    for where, got in _everywhere(jnp.remainder, x, y).items():
        np.testing.assert_array_equal(got, want_r, err_msg=f"remainder {where}")


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_lax_div_rem_truncate_on_every_backend(dtype):
    # C semantics, derived with Python integers: the quotient rounds toward zero, x / 0 == x % 0 == 0,
    # and the result wraps to the dtype (MIN / -1 == MIN, MIN % -1 == 0)
    x, y = _int_edges(dtype)
    bits = np.iinfo(dtype).bits
    signed = np.iinfo(dtype).min < 0

    def wrap(v: int) -> int:
        v &= (1 << bits) - 1
        return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v

    def trunc_div(p: int, q: int) -> int:
        return 0 if q == 0 else (abs(p) // abs(q)) * (1 if (p < 0) == (q < 0) else -1)

    want_q = np.array([wrap(trunc_div(int(p), int(q))) for p, q in zip(x, y)], dtype)
    pairs = [(int(p), int(q)) for p, q in zip(x, y)]
    want_r = np.array([wrap(p - trunc_div(p, q) * q) if q else 0 for p, q in pairs], dtype)
    for where, got in _everywhere(lax.div, x, y).items():
        np.testing.assert_array_equal(got, want_q, err_msg=f"div {where}")
    for where, got in _everywhere(lax.rem, x, y).items():
        np.testing.assert_array_equal(got, want_r, err_msg=f"rem {where}")


BROKEN_CC_CHILD = """
import warnings, numpy as np, ember, ember.numpy as jnp
rng = np.random.default_rng(0)
a, b = rng.standard_normal((2, 300, 300), dtype=np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    eager = np.asarray(jnp.asarray(a) @ jnp.asarray(b))
    dot_t = np.asarray(jnp.dot(jnp.asarray(a), jnp.asarray(b).T))
    jitted = np.asarray(ember.jit(lambda x, y: x @ y)(a, b))
want = a.astype(np.float64) @ b.astype(np.float64)
for got, ref in ((eager, want), (dot_t, a.astype(np.float64) @ b.T.astype(np.float64)), (jitted, want)):
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)
print("ok", sum("native backend is unavailable" in str(w.message) for w in caught))
"""


@pytest.mark.parametrize("compiler", ["missing", "failing"])
def test_eager_matmul_needs_no_compiler(tmp_path, compiler):
    # a 300 x 300 float32 product is large enough for the eager GEMM kernel path; with $EMBER_CC
    # missing or failing, eager products run on NumPy and jit falls back (one warning)
    cc = tmp_path / "cc"
    if compiler == "failing":
        cc.write_text("#!/bin/sh\nexit 1\n")
        cc.chmod(0o755)
    env = child_env(tmp_path / "cache")
    env["EMBER_CC"] = str(cc)
    env.pop("EMBER_BACKEND", None)
    out = subprocess.run([sys.executable, "-c", BROKEN_CC_CHILD], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["ok", "1"], out.stdout + out.stderr[-3000:]


TAIL_X = np.concatenate([-np.logspace(-8, 3, 120), [0.0, -0.0], np.logspace(-8, 3, 120),
                         [np.inf, -np.inf, np.nan, -88.7, -87.3, -100.0, -103.9, -104.1, 88.7, 89.0],
                         [-745.2, 709.8]])


def _ordered(a: np.ndarray) -> np.ndarray:
    """The floats of ``a`` as integers in their numeric order (neighbouring floats differ by 1)."""
    it = np.int32 if a.dtype == np.float32 else np.int64
    i = a.view(it).astype(np.int64)
    return np.where(i < 0, np.iinfo(it).min - i, i)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Units in the last place between ``a`` and ``b`` where both are finite, 0 elsewhere."""
    both = np.isfinite(a) & np.isfinite(b)
    return np.where(both, np.abs(_ordered(np.where(both, a, 0)) - _ordered(np.where(both, b, 0))), 0)


def _same_class(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where ``a`` and ``b`` agree on NaN, infinity, zero and sign."""
    return ((np.isnan(a) == np.isnan(b)) & (np.isinf(a) == np.isinf(b)) & ((a == 0) == (b == 0))
            & (np.isnan(a) | (np.signbit(a) == np.signbit(b))))


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        e = np.exp(-np.abs(x))
        return np.where(x < 0, e / (1 + e), 1 / (1 + e))


# float64 formulas (NumPy's logaddexp for the log tails), rounded once to the tested dtype
TAIL_FNS = {
    "sigmoid": (nn.sigmoid, _sigmoid64, 4),
    "log_sigmoid": (nn.log_sigmoid, lambda x: -np.logaddexp(0, -x), 4),
    "softplus": (nn.softplus, lambda x: np.logaddexp(0, x), 4),
    "tanh": (jnp.tanh, np.tanh, 8),
    "exp": (jnp.exp, np.exp, 2),
}


@pytest.mark.parametrize("name", sorted(TAIL_FNS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tails_agree_across_backends(name, dtype):
    # every backend: the float64 formula's value within the native function's ulp bound, and the
    # same NaN / infinity / zero / sign as the other backends (float32 sigmoid(-100) = 3.78e-44
    # natively was 0 eagerly, where 1 / (1 + exp(100)) overflowed)
    f, ref, bound = TAIL_FNS[name]
    x = TAIL_X.astype(dtype)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64)).astype(dtype)
    got = _everywhere(f, x)
    for where, y in got.items():
        assert y.dtype == dtype, where
        assert _same_class(y, got["native"]).all(), (where, x[~_same_class(y, got["native"])])
        far = _ulps(y, want) > bound
        assert not far.any(), (where, x[far], y[far], want[far])
    if name == "sigmoid" and dtype == np.float32:
        # the correctly rounded e^-100 / (1 + e^-100): 27 float32 subnormal steps of 2^-149
        for where, y in got.items():
            assert y[x == -100.0][0] == np.float32(27 * 2.0 ** -149), where


ONE_THREAD_CHILD = """
import os, sys, time, threading
if sys.argv[1] == "affinity":
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
import numpy as np, ember, ember.numpy as jnp
from ember._src.native.runtime import threadpool
threadpool.load(wait=True)  # its build runs in a thread of its own: done before anything is counted
re, im = np.random.default_rng(0).standard_normal((2, 64, 1024))
x = (re + 1j * im).astype(np.complex64)
kw = {"num_threads": 1} if sys.argv[1] == "num_threads" else {}
f = ember.jit(jnp.fft.fft, **kw)
# symmetric positive definite without a NumPy BLAS call: NumPy's own OpenBLAS threads spin for a
# while after a call and would count as other threads; the references are computed after timing
d = np.random.default_rng(1).uniform(-1.0, 1.0, 639)
a = np.diag(np.full(640, 4.0)) + np.diag(d, 1) + np.diag(d, -1)
chol = ember.jit(jnp.linalg.cholesky, **kw)  # LAPACK potrf: OpenBLAS's threads
fx, ca = np.asarray(f(x)), np.asarray(chol(a))


def ticks():  # CPU time of each thread of the process (utime + stime, in clock ticks)
    out = {}
    for t in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{t}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        out[int(t)] = int(fields[11]) + int(fields[12])
    return out


t0, c0, w0 = ticks(), time.process_time(), time.perf_counter()
for _ in range(200):
    f(x)
for _ in range(10):
    chol(a)
t1, c1, w1 = ticks(), time.process_time(), time.perf_counter()
me = threading.get_native_id()
others = sum(v - t0.get(t, 0) for t, v in t1.items() if t != me)
np.testing.assert_allclose(fx, np.fft.fft(x), rtol=1e-4, atol=1e-3)
np.testing.assert_allclose(ca, np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)
print(threadpool.workers(), others, t1[me] - t0[me], c1 - c0, w1 - w0)
"""


def test_fft_and_lapack_run_on_one_thread_when_told(tmp_path):
    # OMP_NUM_THREADS=1, jit(num_threads=1) and an affinity mask of one CPU: the FFT's line groups and
    # a Cholesky factorization (LAPACK in OpenBLAS) run on the calling thread alone -- no pool worker
    # starts, no other thread gets CPU time, and
    # the process's CPU time stays within its wall time (load can only lower that ratio). The
    # affinity child finds the program the others compiled in the cache (built for more threads).
    env = child_env(tmp_path / "cache")
    env.pop("OMP_NUM_THREADS", None)
    for mode in ("omp", "num_threads", "affinity"):
        menv = dict(env, OMP_NUM_THREADS="1") if mode == "omp" else env
        out = subprocess.run([sys.executable, "-c", ONE_THREAD_CHILD, mode], capture_output=True, text=True,
                             env=menv, timeout=300)
        assert out.returncode == 0, (mode, out.stderr[-3000:])
        workers, others, mine, cpu, wall = out.stdout.split()
        assert int(workers) == 0, (mode, out.stdout)
        assert int(others) <= 1, (mode, out.stdout)  # a tick of rounding at most
        assert float(cpu) <= 1.2 * float(wall) + 0.05, (mode, out.stdout)


VMAP_GRAD_CHILD = """
import numpy as np, ember, ember.numpy as enp
ember.config.update("jax_enable_x64", True)
f = lambda x: enp.sum(enp.where(x > 0.1, enp.max(x, axis=0) * x, enp.sin(x)))
xs = np.random.default_rng(0).standard_normal((3, 4, 5))


def scanned(xs):
    return ember.lax.scan(lambda c, x: (c, ember.grad(f)(x)), 0.0, xs)[1]


xt = np.ascontiguousarray(xs.transpose(1, 0, 2))
cases = {"vmap": (ember.vmap(ember.grad(f)), xs),
         "vmap_in_axes_1": (ember.vmap(ember.grad(f), in_axes=1), xt), "scan": (scanned, xs)}
for name, (g, arg) in cases.items():
    got = np.asarray(ember.jit(g, backend="native")(arg))
    np.testing.assert_allclose(got, np.asarray(ember.jit(g, backend="numpy")(arg)), rtol=1e-12, atol=1e-12)
    print(name, got.dtype, got.shape)
"""


def _fd_grad(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar function ``f`` at ``x``."""
    out = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        out[i] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def test_jit_vmap_grad_of_max_float64_does_not_crash(tmp_path):
    # the kernel reducing max (with its NaN flag) and sum over a 4-long axis in one `omp simd` loop:
    # an int flag beside double accumulators was miscompiled (an aligned store 8 bytes off: SIGSEGV)
    out = subprocess.run([sys.executable, "-c", VMAP_GRAD_CHILD], capture_output=True, text=True,
                         env=child_env(tmp_path / "cache"), timeout=300)
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])
    assert out.stdout.split() == ["vmap", "float64", "(3,", "4,", "5)", "vmap_in_axes_1", "float64", "(3,",
                                  "4,", "5)", "scan", "float64", "(3,", "4,", "5)"], out.stdout
    # the gradient itself, against central differences of the NumPy formula (away from the kinks)
    ember.config.update("jax_enable_x64", True)
    xs = np.random.default_rng(0).standard_normal((3, 4, 5))
    g = np.asarray(ember.jit(ember.vmap(ember.grad(
        lambda x: jnp.sum(jnp.where(x > 0.1, jnp.max(x, axis=0) * x, jnp.sin(x))))), backend="native")(xs))
    f_np = lambda x: np.sum(np.where(x > 0.1, np.max(x, axis=0) * x, np.sin(x)))  # noqa: E731
    for b in range(3):
        np.testing.assert_allclose(g[b], _fd_grad(f_np, xs[b]), rtol=1e-6, atol=1e-6)
