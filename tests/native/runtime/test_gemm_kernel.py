"""The register-blocked float32 matrix product (:mod:`ember._src.native.emit.gemm_kernel`) against NumPy
(float64 products as the reference): called directly through ctypes for many shapes, strides,
transposes, alpha/beta and thread counts, and through ``ember.jit`` where the native backend emits
it in place of BLAS."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.base import symdims as sd
from ember._src.native.emit import gemm_kernel
from ember._src.native.rewrite import passes
from ember._src.native.runtime import compiler, gemm_library, toolchain
from tests.native.conftest import requires_cc

_WRAPPER = """
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif
{helpers}
int em_test_has_kernel(void) {{ return EM_SGEMM_SMALL; }}
void em_test_sgemm(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                   int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c, int64_t ldc,
                   const float *bias, int relu, int nthreads) {{
#if EM_SGEMM_SMALL
    em_sgemm_small(m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, ldc, bias, relu, nthreads);
#else
    (void)m; (void)n; (void)k; (void)alpha; (void)a; (void)rsa; (void)csa; (void)b; (void)rsb; (void)csb;
    (void)beta; (void)c; (void)ldc; (void)bias; (void)relu; (void)nthreads;
#endif
}}
void em_test_sgemm_big(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                       int64_t csa, const float *b, int64_t rsb, int64_t csb, const float *bpk, float beta,
                       float *c, int64_t ldc, const float *bias, int relu, int nthreads) {{
#if EM_SGEMM_SMALL
    em_sgemm_big_all(m, n, k, alpha, a, rsa, csa, b, rsb, csb, bpk, beta, c, ldc, bias, relu, nthreads);
#else
    (void)m; (void)n; (void)k; (void)alpha; (void)a; (void)rsa; (void)csa; (void)b; (void)rsb; (void)csb;
    (void)bpk; (void)beta; (void)c; (void)ldc; (void)bias; (void)relu; (void)nthreads;
#endif
}}
void em_test_sgemm_packed(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa,
                          int64_t csa, const float *bpk, float beta, float *c, int64_t ldc,
                          const float *bias, int relu, int nthreads) {{
#if EM_SGEMM_SMALL
    em_sgemm_packed(m, n, k, alpha, a, rsa, csa, bpk, beta, c, ldc, bias, relu, nthreads);
#else
    (void)m; (void)n; (void)k; (void)alpha; (void)a; (void)rsa; (void)csa; (void)bpk; (void)beta; (void)c;
    (void)ldc; (void)bias; (void)relu; (void)nthreads;
#endif
}}
"""


def build_kernel(isa_name: str, prefix: str = "", **changes):
    """The kernel's test entries compiled for the ISA ``isa_name`` (skips where the target lacks it):
    ``fn`` packs B per call; ``fn.packed`` takes a prepacked B; ``fn.big`` is the blocked path
    (``em_sgemm_big``, A packed) whatever the size; ``fn.isa`` the :class:`gemm_kernel.Isa`.
    ``prefix``: C put before the kernel's source (test settings of its macros); ``changes``: fields
    of the ISA's :class:`gemm_kernel.Isa` replaced (its blocking, e.g. ``big_l2``)."""
    info = toolchain.find_compiler()
    if info is None:
        pytest.skip("no C compiler available")
    isa = dataclasses.replace(gemm_kernel.ISAS[isa_name], **changes)
    if info.family != "gcc" or not isa.flags <= set(info.target.split()):
        pytest.skip(f"the compiler does not target {isa_name} here")
    lib = compiler.load_library(prefix + _WRAPPER.format(helpers=gemm_kernel.c_source(isa)),
                                name_hint=f"test_gemm_kernel_{isa_name}")
    if not lib.em_test_has_kernel():
        pytest.skip(f"target without {isa_name}: the kernel is compiled out")
    fn = lib.em_test_sgemm
    i64, f32, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    fn.argtypes = [i64, i64, i64, f32, ptr, i64, i64, ptr, i64, i64, f32, ptr, i64, ptr, ctypes.c_int,
                   ctypes.c_int]
    fn.restype = None
    packed = lib.em_test_sgemm_packed
    packed.argtypes = [i64, i64, i64, f32, ptr, i64, i64, ptr, f32, ptr, i64, ptr, ctypes.c_int, ctypes.c_int]
    packed.restype = None
    fn.packed = packed
    big = lib.em_test_sgemm_big
    big.argtypes = [i64, i64, i64, f32, ptr, i64, i64, ptr, i64, i64, ptr, f32, ptr, i64, ptr, ctypes.c_int,
                    ctypes.c_int]
    big.restype = None
    fn.big = big
    fn.isa = isa
    return fn


@pytest.fixture(scope="module", params=sorted(gemm_kernel.ISAS))
def kernel(request):
    """The kernel built for each ISA this machine's compiler targets (AVX2 and AVX-512 both run on
    an AVX-512 machine)."""
    return build_kernel(request.param)


def _run(fn, a_op, b_op, alpha=1.0, beta=0.0, c=None, nthreads=1, bias=None, relu=False):
    """C = alpha * a_op @ b_op + beta * c (+ bias[j], then max(., 0)) through the kernel; a_op/b_op
    are float32 views whose strides (in elements) are passed as they are (transposed views
    included)."""
    m, k = a_op.shape
    n = b_op.shape[1]
    c = np.zeros((m, n), np.float32) if c is None else c
    item = 4
    fn(m, n, k, alpha, a_op.ctypes.data, a_op.strides[0] // item, a_op.strides[1] // item,
       b_op.ctypes.data, b_op.strides[0] // item, b_op.strides[1] // item, beta, c.ctypes.data,
       c.strides[0] // item, None if bias is None else bias.ctypes.data, int(relu), nthreads)
    return c


def _ref(a_op, b_op, alpha=1.0, beta=0.0, c=None):
    r = alpha * (a_op.astype(np.float64) @ b_op.astype(np.float64))
    return r if c is None or beta == 0.0 else r + beta * c.astype(np.float64)


SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 23, 24, 25, 33, 48, 64, 100]
K_SIZES = [1, 3, 17, 255, 256, 257, 513]


def _operand(rng, rows, cols, trans):
    """A rows x cols float32 operand, stored transposed (a non-contiguous view) when ``trans``."""
    x = rng.standard_normal((cols, rows) if trans else (rows, cols)).astype(np.float32)
    return x.T if trans else x


@pytest.mark.parametrize("trans_a,trans_b", list(itertools.product([False, True], repeat=2)))
def test_shapes_and_transposes(kernel, trans_a, trans_b):
    rng = np.random.default_rng(0)
    for m, n, k in itertools.product([1, 4, 5, 9, 17], [1, 7, 8, 17, 24, 25, 41], [1, 17, 257]):
        a, b = _operand(rng, m, k, trans_a), _operand(rng, k, n, trans_b)
        got = _run(kernel, a, b)
        np.testing.assert_allclose(got, _ref(a, b), rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_every_edge_size(kernel):
    rng = np.random.default_rng(1)
    for m in SIZES:
        for n in SIZES:
            k = K_SIZES[(m + n) % len(K_SIZES)]
            a, b = _operand(rng, m, k, False), _operand(rng, k, n, False)
            np.testing.assert_allclose(_run(kernel, a, b), _ref(a, b), rtol=1e-5, atol=1e-5 * np.sqrt(k),
                                       err_msg=f"m={m} n={n} k={k}")


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 0.0), (-2.0, 0.25), (1.0, -1.0), (0.0, 3.0)])
def test_alpha_beta(kernel, alpha, beta):
    rng = np.random.default_rng(2)
    for m, n, k in [(6, 10, 512), (33, 50, 300), (2, 3, 1)]:
        a, b = _operand(rng, m, k, False), _operand(rng, k, n, True)
        c = rng.standard_normal((m, n)).astype(np.float32)
        want = _ref(a, b, alpha, beta, c)
        np.testing.assert_allclose(_run(kernel, a, b, alpha, beta, c.copy()), want, rtol=1e-5,
                                   atol=1e-5 * np.sqrt(k))


def test_beta_zero_ignores_nan_in_c(kernel):
    rng = np.random.default_rng(3)
    a, b = _operand(rng, 9, 300, False), _operand(rng, 300, 30, False)
    c = np.full((9, 30), np.nan, np.float32)
    np.testing.assert_allclose(_run(kernel, a, b, 1.0, 0.0, c), _ref(a, b), rtol=1e-5, atol=1e-4)


def test_k_zero_scales_c(kernel):
    a, b = np.zeros((5, 0), np.float32), np.zeros((0, 7), np.float32)
    c = np.arange(35, dtype=np.float32).reshape(5, 7)
    np.testing.assert_array_equal(_run(kernel, a, b, 1.0, 2.0, c.copy()), 2.0 * c)
    np.testing.assert_array_equal(_run(kernel, a, b, 1.0, 0.0, np.full((5, 7), np.nan, np.float32)), 0.0)


def test_output_row_stride_and_threads(kernel):
    """C written into a wider buffer (ldc > n) leaves the other columns alone; the column split
    among threads gives the same values."""
    rng = np.random.default_rng(4)
    a, b = _operand(rng, 37, 129, False), _operand(rng, 129, 100, False)
    for nthreads in (1, 2, 3, 0):
        big = np.full((37, 110), 7.0, np.float32)
        _run(kernel, a, b, c=big[:, 5:105], nthreads=nthreads)
        np.testing.assert_allclose(big[:, 5:105], _ref(a, b), rtol=1e-5, atol=1e-4)
        assert (big[:, :5] == 7.0).all() and (big[:, 105:] == 7.0).all()


def _relu_keep_nan(x):
    return np.where(np.isnan(x) | (x > 0), x, 0.0)


@pytest.mark.parametrize("relu", [False, True])
def test_fused_bias_relu_epilogue(kernel, relu):
    """The epilogue (+ bias[j], optional ReLU keeping NaN) on every edge size, with more than one
    contraction block (applied once, after the last), beta != 0, and a thread split."""
    rng = np.random.default_rng(8)
    for m, n, k in [(2, 2, 1), (5, 7, 3), (9, 24, 256), (17, 25, 257), (33, 41, 513), (4, 100, 600),
                    (13, 8, 70), (1, 17, 5)]:
        a, b = _operand(rng, m, k, False), _operand(rng, k, n, m % 2 == 1)
        bias = rng.standard_normal(n).astype(np.float32)
        a[0, 0] = np.nan  # row 0 is NaN throughout: the ReLU keeps it
        for beta, nthreads in [(0.0, 1), (1.0, 2), (0.5, 0)]:
            c = rng.standard_normal((m, n)).astype(np.float32)
            want = _ref(a, b, 1.0, beta, c) + bias
            want = _relu_keep_nan(want) if relu else want
            got = _run(kernel, a, b, 1.0, beta, c.copy(), nthreads, bias=bias, relu=relu)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(k),
                                       err_msg=f"m={m} n={n} k={k} beta={beta}")
            assert np.isnan(got[0]).all() and not np.isnan(got[1:]).any()
    # ReLU alone; and k == 0 (C = relu(beta * C + bias))
    a, b = _operand(rng, 6, 40, False), _operand(rng, 40, 30, False)
    np.testing.assert_allclose(_run(kernel, a, b, relu=True), np.maximum(_ref(a, b), 0), rtol=1e-5, atol=1e-4)
    c, bias = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal(7).astype(np.float32)
    got = _run(kernel, np.zeros((5, 0), np.float32), np.zeros((0, 7), np.float32), 1.0, 2.0, c.copy(),
               bias=bias, relu=relu)
    want = 2.0 * c + bias
    np.testing.assert_allclose(got, np.maximum(want, 0) if relu else want, rtol=1e-6)


@pytest.mark.parametrize("isa_name", sorted(gemm_kernel.ISAS))
def test_panel_widths_and_prepacked_layout(isa_name):
    """prepack_b: panel j0 of width w holds B[p, j0 + i] at j0 * k + p * w + i, zeros past n; the
    panel widths cover n exactly as the kernel walks it; a narrow B (``narrow_columns``) is stored
    transposed, its columns ``dot_stride`` apart and zero-padded; the data is 64-byte aligned."""
    isa = gemm_kernel.ISAS[isa_name]
    widths = functools.partial(gemm_kernel.panel_widths, target=isa)
    if isa.vw == 8:
        assert widths(512) == [24] * 20 + [16, 16]  # a 32-column remainder: two of 16
        assert widths(10) == [16] and widths(8) == [8]
        assert widths(24) == [24] and widths(0) == []
        assert widths(41) == [24, 24]
    else:
        assert widths(512) == [48] * 10 + [32]
        assert widths(544) == [48] * 10 + [32, 32]  # a 64-column remainder: two of 32
        assert widths(20) == [32] and widths(16) == [16] and widths(48) == [48] and widths(0) == []
        assert widths(81) == [48, 48]
    rng = np.random.default_rng(10)
    for k, n in [(3, 41), (5, 512), (1, 10), (7, 8), (2, 544), (33, 12), (17, 1)]:
        b = rng.standard_normal((k, n)).astype(np.float32)
        packed = gemm_kernel.prepack_b(b, isa)
        assert packed.ctypes.data % 64 == 0
        if n <= gemm_kernel.narrow_columns(isa):  # B transposed, columns dot_stride apart
            ld = gemm_kernel.dot_stride(k, isa)
            assert ld % isa.vw == 0 and ld >= k + 16 and packed.size == n * ld
            np.testing.assert_array_equal(packed.reshape(n, ld)[:, :k], b.T)
            assert (packed.reshape(n, ld)[:, k:] == 0).all()
            continue
        j0 = 0
        for w in widths(n):
            nr = min(w, n - j0)
            panel = packed[j0 * k:j0 * k + k * w].reshape(k, w)
            np.testing.assert_array_equal(panel[:, :nr], b[:, j0:j0 + nr])
            assert (panel[:, nr:] == 0).all()
            j0 += nr
        assert j0 == n and packed.size == k * (n - nr + w)


@pytest.mark.parametrize("relu", [False, True])
def test_prepacked_entry_matches_packing_entry(kernel, relu):
    """The prepacked-B entry gives bit-for-bit the values of the entry that packs B per call (same
    tiles, same order of summation) up to k = 2 KC, and float32-accurate values beyond (its
    contraction blocks are 512 deep there, the other entry's 256): edge widths, transposed B,
    alpha/beta, bias/ReLU, and the panel split among threads."""
    rng = np.random.default_rng(11)
    for (m, n, k), trans_b in itertools.product([(2, 2, 1), (5, 7, 3), (9, 24, 256), (17, 25, 257),
                                                 (33, 41, 513), (32, 512, 300), (4, 100, 600), (13, 8, 70)],
                                                [False, True]):
        a, b = _operand(rng, m, k, False), _operand(rng, k, n, trans_b)
        bias = rng.standard_normal(n).astype(np.float32) if relu or m % 2 else None
        packed = gemm_kernel.prepack_b(b, kernel.isa)
        for alpha, beta, nthreads in [(1.0, 0.0, 1), (0.5, 1.0, 2), (-1.0, 0.25, 0)]:
            c0 = rng.standard_normal((m, n)).astype(np.float32)
            want = _run(kernel, a, b, alpha, beta, c0.copy(), nthreads, bias=bias, relu=relu)
            got = c0.copy()
            kernel.packed(m, n, k, alpha, a.ctypes.data, a.strides[0] // 4, a.strides[1] // 4,
                          packed.ctypes.data, beta, got.ctypes.data, n,
                          None if bias is None else bias.ctypes.data, int(relu), nthreads)
            if k <= 2 * gemm_kernel.KC:  # one contraction block in both entries: the same sums
                np.testing.assert_array_equal(got, want, err_msg=f"m={m} n={n} k={k} trans_b={trans_b}")
            ref = _ref(a, b, alpha, beta, c0) + (0.0 if bias is None else bias)
            ref = _relu_keep_nan(ref) if relu else ref
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.sqrt(k))


def test_size_rule(monkeypatch):
    """AVX-512: every product of 2 or more rows; AVX2: the rule measured on Zen 3."""
    monkeypatch.setattr(gemm_library, "_wide", lambda: True)
    for m, n, k in [(2, 2, 1), (1024, 1024, 1024), (16, 4096, 4096), (512, 256, 256), (4096, 50257, 768)]:
        assert gemm_kernel.use_small_sgemm(m, n, k) and gemm_kernel.use_prepacked(m, n, k)
    assert not gemm_kernel.use_small_sgemm(1, 512, 512) and not gemm_kernel.use_small_sgemm(32, 1, 512)
    assert gemm_kernel.use_prepacked(1, 512, 512) and not gemm_kernel.use_prepacked(0, 64, 64)
    monkeypatch.setattr(gemm_library, "_wide", lambda: False)
    assert gemm_kernel.use_small_sgemm(32, 512, 512) and gemm_kernel.use_small_sgemm(128, 10, 512)
    assert not gemm_kernel.use_small_sgemm(1, 512, 512)  # a single row: BLAS sgemv
    assert not gemm_kernel.use_small_sgemm(32, 1, 512)
    assert not gemm_kernel.use_small_sgemm(1024, 1024, 1024)  # A beyond L2
    assert not gemm_kernel.use_small_sgemm(16, 4096, 4096)  # B streamed from DRAM
    assert gemm_kernel.use_small_sgemm(384, 256, 256) and not gemm_kernel.use_small_sgemm(512, 1024, 256)
    assert not gemm_kernel.use_small_sgemm(512, 256, 256)  # A as large as L2: BLAS (transformer block)
    assert not gemm_kernel.use_small_sgemm(768, 128, 128)  # tall: BLAS's blocking is as fast or faster
    # a constant B: from a single row (a generation step) up to 512 rows, whatever n and k
    assert gemm_kernel.use_prepacked(1, 50257, 768) and gemm_kernel.use_prepacked(512, 4096, 4096)
    assert not gemm_kernel.use_prepacked(0, 64, 64) and not gemm_kernel.use_prepacked(513, 64, 64)


def test_row_variants_cover_every_short_block():
    """Every row count of a last row block maps to a generated tile at least that tall and at most
    one row taller (three for 16-row tiles), or to the full tile."""
    for isa in gemm_kernel.ISAS.values():
        for mr, _ in isa.kernels:
            variants = gemm_kernel.row_variants(mr)
            assert variants == sorted(variants) and all(0 < r < mr for r in variants)
            for rows in range(1, mr + 1):
                got = gemm_kernel.kernel_rows_for(mr, rows)
                assert rows <= got <= mr and got - rows <= (1 if mr <= 12 else 3), (isa.name, mr, rows)
                assert got == mr or got in variants


def _short_block_rows(isa) -> list[int]:
    """Row counts whose last row block is short on each tile height of ``isa`` (every remainder),
    plus the edge sizes 1, 15, 17, 33 and 129."""
    heights = {mr for mr, _ in isa.kernels}
    return sorted({r for mr in heights for r in range(1, 2 * mr + 2)} | {1, 15, 17, 33, 129})


@pytest.mark.parametrize("trans_a,trans_b", list(itertools.product([False, True], repeat=2)))
def test_short_row_blocks_match_full_tiles(kernel, trans_a, trans_b):
    """A last row block of any height runs on the shortest tile that covers it: its rows are
    bit-for-bit those of the same rows computed inside full tiles (the same sums in the same
    order), on each panel width (3, 2 and 1 vectors, a partial panel), for the packing and the
    prepacked entry, A and B transposed or not, and Inf/NaN in the last row stays in that row."""
    rng = np.random.default_rng(12)
    vw = kernel.isa.vw
    big_m = 2 * max(mr for mr, _ in kernel.isa.kernels) + 2
    for n, k in [(3 * vw, 33), (2 * vw, 17), (vw, 15), (2 * vw + 3, 129), (1, 7)]:
        a_full, b = _operand(rng, big_m + 129, k, trans_a), _operand(rng, k, n, trans_b)
        packed = gemm_kernel.prepack_b(b, kernel.isa)
        full = _run(kernel, a_full, b)  # every row block of the first big_m rows is a full tile
        for m in _short_block_rows(kernel.isa):
            a = a_full[:m]
            got = _run(kernel, a, b)
            np.testing.assert_array_equal(got, full[:m], err_msg=f"m={m} n={n} k={k}")
            pk = np.zeros((m, n), np.float32)
            kernel.packed(m, n, k, 1.0, a.ctypes.data, a.strides[0] // 4, a.strides[1] // 4,
                          packed.ctypes.data, 0.0, pk.ctypes.data, n, None, 0, 1)
            np.testing.assert_array_equal(pk, full[:m], err_msg=f"packed m={m} n={n} k={k}")
            np.testing.assert_allclose(got, _ref(a, b), rtol=1e-5, atol=1e-5 * np.sqrt(k))
        for m, bad in [(vw + 1, np.inf), (17, np.nan), (3, -np.inf)]:
            a = a_full[:m].copy()
            a[m - 1, k // 2] = bad
            got = _run(kernel, a, np.abs(b) + 0.5)  # B > 0: the bad row is +-Inf or NaN throughout
            np.testing.assert_allclose(got[:m - 1], _ref(a[:m - 1], np.abs(b) + 0.5), rtol=1e-5,
                                       atol=1e-5 * np.sqrt(k))
            assert np.isfinite(got[:m - 1]).all()
            want_row = np.full(n, bad, np.float32)
            np.testing.assert_array_equal(got[m - 1], want_row, err_msg=f"m={m} n={n} bad={bad}")


@requires_cc
@pytest.mark.parametrize("isa_name", sorted(gemm_kernel.ISAS))
def test_library_source_compiles_without_its_isa(tmp_path, isa_name):
    """The kernel library's C for each ISA (its row variants and their dispatch included) compiles
    warning-free for the machine's own target, where the entry reports the kernel, and for the
    x86-64 baseline (no AVX2, no AVX-512), where it compiles to the stub entries and reports none."""
    import platform

    info = toolchain.find_compiler()
    if info is None or info.family != "gcc" or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("needs GCC on x86-64")
    source, symbol = gemm_library._library_source(isa_name)
    src = tmp_path / "kernel.c"
    src.write_text(source)
    has_isa = gemm_kernel.ISAS[isa_name].flags <= set(info.target.split())
    for march, want in (("-march=native", int(has_isa)), ("-march=x86-64", 0)):
        lib = tmp_path / f"kernel{march}.so"
        flags = ["-O2", "-std=c11", "-fPIC", "-shared", "-fopenmp-simd", "-Wall", "-Werror", march]
        out = subprocess.run([info.path, *flags, str(src), "-o", str(lib)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert getattr(ctypes.CDLL(str(lib)), symbol + "_ok")() == want, march


def _products(dims, *xs):
    """``dot_general`` with ``dims`` of each consecutive pair of ``xs``."""
    return [lax.dot_general(xs[i], xs[i + 1], dims) for i in range(0, len(xs), 2)]


@requires_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_jit_edge_sizes_and_transposes(dtype):
    """Products of edge sizes M, N, K in (1, 15, 17, 33, 129) with every pair of transpose flags in
    one jitted program each, against float64 NumPy (float32 products run on the kernel, float64 on
    BLAS)."""
    gemm_kernel.load(wait=True)
    rng = np.random.default_rng(13)
    shapes = [(1, 15, 17), (15, 17, 33), (17, 33, 1), (33, 129, 15), (129, 1, 33), (129, 33, 129),
              (17, 129, 17)]
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for trans_a, trans_b in itertools.product([False, True], repeat=2):
        ops = [(_operand(rng, m, k, trans_a).astype(dtype), _operand(rng, k, n, trans_b).astype(dtype))
               for m, n, k in shapes]
        dims = (((0 if trans_a else 1,), (1 if trans_b else 0,)), ((), ()))
        ins = [np.ascontiguousarray(x.T if t else x) for a, b in ops for x, t in ((a, trans_a), (b, trans_b))]

        got = ember.jit(functools.partial(_products, dims), backend="native")(*ins)
        for (a, b), g, shape in zip(ops, got, shapes):
            np.testing.assert_allclose(np.asarray(g), _ref(a, b), rtol=tol, atol=tol * np.sqrt(shape[2]),
                                       err_msg=f"{shape} trans_a={trans_a} trans_b={trans_b}")


@pytest.fixture
def kernel_loaded():
    """The kernel library built and loaded (where this machine can run it), so that generated
    programs call it rather than their BLAS fallback."""
    gemm_kernel.load(wait=True)


@requires_cc
@pytest.mark.parametrize("trans_a,trans_b", list(itertools.product([False, True], repeat=2)))
def test_jit_products_use_kernel(kernel_loaded, trans_a, trans_b):
    """dot_general with each transpose, a scale and a bias, through the native backend."""
    rng = np.random.default_rng(5)
    m, n, k = 19, 37, 70
    a = _operand(rng, m, k, trans_a)
    b = _operand(rng, k, n, trans_b)
    a_in, b_in = (np.ascontiguousarray(a.T) if trans_a else a), (np.ascontiguousarray(b.T) if trans_b else b)
    bias = rng.standard_normal(n).astype(np.float32)
    dims = (((0 if trans_a else 1,), (1 if trans_b else 0,)), ((), ()))

    def f(x, y, z):
        return lax.dot_general(x, y, dims) * 0.5 + z

    fn = ember.jit(f, backend="native")
    got = np.asarray(fn(a_in, b_in, bias))
    np.testing.assert_allclose(got, 0.5 * _ref(a, b) + bias, rtol=1e-5, atol=1e-4)
    exe = fn.lower(a_in, b_in, bias).executable
    if exe.fallback_reason is None and gemm_kernel.kernel_symbol() is not None:
        assert "em_sk_fn()" in exe.source and gemm_kernel.kernel_symbol() in exe.source


@requires_cc
def test_jit_batched_product_and_mlp(kernel_loaded):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 10, 24)).astype(np.float32)
    y = rng.standard_normal((3, 24, 9)).astype(np.float32)
    fn = ember.jit(lambda p, q: lax.dot_general(p, q, (((2,), (1,)), ((0,), (0,)))), backend="native")
    np.testing.assert_allclose(np.asarray(fn(x, y)), np.einsum("bik,bkj->bij", x.astype(np.float64), y),
                               rtol=1e-5, atol=1e-5)
    w1 = rng.standard_normal((64, 48)).astype(np.float32)
    w2 = rng.standard_normal((48, 10)).astype(np.float32)
    h = rng.standard_normal((32, 64)).astype(np.float32)
    mlp = ember.jit(lambda h, w1, w2: lax.dot(jnp.maximum(lax.dot(h, w1), 0.0), w2), backend="native")
    want = np.maximum(h.astype(np.float64) @ w1, 0.0) @ w2
    np.testing.assert_allclose(np.asarray(mlp(h, w1, w2)), want, rtol=1e-4, atol=1e-4)


@requires_cc
@pytest.mark.parametrize("trans_b", [False, True])
def test_jit_constant_weights_are_prepacked(kernel_loaded, trans_b):
    """Weights captured by the jitted function (program constants) are packed once when the
    program is built and the products call the kernel's prepacked entry: same values, bit for bit,
    as the program taking the weights as arguments (and within float32 of a float64 reference)."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((32, 200)).astype(np.float32)
    w1 = rng.standard_normal((300, 200) if trans_b else (200, 300)).astype(np.float32) / 14
    b1 = rng.standard_normal(300).astype(np.float32)
    w2 = rng.standard_normal((300, 41)).astype(np.float32) / 17

    def mlp(x, w1, b1, w2):
        h = (x @ w1.T if trans_b else x @ w1) + b1
        return jnp.maximum(h, 0.0) @ w2

    baked = ember.jit(lambda x: mlp(x, w1, b1, w2), backend="native")
    as_args = ember.jit(mlp, backend="native")
    got = np.asarray(baked(x))
    w1_op = (w1.T if trans_b else w1).astype(np.float64)
    want = np.maximum(x.astype(np.float64) @ w1_op + b1, 0.0) @ w2
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got, np.asarray(as_args(x, w1, b1, w2)))
    exe = baked.lower(x).executable
    if exe.fallback_reason is None and gemm_kernel.kernel_symbol() is not None and not gemm_kernel.BLAS_ONLY:
        assert exe.source.count("em_skp_fn()") == 2
        # with the weights as arguments the program reads a packed copy the runtime may keep for
        # them (tests/native/runtime/test_packed_arguments.py); with constants it needs none
        cell = "const float *pk_ = (*(const float *const *)fns["
        assert as_args.lower(x, w1, b1, w2).executable.source.count(cell) == 2 and cell not in exe.source


@requires_cc
@pytest.mark.parametrize("trans_b", [False, True])
def test_jit_single_row_with_constant_weights(kernel_loaded, trans_b):
    """One row against constant weights (a generation step), ``x @ W`` or ``x @ W.T`` (as torch's
    Linear and a tied LM head import: a dot_general contracting W's last axis), takes the prepacked
    entry (its single-row tile) with the bias fused, static or with a dynamic row count, rather
    than BLAS sgemv; values within float32 of a float64 reference, and a row alone equal to the
    same row inside a block of rows, bit for bit (the 1 x 24 tile sums as the 4 x 24 tile)."""
    rng = np.random.default_rng(15)
    w = rng.standard_normal((1000, 96) if trans_b else (96, 1000)).astype(np.float32) / 10
    bias = rng.standard_normal(1000).astype(np.float32)

    def f(x):
        return lax.dot_general(x, w, (((1,), (1 if trans_b else 0,)), ((), ()))) + bias

    static = ember.jit(f, backend="native", num_threads=2)
    dyn = ember.jit(f, backend="native", num_threads=2, dynamic_axes={"x": ("rows", None)})
    for rows in (1, 2, 5):
        x = rng.standard_normal((rows, 96)).astype(np.float32)
        want = x.astype(np.float64) @ (w.T if trans_b else w) + bias
        np.testing.assert_allclose(np.asarray(static(x)), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(dyn(x)), want, rtol=1e-5, atol=1e-5)
    exe = static.lower(x[:1]).executable
    if exe.fallback_reason is None and gemm_kernel.kernel_symbol() is not None and not gemm_kernel.BLAS_ONLY:
        assert exe.source.count("em_skp_fn()") == 1
        from ember._src.native import specialize

        src = specialize.symbolic_executable(dyn.lower(x).program).source or ""
        # the run-time rule takes a single row (its sizes named once: symdims.hoist_sizes)
        assert "em_d_rows >= 1 &&" in src or "(em_d_rows) >= 1 &&" in src
        np.testing.assert_array_equal(np.asarray(dyn(x[2:3])), np.asarray(dyn(x))[2:3])


@requires_cc
def test_jit_large_constant_weights_use_prepacked_entry(kernel_loaded):
    """Beyond the packing entry's size rule (A larger than L2 here), a constant B still takes the
    prepacked entry (use_prepacked), with its bias + ReLU fused, and agrees with float64 NumPy."""
    rng = np.random.default_rng(13)
    m, k, n = 512, 256, 1000
    wide = gemm_kernel.isa() is gemm_kernel.AVX512  # AVX-512: the packing entry takes it too
    assert gemm_kernel.use_small_sgemm(m, n, k) == wide and gemm_kernel.use_prepacked(m, n, k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((k, n)) / 16).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    baked = ember.jit(lambda x: jnp.maximum(x @ w + bias, 0.0), backend="native")
    want = np.maximum(x.astype(np.float64) @ w + bias, 0.0)
    np.testing.assert_allclose(np.asarray(baked(x)), want, rtol=1e-4, atol=1e-4)
    exe = baked.lower(x).executable
    if exe.fallback_reason is None and gemm_kernel.kernel_symbol() is not None and not gemm_kernel.BLAS_ONLY:
        assert exe.source.count("em_skp_fn()") == 1
        assert sum(st.kind == "kernel" for st in exe.schedule.steps) == 0  # the epilogue went into the store
    # prepack=False: the constant stays as it is (OpenBLAS here), same values within float32
    plain = ember.jit(lambda x: jnp.maximum(x @ w + bias, 0.0), backend="native", prepack=False)
    np.testing.assert_allclose(np.asarray(plain(x)), want, rtol=1e-4, atol=1e-4)
    assert "em_skp_fn()" not in plain.lower(x).executable.source
    assert gemm_kernel.use_prepacked(1024, n, k) == wide


@requires_cc
@pytest.mark.parametrize("m,k,n", [(3136, 256, 64), (784, 512, 128), (201, 64, 50), (49, 512, 2048)])
def test_jit_constant_weights_on_two_threads_split_rows_or_panels(kernel_loaded, m, k, n):
    """A prepacked product on two threads: row parts where there are more rows than columns (ResNet's
    56x56 and 28x28 1x1 convolutions, whose 64 and 128 columns make two and three uneven panels),
    column panels otherwise. Every element is summed in the same order, so the result equals the
    one-thread one bitwise, and float64 NumPy within float32 rounding."""
    rng = np.random.default_rng(m + n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((k, n)) / 16).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    f = {nt: ember.jit(lambda x: jnp.maximum(x @ w + bias, 0.0), backend="native", num_threads=nt)
         for nt in (1, 2)}
    one, two = np.asarray(f[1](x)), np.asarray(f[2](x))
    np.testing.assert_array_equal(two, one)
    np.testing.assert_allclose(two, np.maximum(x.astype(np.float64) @ w + bias, 0.0), rtol=1e-4, atol=1e-4)


@requires_cc
@pytest.mark.parametrize("baked", [False, True])
def test_jit_dynamic_batch_uses_kernel_within_its_rule(kernel_loaded, baked):
    """With the batch a named dynamic axis, the products call the kernel (prepacked for constant
    weights) when the bound batch is within its row rule, tested at run time, and BLAS otherwise:
    every batch agrees with float64 NumPy, and within the rule bit for bit with the static-shape
    program."""
    rng = np.random.default_rng(14)
    w1 = (rng.standard_normal((96, 200)) / 10).astype(np.float32)
    b1 = rng.standard_normal(200).astype(np.float32)
    w2 = (rng.standard_normal((200, 30)) / 14).astype(np.float32)

    def mlp(x, w1, b1, w2):
        return jnp.maximum(x @ w1 + b1, 0.0) @ w2

    if baked:
        dyn = ember.jit(lambda x: mlp(x, w1, b1, w2), backend="native", dynamic_axes={"x": ("batch", None)})
        static = ember.jit(lambda x: mlp(x, w1, b1, w2), backend="native")
        call_d, call_s = dyn, static
    else:
        dyn = ember.jit(mlp, backend="native", dynamic_axes={"x": ("batch", None)})
        static = ember.jit(mlp, backend="native")
        call_d = lambda x: dyn(x, w1, b1, w2)  # noqa: E731
        call_s = lambda x: static(x, w1, b1, w2)  # noqa: E731
    for batch in (0, 1, 2, 33, 512, 700):
        x = rng.standard_normal((batch, 96)).astype(np.float32)
        got = np.asarray(call_d(x))
        want = np.maximum(x.astype(np.float64) @ w1 + b1, 0.0) @ w2
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"batch {batch}")
        within = 2 <= batch <= gemm_kernel.row_limit()
        if within and not gemm_kernel.BLAS_ONLY and gemm_kernel.kernel_symbol() is not None:
            np.testing.assert_array_equal(got, np.asarray(call_s(x)), err_msg=f"batch {batch}")
    x = rng.standard_normal((5, 96)).astype(np.float32)
    args = (x,) if baked else (x, w1, b1, w2)
    from ember._src.native import specialize

    src = specialize.symbolic_executable(dyn.lower(*args).program).source or ""
    if gemm_kernel.kernel_symbol() is not None and not gemm_kernel.BLAS_ONLY:
        entry = "em_skp_fn()" if baked else "em_sk_fn()"
        assert src.count(entry) == 2 and f"<= {gemm_kernel.row_limit()})" in src


@requires_cc
@pytest.mark.parametrize("wide", [False, True])
def test_c_size_rule_is_kernel_rows(monkeypatch, wide):
    """The run-time form of the size rule (products with a dynamic ``n`` or ``k``) takes exactly
    the shapes the static rule takes (the AVX2 and the AVX-512 rule)."""
    monkeypatch.setattr(gemm_library, "_wide", lambda: wide)
    lib = compiler.load_library(
        "#include <stdint.h>\nint em_test_rule(int64_t m, int64_t n, int64_t k) { return "
        + gemm_kernel.c_size_rule("m", "n", "k") + "; }\n", name_hint=f"test_size_rule_{int(wide)}")
    rule = lib.em_test_rule
    rule.argtypes = [ctypes.c_int64] * 3
    rule.restype = ctypes.c_int
    sizes = (1, 2, 3, 63, 64, 65, 128, 200, 224, 256, 334, 335, 448, 512, 513, 700, 1024, 1792, 2048, 4096)
    for m, n, k in itertools.product(sizes, repeat=3):
        assert bool(rule(m, n, k)) == gemm_kernel.use_small_sgemm(m, n, k), (m, n, k)


# the products of written-out attention (otherwise one fused attention step)
NO_ATTENTION_FUSION = tuple(n for n in passes.DEFAULT_PASSES if n != "fuse_attention")


@requires_cc
def test_jit_dynamic_attention_products_use_kernel(kernel_loaded):
    """Attention over a dynamic sequence axis: the per-head products ``Q K^T`` (``n`` dynamic) and
    ``P V`` (``k`` dynamic) call the kernel, their heads shared out on the thread pool, when the
    bound sizes meet its rule, and BLAS otherwise; every length agrees with float64 NumPy, and
    within the rule bit for bit with the static-shape program."""
    rng = np.random.default_rng(21)
    heads, d = 6, 32

    def attention(q, k, v):
        s = jnp.einsum("hqd,hkd->hqk", q, k) * 0.125
        p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        return jnp.einsum("hqk,hkd->hqd", p / jnp.sum(p, axis=-1, keepdims=True), v)

    spec = (None, "seq", None)
    dyn = ember.jit(attention, backend="native", passes=NO_ATTENTION_FUSION,
                    dynamic_axes={"q": spec, "k": spec, "v": spec}, num_threads=2)
    static = ember.jit(attention, backend="native", num_threads=2, passes=NO_ATTENTION_FUSION)
    for n in (1, 2, 37, 130, 400, 520):
        q, k, v = (rng.standard_normal((heads, n, d)).astype(np.float32) for _ in range(3))
        got = np.asarray(dyn(q, k, v))
        s = np.einsum("hqd,hkd->hqk", q.astype(np.float64), k) * 0.125
        p = np.exp(s - s.max(-1, keepdims=True))
        want = np.einsum("hqk,hkd->hqd", p / p.sum(-1, keepdims=True), v)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"seq {n}")
        # up to 512 rows the static program runs the per-head products as the dynamic one does (the
        # kernel's tiles sum in contraction order; not its narrow products,
        # n <= NARROW_COLUMNS, which sum lane-wise partial sums: the same values up to rounding)
        if 512 >= n > gemm_kernel.narrow_columns() and gemm_kernel.use_small_sgemm(n, n, d) \
                and gemm_kernel.use_small_sgemm(n, d, n) \
                and not gemm_kernel.BLAS_ONLY and gemm_kernel.kernel_symbol() is not None:
            np.testing.assert_array_equal(got, np.asarray(static(q, k, v)), err_msg=f"seq {n}")
    from ember._src.native import specialize

    src = specialize.symbolic_executable(dyn.lower(q, k, v).program, num_threads=2,
                                         passes=NO_ATTENTION_FUSION).source or ""
    if gemm_kernel.kernel_symbol() is not None and not gemm_kernel.BLAS_ONLY:
        for m, n, k in (("(em_d_seq)", "(em_d_seq)", str(d)), ("(em_d_seq)", str(d), "(em_d_seq)")):
            rule = sd.hoist_sizes([gemm_kernel.c_size_rule(m, n, k)])[1][0]  # as the generated C spells it
            assert src.count(rule) == 1, rule


@requires_cc
def test_blas_fallback_until_library_loads(tmp_path):
    """In a new process whose kernel library never loads, the generated programs' BLAS fallback
    computes the product; once it loads (same executable), the kernel computes it."""
    code = (
        "import json, sys, numpy as np\n"
        "import ember\n"
        "from ember import lax\n"
        "from ember._src.native.emit import gemm_kernel\n"
        "real_load = gemm_kernel.load\n"
        "gemm_kernel.load = lambda wait=False: None\n"
        "rng = np.random.default_rng(7)\n"
        "a = rng.standard_normal((33, 70)).astype(np.float32)\n"
        "b = rng.standard_normal((70, 50)).astype(np.float32)\n"
        "f = ember.jit(lambda x, y: lax.dot(x, y), backend='native')\n"
        "before = np.asarray(f(a, b)).tolist()\n"
        "loaded = real_load(wait=True)\n"
        "after = np.asarray(f(a, b)).tolist()\n"
        "print(json.dumps({'before': before, 'after': after, 'loaded': loaded,\n"
        "                  'uses': 'em_sk_fn()' in f.lower(a, b).executable.source}))\n"
    )
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    out = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True).stdout.strip().splitlines()[-1])
    rng = np.random.default_rng(7)
    a = rng.standard_normal((33, 70)).astype(np.float32)
    b = rng.standard_normal((70, 50)).astype(np.float32)
    want = a.astype(np.float64) @ b
    np.testing.assert_allclose(np.array(out["before"]), want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.array(out["after"]), want, rtol=1e-5, atol=1e-4)
    assert out["uses"] == (gemm_kernel.kernel_symbol() is not None)
    assert out["loaded"] == (gemm_kernel.kernel_symbol() is not None)


@pytest.mark.parametrize("relu", [False, True])
def test_epilogue_in_registers_on_whole_tiles(kernel, relu):
    """Whole tiles of a one-block product (beta 0, alpha 1) take the bias and ReLU in registers and
    store straight to C: every tile height and panel width (rows a multiple of 48 = lcm of the tile
    heights, 96 + 32 + 16 columns), k up to 2 KC; NaN, +-Inf and a negative-zero bias; the
    packing and prepacked entries agree bit for bit, and with the float64 reference."""
    rng = np.random.default_rng(21)
    for m, n, k in [(48, 144, 64), (96, 48, 512), (48, 16, 7), (24, 80, 300), (50, 35, 33)]:
        a, b = _operand(rng, m, k, False), _operand(rng, k, n, False)
        a[1, :] = 0.0
        a[2, 0] = np.inf
        a[3, 0] = -np.inf
        a[4, 0] = np.nan
        b[0, :] = np.abs(b[0, :]) + 1.0  # row 2 +Inf, row 3 -Inf in every column
        bias = rng.standard_normal(n).astype(np.float32)
        bias[:3] = [0.0, -0.0, -1.0]
        want = _ref(a, b) + bias
        want = _relu_keep_nan(want) if relu else want
        got = _run(kernel, a, b, bias=bias, relu=relu)
        packed = gemm_kernel.prepack_b(b, kernel.isa)
        got_p = np.zeros_like(got)
        kernel.packed(m, n, k, 1.0, a.ctypes.data, k, 1, packed.ctypes.data, 0.0, got_p.ctypes.data, n,
                      bias.ctypes.data, int(relu), 1)
        np.testing.assert_array_equal(got_p.view(np.int32), got.view(np.int32))
        with np.errstate(invalid="ignore"):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(k), err_msg=f"{m}x{n}x{k}")
        assert np.isnan(got[4]).all() and not np.isnan(np.delete(got, 4, axis=0)).any()
        # row 1 is the bias alone (the sums are +0.0: no negative zero reaches C)
        np.testing.assert_array_equal(got[1], np.maximum(bias, 0) if relu else bias + 0.0)
        assert not np.signbit(got[1, :2]).any()
        if relu:
            assert (got[3] == 0).all() and np.isposinf(got[2]).all()


@pytest.mark.parametrize("relu", [False, True])
def test_accumulating_tiles_in_registers(kernel, relu):
    """beta == 1 in one contraction block (a residual the passes gave the product as C): whole tiles
    add C in registers before the bias and ReLU. The result is bit for bit ``((A B) + C) + bias``
    then the ReLU, in float32, with ``A B`` from the same kernel at beta 0 (the order em_sk_store
    applies); NaN and infinities in C reach the output; packing and prepacked entries agree."""
    rng = np.random.default_rng(22)
    for m, n, k in [(48, 144, 64), (96, 48, 512), (48, 16, 7), (50, 35, 33), (9, 100, 128)]:
        a, b = _operand(rng, m, k, False), _operand(rng, k, n, False)
        bias = rng.standard_normal(n).astype(np.float32)
        c = rng.standard_normal((m, n)).astype(np.float32)
        c[0, :3] = [np.nan, np.inf, -np.inf]
        ab = _run(kernel, a, b)
        with np.errstate(invalid="ignore"):
            want = (ab + c) + bias
            want = _relu_keep_nan(want).astype(np.float32) if relu else want
        got = _run(kernel, a, b, 1.0, 1.0, c.copy(), bias=bias, relu=relu)
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32), err_msg=f"{m}x{n}x{k}")
        with np.errstate(invalid="ignore"):  # and against float64 NumPy, independently of the kernel
            ref = _ref(a, b, 1.0, 1.0, c) + bias
            ref = _relu_keep_nan(ref) if relu else ref
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.sqrt(k))
        assert np.isnan(got[0, 0]) and np.isposinf(got[0, 1])
        assert got[0, 2] == 0 if relu else np.isneginf(got[0, 2])
        packed = gemm_kernel.prepack_b(b, kernel.isa)
        got_p = c.copy()
        kernel.packed(m, n, k, 1.0, a.ctypes.data, k, 1, packed.ctypes.data, 1.0, got_p.ctypes.data, n,
                      bias.ctypes.data, int(relu), 1)
        np.testing.assert_array_equal(got_p.view(np.int32), got.view(np.int32))


@pytest.mark.parametrize("trans_a,trans_b", list(itertools.product([False, True], repeat=2)))
def test_narrow_products(kernel, trans_a, trans_b):
    """Products of 1 .. 20 columns around the dot kernels' threshold (``narrow_columns``: 12 columns
    on AVX-512, 8 on AVX2; k from vw to 1024), M and K at their edges, transposed operands, bias and
    ReLU, beta, threads: against float64 NumPy; the prepacked entry bit for bit with the packing one,
    and each row the same sums whatever the number of rows."""
    rng = np.random.default_rng(31)
    vw = kernel.isa.vw
    ks = [1, vw - 1, vw, vw + 1, 3 * vw + 5, 512, 1024, 1025]
    for n in range(1, 21):
        for k in (ks if n in (1, 2, 7, 8, 10, 12, 13, 16) else [vw, 2 * vw + 3, 600]):
            m = int(rng.choice([1, 2, 3, 5, 8, 13, 17, 64]))
            a, b = _operand(rng, m + 9, k, trans_a), _operand(rng, k, n, trans_b)
            bias = rng.standard_normal(n).astype(np.float32)
            relu = bool(n % 2)
            beta, nthreads = [(0.0, 1), (0.5, 2), (1.0, 0)][n % 3]
            c0 = rng.standard_normal((m + 9, n)).astype(np.float32)
            want = _ref(a, b, 1.0, beta, c0) + bias
            want = _relu_keep_nan(want) if relu else want
            got = _run(kernel, a, b, 1.0, beta, c0.copy(), nthreads, bias=bias, relu=relu)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5 * np.sqrt(k), err_msg=f"n={n} k={k}")
            packed = gemm_kernel.prepack_b(b, kernel.isa)
            got_p = c0.copy()
            sa = (a.strides[0] // 4, a.strides[1] // 4)
            kernel.packed(m + 9, n, k, 1.0, a.ctypes.data, *sa, packed.ctypes.data, beta, got_p.ctypes.data,
                          n, bias.ctypes.data, int(relu), nthreads)
            if k <= 2 * gemm_kernel.KC:
                np.testing.assert_array_equal(got_p, got, err_msg=f"packed n={n} k={k}")
            else:
                np.testing.assert_allclose(got_p, want, rtol=1e-5, atol=2e-5 * np.sqrt(k))
            short = _run(kernel, a[:m], b, 1.0, beta, c0[:m].copy(), 1, bias=bias, relu=relu)
            np.testing.assert_array_equal(short, got[:m], err_msg=f"rows m={m} n={n} k={k}")


def test_narrow_products_nan_inf(kernel):
    """NaN and +-Inf in A or B reach exactly the elements they feed on the dot kernels (a lane's
    NaN/Inf is not lost in the cross-lane sum, a zero-padded tail adds none)."""
    rng = np.random.default_rng(32)
    vw = kernel.isa.vw
    narrow = gemm_kernel.narrow_columns(kernel.isa)
    assert narrow in (8, 12)
    for n, k in [(10, 512), (3, vw + 3), (narrow, 37)]:
        a = rng.standard_normal((9, k)).astype(np.float32)
        b = np.abs(rng.standard_normal((k, n)).astype(np.float32)) + 0.5
        a[1, k - 1] = np.inf  # the last (tail) element
        a[2, 0] = -np.inf
        a[3, k // 2] = np.nan
        b[k // 3, n - 1] = np.nan  # column n-1 NaN in every row
        got = _run(kernel, a, b)
        assert np.isposinf(got[1, :n - 1]).all() and np.isneginf(got[2, :n - 1]).all()
        assert np.isnan(got[3]).all() and np.isnan(got[:, n - 1]).all()
        rows = [0, *range(4, 9)]
        np.testing.assert_allclose(got[rows, :n - 1], _ref(a[rows], b[:, :n - 1]), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_jit_mlp_narrow_last_layer(dtype):
    """The MLP's 10-column last layer through ``jit`` (weights as arguments and as constants, float32
    on the kernel, float64 on BLAS) against float64 NumPy."""
    rng = np.random.default_rng(33)
    x = rng.standard_normal((128, 96)).astype(dtype)
    w1, w2 = (rng.standard_normal(s).astype(dtype) / 8 for s in ((96, 64), (64, 10)))
    b1, b2 = (rng.standard_normal(s).astype(dtype) for s in (64, 10))

    def mlp(x, w1, b1, w2, b2):
        return lax.dot(jnp.maximum(lax.dot(x, w1) + b1, 0.0), w2) + b2

    want = np.maximum(x.astype(np.float64) @ w1 + b1, 0) @ w2 + b2
    tol = 1e-5 if dtype == np.float32 else 1e-12
    got = np.asarray(ember.jit(mlp, backend="native")(x, w1, b1, w2, b2))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    const = ember.jit(lambda x: mlp(x, w1, b1, w2, b2), backend="native")
    np.testing.assert_allclose(np.asarray(const(x)), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("trans_b", [False, True])
def test_jit_narrow_weights_packed_as_arguments(kernel_loaded, trans_b):
    """A narrow ``B`` (1 .. 13 columns, around ``narrow_columns``) passed as the same ember Array
    again is packed once (transposed, ``prepack_b``) and the prepacked entry gives bit for bit the
    values of a program that never packs; constant weights the same; all against float64 NumPy."""
    from ember._src.native.runtime import dispatch

    if dispatch.module(wait=True) is None or gemm_kernel.BLAS_ONLY:
        pytest.skip("needs the C dispatcher and the kernel library")
    rng = np.random.default_rng(34)
    for n in (1, 3, 8, 10, 12, 13):
        x_np = rng.standard_normal((37, 200)).astype(np.float32)
        w_np = rng.standard_normal((n, 200) if trans_b else (200, n)).astype(np.float32)
        b_np = rng.standard_normal(n).astype(np.float32)

        def layer(x, w, b):
            return jnp.maximum((x @ (w.T if trans_b else w)) + b, 0.0)

        x, w, b = jnp.asarray(x_np), jnp.asarray(w_np), jnp.asarray(b_np)
        want = np.maximum(x_np.astype(np.float64) @ (w_np.T if trans_b else w_np) + b_np, 0.0)
        plain = np.asarray(ember.jit(layer, backend="native", prepack=False)(x, w, b))
        np.testing.assert_allclose(plain, want, rtol=1e-5, atol=1e-5)
        f = ember.jit(layer, backend="native")
        for _ in range(3):
            np.testing.assert_array_equal(np.asarray(f(x, w, b)), plain, err_msg=f"n={n}")
        if n >= 2:  # a single column stays with BLAS sgemv
            assert f.lower(x, w, b).executable._packed_cache[0] is not None
        def const_layer(x, w=w_np, b=b_np):
            return layer(x, w, b)

        const = ember.jit(const_layer, backend="native")
        np.testing.assert_array_equal(np.asarray(const(x)), plain, err_msg=f"constant n={n}")


@pytest.mark.parametrize("isa_name", sorted(gemm_kernel.ISAS))
def test_single_row_on_panel_pairs_keeps_the_sums(isa_name):
    """A one-row product on the prepacked entry runs two full panels at a time (em_sk_row2: six
    accumulators), with the same sums as one panel at a time (EM_SK_ROW2 0: em_sk_row) bit for bit:
    one and several contraction blocks (k past 2 KC), beta 0 and 1 with the C added first, bias and
    ReLU, an odd panel count and partial panels after the pairs, NaN and infinities in A; and the
    values of a float64 product."""
    pairs, single = build_kernel(isa_name), build_kernel(isa_name, prefix="#define EM_SK_ROW2 0\n")
    rng = np.random.default_rng(23)
    w3 = 3 * pairs.isa.vw
    for n, k in [(2 * w3, 1), (2 * w3, 256), (1024, 256), (7 * w3 + 17, 700), (4 * w3, 1500), (3 * w3, 33)]:
        b = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        packed = gemm_kernel.prepack_b(b, pairs.isa)
        for beta, bias_on, relu, special in [(0.0, False, False, False), (0.0, True, True, False),
                                             (1.0, True, False, False), (1.0, False, True, False),
                                             (1.0, True, True, True)]:
            a = rng.standard_normal((1, k)).astype(np.float32)
            bias = rng.standard_normal(n).astype(np.float32) if bias_on else None
            c0 = rng.standard_normal((1, n)).astype(np.float32)
            if special:  # NaN in C, an infinity in B's column through A's single nonzero step
                c0[0, 5] = np.nan
                a[0, :] = 0.0
                a[0, k - 1] = np.inf
            outs = []
            for fn in (pairs, single):
                got = c0.copy()
                fn.packed(1, n, k, 1.0, a.ctypes.data, k, 1, packed.ctypes.data, beta, got.ctypes.data, n,
                          None if bias is None else bias.ctypes.data, int(relu), 1)
                outs.append(got)
            np.testing.assert_array_equal(outs[0].view(np.int32), outs[1].view(np.int32),
                                          err_msg=f"n={n} k={k} beta={beta}")
            with np.errstate(invalid="ignore"):
                ref = _ref(a, b, 1.0, beta, c0) + (0.0 if bias is None else bias)
            ref = _relu_keep_nan(ref) if relu else ref
            np.testing.assert_array_equal(np.isnan(outs[0]), np.isnan(ref))
            fin = np.isfinite(ref)
            np.testing.assert_allclose(outs[0][fin], ref[fin], rtol=1e-5, atol=1e-5 * np.sqrt(k))
