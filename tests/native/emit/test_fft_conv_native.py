"""The ``fft_conv`` primitive (a real linear convolution by FFT in one native step, csrc/fft_conv.h)
against float64 NumPy ``np.convolve``: every transform size class (direct sums below 16, then powers
of two to 8192), both precisions, zero extension of the leading axes, the ``valid`` cut, static
and symbolic (runtime) sizes with one compile, the thread pool, the reference implementation, and
its derivatives (jvp/vjp against finite differences, vmap against a loop)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember._src.native import specialize
from ember._src.prims.fft import fft_conv
from ember.test_util import check_grads
from tests.native.conftest import requires_cc

pytestmark = requires_cc
RNG = np.random.default_rng(11)


def reference(x, y, valid=None):
    """float64 convolution of the rows, leading axes zero-extended, columns from ``valid`` zero."""
    lead = tuple(max(a, b) for a, b in zip(x.shape[:-1], y.shape[:-1]))
    co = x.shape[-1] + y.shape[-1] - 1
    out = np.zeros((*lead, co))
    for idx in np.ndindex(*lead):
        if all(i < d for i, d in zip(idx, x.shape)) and all(i < d for i, d in zip(idx, y.shape)):
            out[idx] = np.convolve(x[idx].astype(np.float64), y[idx].astype(np.float64))
    if valid is not None:
        out[..., max(valid, 0):] = 0
    return out


def close(got, want, dtype):
    """Within the transform's rounding, relative to the largest magnitude: float32 is computed in
    float32 (about 1e-7 per butterfly stage), float64 in float64."""
    tol = 2e-6 if np.dtype(dtype) == np.float32 else 1e-13
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=tol * scale)


def steps(jf, *args):
    sym = jf.lower(*args)
    sched = sym.executable.schedule if hasattr(sym.executable, "schedule") else \
        specialize.symbolic_executable(sym.program).schedule
    return [(st.kind.value, st.eqns[0].prim.name) for st in sched.steps]


# (ca, cb): results of length 1 .. 8191, so every size class: direct sums (L < 16), L = 16 .. 8192
SIZES = [(1, 1), (2, 1), (3, 4), (8, 8), (9, 8), (16, 1), (13, 20), (32, 33), (64, 64), (100, 29),
         (256, 256), (300, 600), (512, 513), (1024, 1024), (2000, 2100), (4096, 4096)]


@pytest.mark.parametrize("ca,cb", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_static_sizes_against_numpy(ca, cb, dtype):
    x = RNG.standard_normal((5, ca)).astype(dtype)
    y = RNG.standard_normal((5, cb)).astype(dtype)
    jf = ember.jit(fft_conv, backend="native")
    got = np.asarray(jf(x, y))
    assert got.dtype == dtype
    close(got, reference(x, y), dtype)
    kinds = steps(jf, x, y)
    assert ("call", "fft_conv") in kinds and not any(k == "fallback" for k, _ in kinds), kinds


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_runtime_sizes_one_compile(dtype):
    """Capacities and leading sizes are named dynamic axes: one C compile for every combination,
    leading axes of different sizes zero-extended, the cut at a runtime ``valid``."""
    jf = ember.jit(fft_conv, backend="native", dynamic_axes=[("bx", "ca"), ("by", "cb"), ()])
    for bx, by, ca, cb in [(3, 3, 4, 4), (1, 17, 512, 512), (20, 2, 1, 300), (33, 33, 64, 128), (2, 5, 7, 3)]:
        x = RNG.standard_normal((bx, ca)).astype(dtype)
        y = RNG.standard_normal((by, cb)).astype(dtype)
        for valid in (ca + cb - 1, (ca + cb) // 2, 0):
            close(np.asarray(jf(x, y, np.int32(valid))), reference(x, y, valid), dtype)
    assert jf.cache_info()["compiles"] == 1
    sym = specialize.symbolic_executable(jf.lower(x, y, np.int32(1)).program)
    assert sym.fallback_reason is None and ("call", "fft_conv") in [
        (st.kind.value, st.eqns[0].prim.name) for st in sym.schedule.steps]


def test_rank3_zero_extension_and_reference_impl():
    """Two leading axes, each zero-extended on its own; the NumPy reference implementation (eager,
    and the numpy backend) agrees with the native step."""
    x = RNG.standard_normal((2, 5, 30)).astype(np.float32)
    y = RNG.standard_normal((3, 4, 40)).astype(np.float32)
    want = reference(x, y, 50)
    close(np.asarray(ember.jit(fft_conv, backend="native")(x, y, 50)), want, np.float32)
    close(np.asarray(ember.jit(fft_conv, backend="numpy")(x, y, 50)), want, np.float32)
    close(np.asarray(fft_conv(x, y, 50)), want, np.float32)


def test_many_rows_on_the_thread_pool():
    """Enough rows for the pool (and a last group with fewer rows than lanes): every row equals its
    own convolution, whatever thread computed it."""
    x = RNG.standard_normal((1001, 200)).astype(np.float32)
    y = RNG.standard_normal((1001, 57)).astype(np.float32)
    jf = ember.jit(fft_conv, backend="native", parallel_threshold=1)
    close(np.asarray(jf(x, y)), reference(x, y), np.float32)


def test_empty_operands():
    x = np.zeros((0, 8), np.float32)
    y = RNG.standard_normal((0, 3)).astype(np.float32)
    got = np.asarray(ember.jit(fft_conv, backend="native")(x, y))
    assert got.shape == (0, 10)
    assert np.asarray(fft_conv(np.zeros((2, 0), np.float32), np.ones((2, 3), np.float32))).shape == (2, 0)


def test_bad_operands():
    with pytest.raises(ember.errors.DTypeError, match="float32 or two float64"):
        fft_conv(np.ones(3, np.float32), np.ones(3, np.float64))
    with pytest.raises(ember.errors.ShapeError, match="one rank"):
        fft_conv(np.ones((2, 3), np.float32), np.ones(3, np.float32))


def test_derivatives_against_finite_differences():
    """jvp and vjp (the transpose: a correlation with the reversed other operand, the cotangent cut
    at ``valid``, sliced back to the operand's leading shape), to second order, natively."""
    x = RNG.standard_normal((2, 9))
    y = RNG.standard_normal((3, 6))
    f = ember.jit(lambda a, b: fft_conv(a, b, 11), backend="native")
    check_grads(f, (x, y), order=2, modes=("fwd", "rev"))
    g = ember.jit(ember.grad(lambda a, b: (fft_conv(a, b, 11) ** 2).sum(), argnums=(0, 1)), backend="native")
    gx, gy = g(x, y)
    eps, base = 1e-6, (reference(x, y, 11) ** 2).sum()
    d = np.zeros_like(x)
    d[1, 4] = eps
    assert abs(((reference(x + d, y, 11) ** 2).sum() - base) / eps - np.asarray(gx)[1, 4]) < 1e-4
    d = np.zeros_like(y)
    d[2, 5] = eps  # row 2 of y meets zeros of x: no effect
    assert abs(np.asarray(gy)[2, 5]) == 0.0


def test_vmap_with_batched_and_unbatched_valid():
    x = RNG.standard_normal((4, 3, 10)).astype(np.float32)
    y = RNG.standard_normal((3, 7)).astype(np.float32)
    valid = np.array([16, 3, 0, 9], np.int32)
    got = np.asarray(ember.jit(ember.vmap(fft_conv, in_axes=(0, None, 0)), backend="native")(x, y, valid))
    close(got, np.stack([reference(x[i], y, int(valid[i])) for i in range(4)]), np.float32)
    got = np.asarray(ember.vmap(lambda a: fft_conv(y, a, 12))(x))
    close(got, np.stack([reference(y, x[i], 12) for i in range(4)]), np.float32)


@pytest.mark.parametrize("target", [["-mavx512f", "-mfma"], ["-mavx2", "-mfma"], ["-mno-avx"]],
                         ids=["avx512", "avx2", "scalar"])
def test_header_compiles_for_each_target_and_precision(tmp_path, target):
    """fft_conv.h for both precisions in one unit (as a program using both includes it), after
    fft_core.h, fft_passes.h and the thread pool's helpers, on each instruction set (vector widths 64 and 32
    bytes); no warnings under -Wall."""
    import shutil
    import subprocess

    from ember._src.native.csrc import load
    from ember._src.native.emit import fft as nfft
    from ember._src.native.runtime import threadpool

    cc = shutil.which("gcc") or shutil.which("cc")
    unit = "#include <stdint.h>\n#include <string.h>\n#include <math.h>\n" + threadpool.c_helpers()
    unit += nfft._CORE
    for real_t, elti, suffix in (("float", "int32_t", "f32"), ("double", "int64_t", "f64")):
        unit += (f"#define ELT {real_t}\n#define ELTI {elti}\n#define EM_T(name) name##_{suffix}\n"
                 + load("fft_passes.h") + load("fft_conv.h") + "#undef EM_T\n#undef ELTI\n#undef ELT\n")
    f = tmp_path / "unit.c"
    f.write_text(unit)
    out = subprocess.run([cc, "-fsyntax-only", "-Wall", "-Werror", "-std=c11", *target, str(f)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
