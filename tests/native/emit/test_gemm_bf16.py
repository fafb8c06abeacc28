"""Products with bfloat16 weights (``bf16_weights`` pass, ``native_gemm_bf16``, csrc/gemm_bf16.h) on
every code path this machine can run, against NumPy products of the same bfloat16 values."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.native.rewrite import passes
from ember._src.native.rewrite.bf16_weights import decode_numpy, gemm_bf16_p
from ember._src.native.runtime import bf16_isa, toolchain
from ember._src.torch_import.bf16 import decode
from tests.native.conftest import requires_cc

pytestmark = requires_cc


def _available(path: str) -> bool:
    info = toolchain.find_compiler()
    flags = set(info.target.split()) if info is not None and info.family == "gcc" else set()
    return bf16_isa.PATHS[path][1] <= flags


ROUNDING = ("amx", "avx512bf16")  # the paths that multiply bfloat16-rounded activations
PATHS = [pytest.param(p, marks=pytest.mark.skipif(not _available(p), reason=f"the target lacks {p}"))
         for p in bf16_isa.PATHS]


def _bf16(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


def _round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 -> float32, to nearest even (what vdpbf16ps's operands are)."""
    return x.astype(ml_dtypes.bfloat16).astype(np.float64)


def _mlp(w1: np.ndarray, b1: np.ndarray, w2t: np.ndarray, table: np.ndarray):
    """x -> relu(x @ W1 + b1) @ W2t.T, and rows of a table: weights as bfloat16 bits (uint16)."""
    bits1, bits2, bits_t = (a.view(np.uint16) for a in (w1, w2t, table))

    def f(x, ids):
        h = jnp.maximum(x @ decode(bits1) + b1, 0.0)
        return h @ decode(bits2).T, jnp.take(decode(bits_t), ids, axis=0)
    return f


@pytest.mark.parametrize("path", PATHS)
def test_paths_match_numpy(path, monkeypatch):
    monkeypatch.setenv(bf16_isa.ENV, path)
    rng = np.random.default_rng(1)
    # odd contraction (k = 37), columns not a multiple of the 32-column panel, rows not of the tile
    w1, w2t, table = _bf16(rng, (37, 45)), _bf16(rng, (70, 45)), _bf16(rng, (11, 9))
    b1 = rng.standard_normal(45).astype(np.float32)
    f = ember.jit(_mlp(w1, b1, w2t, table), dynamic_axes=[("rows", None), None])
    ids = np.array([3, 0, 10, 3])
    for rows in (1, 13, 200):  # one symbolic compile, three row counts (200: two row blocks)
        x = rng.standard_normal((rows, 37)).astype(np.float32)
        y, t = (np.asarray(o) for o in f(x, ids))
        rounds = path in ROUNDING
        xs = _round_bf16(x) if rounds else x.astype(np.float64)
        h = xs @ w1.astype(np.float64) + b1
        h = np.maximum(h, 0.0)
        hs = _round_bf16(h.astype(np.float32)) if rounds else h
        want = hs @ w2t.astype(np.float64).T
        np.testing.assert_allclose(y, want, rtol=2e-3 if rounds else 1e-5, atol=2e-3)
        np.testing.assert_array_equal(t, table.astype(np.float32)[ids])
    assert f.cache_info()["compiles"] == 1


@pytest.mark.skipif(not _available("avx512bf16"), reason="the compiler's target lacks AVX512-BF16")
def test_vdpbf16ps_rounds_the_activations(monkeypatch):
    """The vdpbf16ps and AMX paths multiply bfloat16-rounded activations (float32 sums): closer to
    that reference than to the product of the float32 activations; the widening paths are the
    reverse."""
    rng = np.random.default_rng(2)
    w = _bf16(rng, (256, 64))
    x = rng.standard_normal((24, 256)).astype(np.float32)
    bits = w.view(np.uint16)
    exact = x.astype(np.float64) @ w.astype(np.float64)
    rounded = _round_bf16(x) @ w.astype(np.float64)
    for path in [p for p in (*ROUNDING, "avx512") if _available(p)]:
        monkeypatch.setenv(bf16_isa.ENV, path)
        y = np.asarray(ember.jit(lambda x: x @ decode(bits))(x))
        near, far = (rounded, exact) if path in ROUNDING else (exact, rounded)
        assert np.abs(y - near).max() < 1e-3 < np.abs(y - far).max()


def test_the_pass_keeps_the_bits(monkeypatch):
    """After the passes the weights are uint16 constants read by native_gemm_bf16 (a transposed one
    too) and the table's rows are gathered before they are widened: no float32 copy remains."""
    rng = np.random.default_rng(3)
    w1, w2t, table = _bf16(rng, (16, 8)), _bf16(rng, (5, 8)), _bf16(rng, (6, 4))
    f = _mlp(w1, np.zeros(8, np.float32), w2t, table)
    p = ember.make_program(f)(np.zeros((3, 16), np.float32), np.array([1, 2]))
    opt = passes.run_passes(p)
    prims = [e.prim for e in opt.eqns]
    assert prims.count(gemm_bf16_p) == 2
    assert [e.params["trans_b"] for e in opt.eqns if e.prim is gemm_bf16_p] == [False, True]
    big = [v.aval for v in opt.constvars if v.aval.ndim == 2]
    assert big and all(a.dtype == np.uint16 for a in big)
    # the same values as the reference interpreter (on the path that widens the weights exactly)
    monkeypatch.setenv(bf16_isa.ENV, "c")
    x = rng.standard_normal((3, 16)).astype(np.float32)
    want = ember.jit(f, backend="numpy")(x, np.array([1, 2]))
    got = ember.jit(f)(x, np.array([1, 2]))
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_decode_is_exact():
    bits = np.array([0x0000, 0x8000, 0x3F80, 0xC2F7, 0x7F80, 0xFF80, 0x7FC1, 0x0001], np.uint16)
    want = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(decode_numpy(bits), want)
    np.testing.assert_array_equal(np.asarray(ember.jit(decode)(bits)), want)


def test_bad_isa_name(monkeypatch):
    monkeypatch.setenv(bf16_isa.ENV, "sse9")
    with pytest.raises(ValueError, match="EMBER_BF16_ISA"):
        bf16_isa.bf16_path()
