"""Accuracy of the inline float32 math in c_ops (the bounds stated in its docstring)."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
import scipy.special as sps

from ember._src.native.emit import c_ops
from ember._src.native.runtime import compiler, toolchain
from tests.native.conftest import requires_cc
from tests.native.util import row_softmax

FUNCS = ["em_expf", "em_logf", "em_tanhf", "em_logisticf", "em_erff"]
REFS = [np.exp, np.log, np.tanh, sps.expit, sps.erf]
ULP_BOUND = {"em_expf": 2, "em_logf": 2, "em_tanhf": 7, "em_logisticf": 4, "em_erff": 8}
ABS_BOUND = {"em_tanhf": 4e-7, "em_erff": 5e-7}
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 3.4e38, -3.4e38, 88.7, 88.8,
                    -87.3, -103.9, -104.5, 1, -1, 0.625, -0.625, 9, -9, 4, -4], np.float32)


def _load(no_fma: bool) -> dict:
    body = "".join(
        f"void run_{n}(const float *restrict x, float *restrict o, int64_t m) {{\n"
        f"#pragma omp simd\n for (int64_t i = 0; i < m; ++i) o[i] = {n}(x[i]);\n}}\n" for n in FUNCS)
    # without FMA (a target lacking it) EM_FMA is a plain multiply-add, two roundings
    head = "#undef __FMA__\n#undef __ARM_FEATURE_FMA\n" if no_fma else ""
    lib = compiler.load_library(head + c_ops.prelude_for(body) + body, name_hint="math_test")
    out = {}
    for n in FUNCS:
        f = getattr(lib, f"run_{n}")
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        out[n] = f
    return out


@pytest.fixture(scope="module")
def kernels():
    return _load(no_fma=False)


@pytest.fixture(scope="module")
def kernels_no_fma():
    return _load(no_fma=True)


def _run(f, x: np.ndarray) -> np.ndarray:
    o = np.empty_like(x)
    f(x.ctypes.data, o.ctypes.data, x.size)
    return o


def _max_error(f, ref, name: str, x: np.ndarray) -> float:
    """Check ``f`` against ``ref`` in float64 on ``x``: the NaN pattern and the infinities match, finite
    results are within the stated ulp bound (subnormal results within 1.2e-44 absolute); returns
    the largest ulp error seen."""
    got = _run(f, x)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
        want32 = want.astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want32)), \
        f"{name}: NaN pattern differs at {x[np.isnan(got) != np.isnan(want32)][:5]}"
    fin = np.isfinite(want32) & ~np.isnan(got)
    assert np.array_equal(got[~fin & ~np.isnan(got)], want32[~fin & ~np.isnan(got)]), "infinities differ"
    spacing = np.spacing(np.abs(want32[fin])).astype(np.float64)
    ulps = np.abs(got[fin].astype(np.float64) - want[fin]) / spacing
    tiny = np.abs(want[fin]) < 1e-37  # subnormal results: absolute error checked instead
    worst = ulps[~tiny].max()
    assert worst <= ULP_BOUND[name], f"{name}: {worst:.2f} ulp at x = {x[fin][~tiny][ulps[~tiny].argmax()]!r}"
    assert np.abs(got[fin][tiny] - want[fin][tiny]).max(initial=0) <= 1.2e-44
    if name in ABS_BOUND:
        assert np.abs(got[fin] - want[fin]).max() <= ABS_BOUND[name]
    return float(worst)


@requires_cc
@pytest.mark.parametrize("name,ref", list(zip(FUNCS, REFS)))
def test_accuracy(kernels, name, ref):
    rng = np.random.default_rng(0)
    x = np.concatenate([SPECIAL, rng.standard_normal(1 << 18).astype(np.float32) * 30,
                        (rng.standard_normal(1 << 16) * 3).astype(np.float32),
                        np.exp(rng.uniform(-100, 88, 1 << 16)).astype(np.float32)])
    _max_error(kernels[name], ref, name, x)


def _sweep() -> np.ndarray:
    """Every 509th float32 bit pattern over all 2**32 (both signs, every exponent: subnormals,
    +-inf and NaNs included) plus dense runs of consecutive floats at the thresholds the
    implementations switch at (clamps, small-argument paths, the subnormal-result range)."""
    strided = np.arange(0, 1 << 32, 509, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = [-104.0, -103.97, -87.34, 88.72, 89.0, 4e-4, 7.9053111, 9.01, 4.0, 1e-20, 1.1754944e-38,
             0.70710677, 1.0, 1.4142135, 0.0]
    runs = [np.float32(e).view(np.uint32).astype(np.int64) + np.arange(-2048, 2048) for e in edges]
    dense = np.concatenate([np.clip(r, 0, (1 << 31) - 1) for r in runs]).astype(np.uint32).view(np.float32)
    return np.concatenate([SPECIAL, strided, dense, -dense])


@requires_cc
@pytest.mark.parametrize("name,ref", list(zip(FUNCS, REFS)))
def test_accuracy_full_range_sweep(kernels, name, ref):
    """The bounds hold over the whole float32 line, not only where random samples fall."""
    _max_error(kernels[name], ref, name, _sweep())


@requires_cc
@pytest.mark.parametrize("name,ref", list(zip(FUNCS, REFS)))
def test_accuracy_without_fma(kernels_no_fma, name, ref):
    """The same bounds with the multiply-add fallback that targets without FMA compile."""
    _max_error(kernels_no_fma[name], ref, name, _sweep())


@requires_cc
def test_signed_zero_and_saturation(kernels):
    x = np.array([-0.0, 0.0, 20.0, -20.0, 1e30, -1e30], np.float32)
    t = _run(kernels["em_tanhf"], x)
    assert np.signbit(t[0]) and not np.signbit(t[1])
    np.testing.assert_array_equal(t[2:], [1, -1, 1, -1])
    e = _run(kernels["em_erff"], x)
    assert np.signbit(e[0]) and not np.signbit(e[1])
    np.testing.assert_array_equal(e[2:], [1, -1, 1, -1])
    want = [1, np.float32(sps.expit(-20.0)), 1, 0]
    np.testing.assert_array_equal(_run(kernels["em_logisticf"], x)[2:], want)


@requires_cc
def test_fused_math_kernel_inner_loop_vectorizes():
    """A fused elementwise chain over every inline float32 math function compiles to a vectorized
    inner loop (gcc's -fopt-info-vec report names the loop's source line)."""
    import ember
    import ember.numpy as jnp
    from ember import nn
    from ember.scipy import special

    info = toolchain.find_compiler()
    if info.family != "gcc":
        pytest.skip(f"the vectorization report is parsed for gcc only (compiler: {info.identity})")

    def chain(x):
        y = jnp.tanh(2 * x + 1) * jnp.exp(-x)
        return y + jnp.log(jnp.abs(x) + 1) + nn.sigmoid(x) + special.erf(x)

    x = np.linspace(-4, 4, 4096, dtype=np.float32)
    f = ember.jit(chain, backend="native")
    np.testing.assert_allclose(f(x), ember.jit(chain, backend="numpy")(x), rtol=2e-5, atol=2e-6)
    exe = f.lower(x).executable
    assert exe.schedule.count("kernel") == 1
    source = exe.source
    for fn in ("em_tanhf", "em_expf", "em_logf", "em_erff"):
        assert fn + "(" in source, f"{fn} not inlined into the kernel"
    lines = source.splitlines()
    loops = [i + 1 for i, line in enumerate(lines) if line.strip().startswith("for (int64_t")]
    assert loops, source
    inner = loops[-1]  # the innermost loop: from its `for` line to the line storing the output
    store = next(i + 1 for i in range(inner, len(lines)) if "p1_float[" in lines[i] and "] =" in lines[i])
    report = compiler.vectorization_report(source)
    vectorized = {int(m) for m in re.findall(r":(\d+):\d+: optimized: loop vectorized", report)}
    assert vectorized & set(range(inner, store + 1)), \
        f"inner loop (lines {inner}-{store}) not vectorized:\n{report}\n{source}"


@requires_cc
def test_softmax_kernel_loops_vectorize():
    """A scaled row softmax fuses into one kernel whose row loops (max, output) vectorize
    around the vectorized row exp (``em_exp_row_f32``, which also returns the row sum), and
    matches NumPy; the plain row softmax becomes one call of ``em_softmax_rows_f32``."""
    import ember

    info = toolchain.find_compiler()
    if info.family != "gcc":
        pytest.skip(f"the vectorization report is parsed for gcc only (compiler: {info.identity})")

    def scaled_softmax(v):  # not exactly a softmax: a row kernel with its own loops
        return row_softmax(v) * 2.0

    x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32) * 10
    x[3, 7] = np.nan
    x[5] = -np.inf
    x[5, 2] = 0
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        s = x64 - x64.max(1, keepdims=True)
        e = np.exp(s)
        want = e / e.sum(1, keepdims=True)
    soft = ember.jit(row_softmax, backend="native", num_threads=1)
    np.testing.assert_allclose(np.asarray(soft(x)), want, rtol=3e-6, atol=1e-30)
    assert re.search(r"^\s+em_softmax_rows_f32\(p", soft.lower(x).executable.source, re.M)
    f = ember.jit(scaled_softmax, backend="native", num_threads=1)
    np.testing.assert_allclose(np.asarray(f(x)), 2 * want, rtol=3e-6, atol=1e-30)
    exe = f.lower(x).executable
    assert exe.schedule.count("kernel") == 1
    lines = exe.source.splitlines()
    inner = [i + 1 for i, line in enumerate(lines) if line.strip().startswith("for (int64_t i")]
    assert len(inner) == 2 and "em_exp_row_f32(" in exe.source, exe.source
    report = compiler.vectorization_report(exe.source)
    vectorized = {int(m) for m in re.findall(r":(\d+):\d+: optimized: loop vectorized", report)}
    # gcc names a loop by its `for` line, the `omp simd` line above it or a line of its body
    missing = [i for i in inner if not vectorized & set(range(i - 1, i + 3))]
    assert not missing, f"row loops at lines {missing} not vectorized:\n{report}\n{exe.source}"
