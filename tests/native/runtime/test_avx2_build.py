"""The vector kernels of generated programs built without AVX-512 (AVX2's 8-float vectors), as an
AVX2-only machine builds them. A child process compiles with ``EMBER_CC`` set to a wrapper that
adds ``-mno-avx512f`` (a no-op where the host has no AVX-512) and its own program cache, and runs
the convolution paths whose task counts and layouts depend on the vector width (FFT convolution,
Winograd on stride phases and stride 1, flat blocks, image tasks, a strided input gradient) and
the FFT lanes (float and double, a 2-3-5 length, an odd real length through a radix-11 stage) and
line kernel (complex, real and inverse real rows of 8 float / 4 double lanes), and the
attention kernel (its register tiles follow the vector width); each
result is compared here with a float64 NumPy reference. (An emitter that
counted tasks by the widest vector left half of the FFT convolution's channels unwritten there.)"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ember._src.native.runtime import toolchain
from tests.native.conftest import requires_cc
from tests.native.emit.test_conv_native import NCHW, NHWC, ref

pytestmark = requires_cc

CONVS = [
    # N, C, H, W, O, K, stride, layouts, what it runs on AVX-512 hosts
    (2, 16, 20, 20, 32, 7, 1, NHWC),  # the FFT convolution (>= 16 taps)
    (3, 16, 18, 18, 32, 3, 2, NHWC),  # Winograd on the stride phases
    (2, 16, 14, 14, 24, 3, 1, NCHW),  # Winograd F(2x2, 3x3), NCHW copy, image tasks
    (1, 144, 13, 13, 136, 3, 1, NHWC),  # ... a kernel past L2: chunks of several blocks of 6 tiles
    (4, 12, 30, 30, 24, 4, 2, NHWC),  # flat blocks, image tasks
    (2, 5, 13, 11, 7, 3, 1, NHWC),  # the direct kernel, features below a vector
]

# L, S, D, Dv, causal: head dims below, at and past whole vectors and tiles, causal blocks
ATTENTION = [(70, 70, 32, 32, None), (9, 130, 5, 80, None), (40, 40, 64, 16, "top_left")]

CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import ember
    from ember import lax
    cases = json.loads(sys.argv[1])
    rng = np.random.default_rng(7)
    out = {"conv": [], "fft": []}
    for N, C, H, W, O, K, s, lay in cases:
        xs = {"N": N, "C": C, "H": H, "W": W}
        ws = {"O": O, "I": C, "H": K, "W": K}
        x = rng.standard_normal(tuple(xs[a] for a in lay[0])).astype(np.float32)
        w = rng.standard_normal(tuple(ws[a] for a in lay[1])).astype(np.float32)
        f = lambda x, w: lax.conv_general_dilated(x, w, (s, s), [(K // 2, K // 2)] * 2,
                                                  dimension_numbers=tuple(lay))
        y = np.asarray(ember.jit(f, backend="native")(x, w))
        out["conv"].append([x.tolist(), w.tolist(), y.tolist()])
    x = rng.standard_normal((4, 16, 16, 32)).astype(np.float32)
    w = rng.standard_normal((3, 3, 32, 16)).astype(np.float32)
    ct = rng.standard_normal((4, 8, 8, 16)).astype(np.float32)
    conv = lambda x: lax.conv_general_dilated(x, w, (2, 2), [(1, 1), (1, 1)],
                                              dimension_numbers=("NHWC", "HWIO", "NHWC"))
    gx = ember.jit(lambda x, ct: ember.vjp(conv, x)[1](ct)[0], backend="native")(x, ct)
    out["grad"] = [x.tolist(), w.tolist(), ct.tolist(), np.asarray(gx).tolist()]
    r = rng.standard_normal((20, 1024)).astype(np.float32)
    c = (rng.standard_normal((20, 1000)) + 1j * rng.standard_normal((20, 1000))).astype(np.complex64)
    import ember.numpy as jnp
    out["fft"] = [r.tolist(), np.asarray(ember.jit(jnp.fft.rfft)(r)).view(np.float32).tolist(),
                  c.view(np.float32).tolist(),
                  np.asarray(ember.jit(jnp.fft.fft)(c)).view(np.float32).tolist()]
    from ember._src.prims.attention import attention
    out["attention"] = []
    for L, S, D, Dv, causal in ATTENTION:
        q, k = (rng.standard_normal((2, 2, n, D)).astype(np.float32) for n in (L, S))
        v = rng.standard_normal((2, 2, S, Dv)).astype(np.float32)
        o = ember.jit(lambda q, k, v: attention(q, k, v, causal=causal), backend="native")(q, k, v)
        out["attention"].append([q.tolist(), k.tolist(), v.tolist(), np.asarray(o).tolist()])
    ember.config.update("jax_enable_x64", True)
    z = (rng.standard_normal((11, 1000)) + 1j * rng.standard_normal((11, 1000))).astype(np.complex128)
    h = (rng.standard_normal((7, 50)) + 1j * rng.standard_normal((7, 50))).astype(np.complex64)
    zf = np.asarray(ember.jit(jnp.fft.fft)(z)).view(np.float64)
    hf = np.asarray(ember.jit(lambda a: jnp.fft.irfft(a, 99))(h))
    out["fft_more"] = [z.view(np.float64).tolist(), zf.tolist(), h.view(np.float32).tolist(), hf.tolist()]
    p = (rng.standard_normal((13, 512)) + 1j * rng.standard_normal((13, 512))).astype(np.complex64)
    q = (rng.standard_normal((6, 256)) + 1j * rng.standard_normal((6, 256))).astype(np.complex128)
    pf = np.asarray(ember.jit(jnp.fft.fft)(p)).view(np.float32)
    qf = np.asarray(ember.jit(lambda a: jnp.fft.ifft(a, norm="ortho"))(q)).view(np.float64)
    out["fft_p2"] = [p.view(np.float32).tolist(), pf.tolist(), q.view(np.float64).tolist(), qf.tolist()]
    e = (rng.standard_normal((5, 513)) + 1j * rng.standard_normal((5, 513))).astype(np.complex64)
    d = rng.standard_normal((3, 256))
    s = (rng.standard_normal((3, 64)) + 1j * rng.standard_normal((3, 64))).astype(np.complex64)
    ef = np.asarray(ember.jit(lambda a: jnp.fft.irfft(a, 1024))(e))
    df = np.asarray(ember.jit(jnp.fft.rfft)(d)).view(np.float64)
    sf = np.asarray(ember.jit(jnp.fft.fft)(s)).view(np.float32)
    u = (rng.standard_normal((64, 20)) + 1j * rng.standard_normal((64, 20))).astype(np.complex64)
    uf = np.asarray(ember.jit(lambda a: jnp.fft.fft(a, axis=0))(u)).view(np.float32)
    out["fft_line"] = [e.view(np.float32).tolist(), ef.tolist(), d.tolist(), df.tolist(),
                       s.view(np.float32).tolist(), sf.tolist(), u.view(np.float32).tolist(), uf.tolist()]
    mx = (rng.standard_normal((5, 960)) + 1j * rng.standard_normal((5, 960))).astype(np.complex64)
    mr = rng.standard_normal((3, 2000)).astype(np.float32)
    mh = (rng.standard_normal((3, 1001)) + 1j * rng.standard_normal((3, 1001))).astype(np.complex64)
    mf = ember.jit(lambda a, b, c: (jnp.fft.ifft(a, norm="ortho"), jnp.fft.rfft(b),
                                    jnp.fft.irfft(c, 2000)))(mx, mr, mh)
    out["fft_mixed"] = [mx.view(np.float32).tolist(), np.asarray(mf[0]).view(np.float32).tolist(),
                        mr.tolist(), np.asarray(mf[1]).view(np.float32).tolist(),
                        mh.view(np.float32).tolist(), np.asarray(mf[2]).tolist()]
    px = (rng.standard_normal((3, 300)) + 1j * rng.standard_normal((3, 300))).astype(np.complex64)
    pr = rng.standard_normal((5, 600)).astype(np.float32)
    pf = ember.jit(lambda a, b: (jnp.fft.fft(a), jnp.fft.rfft(b)))(px, pr)
    out["fft_pairs"] = [px.view(np.float32).tolist(), np.asarray(pf[0]).view(np.float32).tolist(),
                        pr.tolist(), np.asarray(pf[1]).view(np.float32).tolist()]
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def avx2_results(tmp_path_factory):
    d = tmp_path_factory.mktemp("avx2")
    real = toolchain.find_compiler()
    if real is None or real.family not in ("gcc", "clang"):
        pytest.skip("needs gcc or clang (for -mno-avx512f)")
    cc = d / "cc-avx2"
    cc.write_text(f'#!/bin/sh\nexec {shlex.quote(real.path)} "$@" -mno-avx512f\n')
    cc.chmod(0o755)
    env = dict(os.environ, EMBER_CC=str(cc), EMBER_CACHE_DIR=str(d / "cache"))
    proc = subprocess.run([sys.executable, "-c", f"ATTENTION = {ATTENTION!r}\n" + CHILD, json.dumps(CONVS)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _close(got, want, k):
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6 * k * scale)


@pytest.mark.parametrize("i", range(len(CONVS)), ids=[f"conv{i}" for i in range(len(CONVS))])
def test_conv_paths_without_avx512(avx2_results, i):
    N, C, H, W, O, K, s, lay = CONVS[i]
    x, w, y = (np.asarray(v, np.float32) for v in avx2_results["conv"][i])
    want = ref(x, w, (s, s), [(K // 2, K // 2)] * 2, (1, 1), lay, 1)
    assert y.shape == want.shape
    _close(y, want, K * K * C)


def test_strided_input_gradient_without_avx512(avx2_results):
    x, w, ct, gx = (np.asarray(v, np.float64) for v in avx2_results["grad"])
    # y[n, a, b] = sum_{i, j} xpad[n, 2a + i, 2b + j] w[i, j] (padding 1): each tap scatters ct back
    N, H, W, C = x.shape
    OH, OW = ct.shape[1:3]
    gp = np.zeros((N, H + 2, W + 2, C))
    for i in range(3):
        for j in range(3):
            gp[:, i:i + 2 * OH:2, j:j + 2 * OW:2, :] += np.einsum("nhwo,co->nhwc", ct, w[i, j])
    want = gp[:, 1:1 + H, 1:1 + W, :]
    _close(gx, want, 9 * 16)


def test_float_fft_lanes_without_avx512(avx2_results):
    r, rf, c, cf = (np.asarray(v, np.float32) for v in avx2_results["fft"])
    want_r = np.fft.rfft(r.astype(np.float64))
    want_c = np.fft.fft(c.view(np.complex64).astype(np.complex128))
    for got, want in ((rf.view(np.complex64), want_r), (cf.view(np.complex64), want_c)):
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 8e-6 * np.abs(want).max()


def test_power_of_two_complex_rows_without_avx512(avx2_results):
    """complex rows of a power of two in 8 float / 4 double lanes: the first stage read from the rows,
    the last one fused into the store (em_fftl_clast, 4 bins a tile), a partial last group."""
    pr, pf, qr, qf = avx2_results["fft_p2"]
    p = np.asarray(pr, np.float32).view(np.complex64)
    got, want = np.asarray(pf, np.float32).view(np.complex64), np.fft.fft(p.astype(np.complex128))
    assert got.shape == want.shape and np.abs(got - want).max() <= 9 * 2e-7 * np.abs(want).max()
    q = np.asarray(qr, np.float64).view(np.complex128)
    got, want = np.asarray(qf, np.float64).view(np.complex128), np.fft.ifft(q, norm="ortho")
    assert got.shape == want.shape and np.abs(got - want).max() <= 8 * 4e-16 * np.abs(want).max()


def test_fft_line_kernel_without_avx512(avx2_results):
    """fft_line.h with 8 float / 4 double lanes: an irfft of n 1024 (the merged half line of 512, a
    radix-8 first stage), an rfft in double (half line 128, radix-4 first stage) and complex64 rows
    of 64 = 8^2 points (the shortest line of 8 lanes: the first stage is the whole line but its
    last radix-8 stage); and 20 columns of 64 points in the lanes (first and last stages fused into
    the column loads and stores)."""
    er, ef, dr, df, sr, sf, ur, uf = avx2_results["fft_line"]
    e = np.asarray(er, np.float32).view(np.complex64)
    got, want = np.asarray(ef, np.float32), np.fft.irfft(e.astype(np.complex128), 1024)
    assert got.shape == want.shape and np.abs(got - want).max() <= 10 * 4 * 1.2e-7 * np.abs(want).max()
    d = np.asarray(dr, np.float64)
    got, want = np.asarray(df, np.float64).view(np.complex128), np.fft.rfft(d)
    assert got.shape == want.shape and np.abs(got - want).max() <= 8 * 4 * 2.2e-16 * np.abs(want).max()
    s = np.asarray(sr, np.float32).view(np.complex64)
    got, want = np.asarray(sf, np.float32).view(np.complex64), np.fft.fft(s.astype(np.complex128))
    assert got.shape == want.shape and np.abs(got - want).max() <= 6 * 4 * 1.2e-7 * np.abs(want).max()
    u = np.asarray(ur, np.float32).view(np.complex64)  # columns: two groups of 8 lanes and a partial one
    got, want = np.asarray(uf, np.float32).view(np.complex64), np.fft.fft(u.astype(np.complex128), axis=0)
    assert got.shape == want.shape and np.abs(got - want).max() <= 6 * 4 * 1.2e-7 * np.abs(want).max()


def test_double_and_odd_fft_lanes_without_avx512(avx2_results):
    """complex128 rows of 4-double vectors (length 1000: the line kernel, 250 first-stage
    butterflies in groups of 4, the last padded; then radix 2, 5, 5, 5 on blocks) and an odd-length irfft
    (99 = 9 * 11: the full Hermitian line through radix-3 and radix-11 stages) in 8 float lanes."""
    zr, zf, hr, hf = avx2_results["fft_more"]
    z = np.asarray(zr, np.float64).view(np.complex128)
    got = np.asarray(zf, np.float64).view(np.complex128)
    want = np.fft.fft(z)
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-13 * np.abs(want).max()
    h = np.asarray(hr, np.float32).view(np.complex64)
    got, want = np.asarray(hf, np.float64), np.fft.irfft(h.astype(np.complex128), 99)
    assert got.shape == want.shape and np.abs(got - want).max() <= 8e-6 * np.abs(want).max()


@pytest.mark.parametrize("i", range(len(ATTENTION)), ids=[f"attention{i}" for i in range(len(ATTENTION))])
def test_attention_without_avx512(avx2_results, i):
    from tests.native.emit.test_attention import ref as attention_ref

    q, k, v, o = (np.asarray(t, np.float32) for t in avx2_results["attention"][i])
    want = attention_ref(q, k, v, scale=1 / np.sqrt(q.shape[-1]), causal=ATTENTION[i][4])
    np.testing.assert_allclose(o, want, rtol=1e-4, atol=2e-5)


def test_2_3_5_rows_in_the_line_kernel_without_avx512(avx2_results):
    """fft_line.h's 2-3-5 rows with 8 float lanes: an inverse of 960 points (120 first-stage
    butterflies: whole groups of 8, then radix 3, 5 and 8 on blocks), an rfft and an irfft of 2000
    (half line 1000: 125 butterflies, the last group padded; the irfft's merged line read back as a
    row)."""
    xr, xf, rr, rf, hr, hf = avx2_results["fft_mixed"]
    x = np.asarray(xr, np.float32).view(np.complex64)
    got = np.asarray(xf, np.float32).view(np.complex64)
    want = np.fft.ifft(x.astype(np.complex128), norm="ortho")
    assert got.shape == want.shape and np.abs(got - want).max() <= 10 * 4 * 1.2e-7 * np.abs(want).max()
    r = np.asarray(rr, np.float32)
    got, want = np.asarray(rf, np.float32).view(np.complex64), np.fft.rfft(r.astype(np.float64))
    assert got.shape == want.shape and np.abs(got - want).max() <= 11 * 4 * 1.2e-7 * np.abs(want).max()
    h = np.asarray(hr, np.float32).view(np.complex64)
    got, want = np.asarray(hf, np.float32), np.fft.irfft(h.astype(np.complex128), 2000)
    assert got.shape == want.shape and np.abs(got - want).max() <= 11 * 4 * 1.2e-7 * np.abs(want).max()


def test_pair_blocks_in_the_line_kernel_without_avx512(avx2_results):
    """fft_line.h's pair blocks with 8 float lanes (4 points of each of two lines per block): 300
    complex points (a multiple of 4, not of 8; three lines, the last paired with itself; stages 4,
    then a merged radix 15 and a 5) and an rfft of 600 (half line 300) over five lines."""
    xr, xf, rr, rf = avx2_results["fft_pairs"]
    x = np.asarray(xr, np.float32).view(np.complex64)
    got, want = np.asarray(xf, np.float32).view(np.complex64), np.fft.fft(x.astype(np.complex128))
    assert got.shape == want.shape and np.abs(got - want).max() <= 9 * 4 * 1.2e-7 * np.abs(want).max()
    r = np.asarray(rr, np.float32)
    got, want = np.asarray(rf, np.float32).view(np.complex64), np.fft.rfft(r.astype(np.float64))
    assert got.shape == want.shape and np.abs(got - want).max() <= 10 * 4 * 1.2e-7 * np.abs(want).max()
