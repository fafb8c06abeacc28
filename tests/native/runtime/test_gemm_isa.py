"""The float32 GEMM kernel on both of its instruction sets (AVX2 8-wide and AVX-512 16-wide tiles;
an AVX-512 machine runs both) and through each entry: packing B per call, a prepacked B, and the
blocked path for large products (``em_sgemm_big``: A packed in slivers, forced here whatever the
size). Random shapes over edge sizes, transposed operands, alpha/beta, a fused bias/ReLU and
thread splits, against a float64 reference with the rounding-error bound of a length-k dot
product; NaN and Inf propagate as in IEEE arithmetic. ``EMBER_GEMM_ISA`` picks the ISA of the
library jitted programs call."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ember._src.native.emit import gemm_kernel
from tests.native.conftest import requires_cc
from tests.native.runtime.test_gemm_kernel import build_kernel

SIZES = [1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 100, 255, 257, 512, 1000]
EPS = float(np.finfo(np.float32).eps)


@pytest.fixture(scope="module", params=sorted(gemm_kernel.ISAS))
def kern(request):
    return build_kernel(request.param)


def _operand(rng, rows, cols, trans):
    x = rng.standard_normal((cols, rows) if trans else (rows, cols)).astype(np.float32)
    return x.T if trans else x


def _call(kern, entry, a, b, alpha, beta, c, nthreads=1, bias=None, relu=False):
    """C (updated in place) = alpha a @ b + beta C (+ bias, ReLU) through ``entry``: "pack" (B
    packed per call), "prepacked" (prepack_b's layout), "big" (the blocked path, B packed) or
    "big_prepacked" (the blocked path on prepack_b's layout)."""
    m, k = a.shape
    n = b.shape[1]
    sa = (a.strides[0] // 4, a.strides[1] // 4)
    sb = (b.strides[0] // 4, b.strides[1] // 4)
    tail = (None if bias is None else bias.ctypes.data, int(relu), nthreads)
    packed = gemm_kernel.prepack_b(b, kern.isa) if entry in ("prepacked", "big_prepacked") else None
    if entry == "pack":
        kern(m, n, k, alpha, a.ctypes.data, *sa, b.ctypes.data, *sb, beta, c.ctypes.data, n, *tail)
    elif entry == "prepacked":
        kern.packed(m, n, k, alpha, a.ctypes.data, *sa, packed.ctypes.data, beta, c.ctypes.data, n, *tail)
    elif entry == "big":
        kern.big(m, n, k, alpha, a.ctypes.data, *sa, b.ctypes.data, *sb, None, beta, c.ctypes.data, n, *tail)
    else:
        kern.big(m, n, k, alpha, a.ctypes.data, *sa, None, 0, 0, packed.ctypes.data, beta, c.ctypes.data, n,
                 *tail)
    return c


def _check(got, a, b, alpha, beta, c0, bias=None, relu=False, msg=""):
    """``got`` within the float32 error bound of alpha a b + beta c0 (+ bias, ReLU): k eps times
    alpha |a| |b| (the bound of a length-k sum of products) plus the rounding of the scaling and
    the additions."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = alpha * (a64 @ b64) + beta * c0
    scale = abs(alpha) * (np.abs(a64) @ np.abs(b64)) + abs(beta) * np.abs(c0)
    if bias is not None:
        want, scale = want + bias, scale + np.abs(bias)
    if relu:
        want = np.maximum(want, 0.0)
    tol = (a.shape[1] + 4) * EPS * scale + 1e-30
    err = np.abs(got - want)
    assert (err <= tol).all(), f"{msg}: max error {err.max():.3g}, ratio to bound {(err / tol).max():.3g}"


@pytest.mark.parametrize("entry", ["pack", "prepacked", "big", "big_prepacked"])
def test_random_shapes(kern, entry):
    """Random (m, n, k) over the edge sizes (1 .. 1000), each operand transposed or not, alpha and
    beta from {1, 0, -0.5, 2} x {0, 1, 0.25}."""
    rng = np.random.default_rng(hash(entry) % 1000 + kern.isa.vw)
    done = 0
    while done < 24:
        m, n, k = (int(x) for x in rng.choice(SIZES, 3))
        if m * n * k > 3e7:  # a few large ones, within a test's time
            continue
        done += 1
        ta, tb = bool(rng.integers(2)), bool(rng.integers(2))
        alpha, beta = float(rng.choice([1.0, 0.0, -0.5, 2.0])), float(rng.choice([0.0, 1.0, 0.25]))
        a, b = _operand(rng, m, k, ta), _operand(rng, k, n, tb)
        c0 = rng.standard_normal((m, n)).astype(np.float32)
        got = _call(kern, entry, a, b, alpha, beta, c0.copy())
        _check(got, a, b, alpha, beta, c0.astype(np.float64),
               msg=f"{kern.isa.name} {entry} m={m} n={n} k={k} ta={ta} tb={tb} alpha={alpha} beta={beta}")


@pytest.mark.parametrize("entry", ["big", "big_prepacked"])
def test_blocked_path_blocks_threads_and_epilogue(kern, entry):
    """The blocked path across its blocks (rows beyond one block of A, columns beyond one block of
    panels, contractions beyond one block) with the column panels split among 1, 2 and the default
    number of threads, beta != 0 and a fused bias + ReLU (applied once, after the last block)."""
    rng = np.random.default_rng(3)
    isa = kern.isa
    m = isa.big_mc * 2 + 5
    n = isa.big_np * 3 * isa.vw + 3 * isa.vw + 7  # more than one block of panels, a narrow last panel
    k = isa.big_kc + 33
    a, b = _operand(rng, m, k, False), _operand(rng, k, n, True)
    bias = rng.standard_normal(n).astype(np.float32)
    for nthreads, beta, relu in [(1, 0.0, False), (2, 0.5, True), (0, 1.0, False), (3, 0.0, True)]:
        c0 = rng.standard_normal((m, n)).astype(np.float32)
        got = _call(kern, entry, a, b, 1.0, beta, c0.copy(), nthreads, bias, relu)
        _check(got, a, b, 1.0, beta, c0.astype(np.float64), bias, relu, f"{isa.name} threads={nthreads}")


@pytest.mark.parametrize("pool", [True, False])
def test_blocked_path_row_split_is_bit_identical(kern, pool, monkeypatch):
    """With a prepacked B of fewer panel blocks than chunks (one block here) and more rows than
    columns, the blocked path splits the rows among threads too (a grid of row and column parts,
    em_sgemm_big_all): every thread count
    gives the one-thread values bit for bit, on ember's pool and on the OpenMP fallback (the pool's
    entry not found), with rows that are not a whole number of slivers, beta != 0 and a fused bias +
    ReLU; and within the float32 bound of float64."""
    from ember._src.native.runtime import threadpool
    if pool and not threadpool.load(wait=True):
        pytest.skip("ember's thread pool cannot be built here")
    if not pool:  # a library of its own whose pool lookup fails: the OpenMP fallback
        monkeypatch.setattr(threadpool, "symbol", lambda: "em_test_no_such_pool")
        kern = build_kernel(kern.isa.name)
    rng = np.random.default_rng(9)
    isa = kern.isa
    w3 = isa.kernels[0][1] * isa.vw  # the widest panel
    for m, n, k in [(8 * 37 + 3, 4 * w3, 300), (5, 2 * w3 + 7, 64),
                    (isa.big_mc * 5 + 1, 8 * w3 + isa.vw, isa.big_kc + 9)]:
        a, b = _operand(rng, m, k, False), _operand(rng, k, n, False)
        bias = rng.standard_normal(n).astype(np.float32)
        c0 = rng.standard_normal((m, n)).astype(np.float32)
        for beta, relu in [(0.0, False), (0.5, True)]:
            want = _call(kern, "big_prepacked", a, b, 1.0, beta, c0.copy(), 1, bias, relu)
            _check(want, a, b, 1.0, beta, c0.astype(np.float64), bias, relu, f"{isa.name} m={m} n={n}")
            for nthreads in (2, 3, 4, 0):
                got = _call(kern, "big_prepacked", a, b, 1.0, beta, c0.copy(), nthreads, bias, relu)
                np.testing.assert_array_equal(got, want, err_msg=f"{isa.name} m={m} n={n} threads={nthreads}")


@pytest.mark.parametrize("variant", ["pool", "openmp", "own_copies"])
@pytest.mark.parametrize("entry", ["big", "big_prepacked"])
def test_blocked_path_column_parts_share_packed_a(kern, entry, variant, monkeypatch):
    """The blocked path's column split (em_sgemm_big_all): B packed per call is cut into equal parts
    of whole vectors of columns, each with panels of its own, a prepacked B into prepack_b's panels;
    every part reads A packed once for all of them (the first part to need a block packs it; one
    that finds a block being packed packs its own copy: "own_copies" marks every block so from the
    start), as does one thread over more than one block of panels. Every thread count gives the
    one-thread values bit for bit, on ember's pool and on the OpenMP fallback, and they are within
    the float32 bound of float64."""
    from ember._src.native.runtime import threadpool
    if variant == "pool" and not threadpool.load(wait=True):
        pytest.skip("ember's thread pool cannot be built here")
    if variant == "openmp":
        monkeypatch.setattr(threadpool, "symbol", lambda: "em_test_no_such_pool")
        kern = build_kernel(kern.isa.name)
    elif variant == "own_copies":
        kern = build_kernel(kern.isa.name, prefix="#define EM_SK_APK_INIT 1\n")
    rng = np.random.default_rng(12)
    isa = kern.isa
    w3 = isa.kernels[0][1] * isa.vw
    shapes = [(isa.big_mc * 3 + 5, 4 * w3 + 2 * isa.vw + 3, 2 * isa.big_kc + 7),  # 3 x 3 blocks of A
              (isa.big_mc + 1, 64 * isa.vw, isa.big_kc)]  # 1024 columns on AVX-512: 4 parts of 256
    if variant == "pool":
        shapes.append((40, isa.big_np * w3 + 5 * isa.vw, 70))  # two blocks of panels on one thread
    for m, n, k in shapes:
        a, b = _operand(rng, m, k, False), _operand(rng, k, n, bool(n % 2))
        bias = rng.standard_normal(n).astype(np.float32)
        c0 = rng.standard_normal((m, n)).astype(np.float32)
        for beta, relu in [(0.0, False), (0.5, True)]:
            want = _call(kern, entry, a, b, 1.0, beta, c0.copy(), 1, bias, relu)
            _check(want, a, b, 1.0, beta, c0.astype(np.float64), bias, relu, f"{isa.name} m={m} n={n} k={k}")
            for nthreads in (2, 3, 4, 0):
                got = _call(kern, entry, a, b, 1.0, beta, c0.copy(), nthreads, bias, relu)
                np.testing.assert_array_equal(got, want, err_msg=f"{isa.name} m={m} n={n} threads={nthreads}")


@pytest.mark.parametrize("isa_name", sorted(gemm_kernel.ISAS))
def test_blocked_path_l2_blocks_of_panels(isa_name):
    """The blocked path with its B blocks sized for L2 (``Isa.big_l2``, set small here so that a
    few panels make a block): more than one block of panels runs each packed sliver of A over every
    panel of a block (by sliver), all the panels as one block where they take at most 1.5 times the
    budget (by panel). Row counts around the sliver height, a narrow last panel, contractions of
    1, one block and several equal blocks, beta != 0 and a fused bias + ReLU, B packed per call (A
    transposed) and prepacked (B transposed); every thread count gives the one-thread values bit for
    bit, and they are within the float32 bound of float64. Both ISAs (the AVX2 build compiles the
    same C)."""
    isa = gemm_kernel.ISAS[isa_name]
    w3 = isa.kernels[0][1] * isa.vw
    mr = isa.kernels[0][0]
    rng = np.random.default_rng(21)
    # a 64-step panel takes 64 w3 4 bytes: a budget of 2.5 panels -> blocks of 2 (by sliver); 5 panels
    # within 1.5 x 4 panels -> one block (by panel)
    for budget_panels, n in [(2.5, 5 * w3 + isa.vw + 3), (4, 5 * w3)]:
        kern = build_kernel(isa_name, big_kc=64, big_l2=int(budget_panels * 64 * w3 * 4))
        for m, k in [(3 * mr + 5, 64), (mr - 1, 1), (isa.big_mc + mr + 1, 3 * 64 - 5), (1, 130)]:
            for entry, ta, tb in [("big", True, False), ("big_prepacked", False, True)]:
                a, b = _operand(rng, m, k, ta), _operand(rng, k, n, tb)
                bias = rng.standard_normal(n).astype(np.float32)
                c0 = rng.standard_normal((m, n)).astype(np.float32)
                for beta, relu in [(0.0, False), (0.5, True)]:
                    msg = f"{isa_name} {entry} m={m} n={n} k={k} budget={budget_panels} beta={beta}"
                    want = _call(kern, entry, a, b, 1.0, beta, c0.copy(), 1, bias, relu)
                    _check(want, a, b, 1.0, beta, c0.astype(np.float64), bias, relu, msg)
                    for nthreads in (2, 3):
                        got = _call(kern, entry, a, b, 1.0, beta, c0.copy(), nthreads, bias, relu)
                        np.testing.assert_array_equal(got, want, err_msg=f"{msg} threads={nthreads}")


def test_blocked_path_is_chosen_for_large_products(kern):
    """The packing entry hands a large product (2048 x 300 x 2048) to the blocked path: the same
    values, bit for bit, as the blocked path called directly."""
    rng = np.random.default_rng(4)
    a, b = _operand(rng, 2048, 512, False), _operand(rng, 512, 300, False)
    got = _call(kern, "pack", a, b, 1.0, 0.0, np.empty((2048, 300), np.float32))
    np.testing.assert_array_equal(got, _call(kern, "big", a, b, 1.0, 0.0, np.empty((2048, 300), np.float32)))
    _check(got, a, b, 1.0, 0.0, 0.0)


@pytest.mark.parametrize("entry", ["pack", "prepacked", "big"])
def test_nan_and_inf_propagate(kern, entry):
    """A NaN in A makes its row NaN; +Inf in B makes its column +-Inf where the row's A is nonzero
    and finite, NaN where it meets 0 (0 * Inf) or both signs; NaN in C with beta == 0 is ignored.
    Compared with NumPy's float64 einsum (plain loops, no BLAS)."""
    rng = np.random.default_rng(5)
    m, n, k = 37, 70, 300
    a, b = _operand(rng, m, k, False), _operand(rng, k, n, False)
    a[3, 10] = np.nan
    a[5, 20] = 0.0
    b[20, 4] = np.inf
    b[30, 9] = -np.inf
    b[31, 9] = np.inf  # column 9: +Inf and -Inf -> NaN
    a[:, 7] = np.inf
    b[7, 50:] = 0.0  # Inf * 0 in columns 50.. -> NaN there
    c = np.full((m, n), np.nan, np.float32)
    got = _call(kern, entry, a, b, 1.0, 0.0, c)
    want = np.einsum("ik,kj->ij", a.astype(np.float64), b.astype(np.float64), optimize=False)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    assert (np.sign(got[np.isinf(want)]) == np.sign(want[np.isinf(want)])).all()
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-3)


@requires_cc
def test_isa_variable_picks_the_library(tmp_path):
    """EMBER_GEMM_ISA picks the kernel library of jitted programs (a different exported symbol and
    a packed layout of its own panel width); both give float32-accurate products, a constant B
    prepacked included; a name that is no ISA is an error naming the variable."""
    code = (
        "import json, numpy as np\n"
        "import ember\n"
        "from ember._src.native.emit import gemm_kernel\n"
        "gemm_kernel.load(wait=True)\n"
        "rng = np.random.default_rng(9)\n"
        "a = rng.standard_normal((300, 200)).astype(np.float32)\n"
        "w = rng.standard_normal((200, 130)).astype(np.float32)\n"
        "f = ember.jit(lambda x, y: x @ y, backend='native')\n"
        "g = ember.jit(lambda x: x @ w, backend='native')\n"
        "isa = gemm_kernel.isa()\n"
        "print(json.dumps({'isa': isa and isa.name, 'symbol': gemm_kernel.kernel_symbol(),\n"
        "                  'widths': gemm_kernel.panel_widths(130), 'f': np.asarray(f(a, w)).tolist(),\n"
        "                  'g': np.asarray(g(a)).tolist(),\n"
        "                  'uses': 'em_skp_fn()' in g.lower(a).executable.source}))\n"
    )
    rng = np.random.default_rng(9)
    a = rng.standard_normal((300, 200)).astype(np.float32)
    w = rng.standard_normal((200, 130)).astype(np.float32)
    seen = {}
    for name in sorted(gemm_kernel.ISAS):
        env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path), EMBER_GEMM_ISA=name,
                   PYTHONPATH=os.pathsep.join(sys.path))
        out = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                        check=True).stdout.strip().splitlines()[-1])
        if out["isa"] is None:  # the target lacks this ISA: no kernel, BLAS
            assert out["symbol"] is None
        else:
            assert out["isa"] == name and out["uses"]
            assert out["widths"] == ([24] * 5 + [16] if name == "avx2" else [48] * 3)
            seen[name] = out["symbol"]
        for key in ("f", "g"):
            _check(np.array(out[key]), a, w, 1.0, 0.0, 0.0, msg=f"{name} {key}")
    assert len(set(seen.values())) == len(seen)
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path), EMBER_GEMM_ISA="sse9",
               PYTHONPATH=os.pathsep.join(sys.path))
    probe = "from ember._src.native import gemm_kernel; gemm_kernel.isa()"
    bad = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "EMBER_GEMM_ISA='sse9'" in bad.stderr


@requires_cc
@pytest.mark.parametrize("threads", [1, 2])
def test_jit_large_products_take_the_blocked_path(threads):
    """Through ember.jit (on AVX-512 every product goes to the kernel): a product large enough for
    the blocked path (m k >= 2^20), with B an argument and with B a constant (prepacked, bias and
    ReLU fused), on one and two threads, within the float32 error bound."""
    import ember
    import ember.numpy as jnp

    gemm_kernel.load(wait=True)
    rng = np.random.default_rng(6)
    m, k, n = 1100, 1000, 150
    x, w = _operand(rng, m, k, False), _operand(rng, k, n, False)
    bias = rng.standard_normal(n).astype(np.float32)
    f = ember.jit(lambda p, q: p @ q, backend="native", num_threads=threads)
    _check(np.asarray(f(x, w)), x, w, 1.0, 0.0, 0.0, msg="argument B")
    g = ember.jit(lambda p: jnp.maximum(p @ w + bias, 0.0), backend="native", num_threads=threads)
    _check(np.asarray(g(x)), x, w, 1.0, 0.0, 0.0, bias=bias, relu=True, msg="constant B")
    if gemm_kernel.isa() is gemm_kernel.AVX512 and not gemm_kernel.BLAS_ONLY:
        assert "em_sk_fn()" in f.lower(x, w).executable.source
        assert "em_skp_fn()" in g.lower(x).executable.source
