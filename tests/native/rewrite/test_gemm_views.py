"""Matrix products that read or write transposed values in place (the ``gemm_views`` pass and the
strided ``native_gemm``), among them written-out attention left unfused (``gemm -> row kernel ->
gemm`` as plain steps), against NumPy: the rewritten programs on the reference executor, and the
native code on the small-GEMM kernel and on BLAS (float32 with the kernel's size rule off,
float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.native.emit import gemm_kernel
from ember._src.native.rewrite import passes
from ember._src.native.rewrite.fused import gemm, gemm_p
from ember._src.native.runtime import gemm_library
from ember._src.program import run_numpy, validate
from tests.native.conftest import requires_cc

RNG = np.random.default_rng(11)

# written-out attention keeps its products (the strided views tested here) only without the
# fuse_attention pass (which makes it one attention step: tests/native/emit/test_attention*)
UNFUSED = {"passes": tuple(n for n in passes.DEFAULT_PASSES if n != "fuse_attention")}


def prims(p) -> list[str]:
    return [e.prim.name for e in p.eqns]


def consts(p) -> list[np.ndarray]:
    return [np.asarray(getattr(c, "value", c)) for c in p.consts]


def heads(z, b, t, h, d):
    return jnp.transpose(jnp.reshape(z, (b, t, h, d)), (0, 2, 1, 3))


def attention(q, k, v, h=4, scale=0.25, softmax=True):
    """Multi-head attention over [b, t, h*d] projections (the transformer benchmark's layout)."""
    b, t, hd = q.shape
    d = hd // h
    s = (heads(q, b, t, h, d) @ jnp.swapaxes(heads(k, b, k.shape[1], h, d), -1, -2)) * scale
    if softmax:
        e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        s = e / jnp.sum(e, axis=-1, keepdims=True)
    o = s @ heads(v, b, v.shape[1], h, d)
    return jnp.reshape(jnp.transpose(o, (0, 2, 1, 3)), (b, t, hd))


def attention_numpy(q, k, v, h=4, scale=0.25, softmax=True):
    b, t, hd = q.shape
    d = hd // h

    def hs(z):
        return z.astype(np.float64).reshape(b, z.shape[1], h, d).transpose(0, 2, 1, 3)

    s = hs(q) @ hs(k).swapaxes(-1, -2) * scale
    if softmax:
        e = np.exp(s - s.max(-1, keepdims=True))
        s = e / e.sum(-1, keepdims=True)
    return (s @ hs(v)).transpose(0, 2, 1, 3).reshape(b, t, hd)


def qkv(b=2, t=24, s=20, hd=32, dtype=np.float32):
    return [RNG.standard_normal(shape).astype(dtype) for shape in ((b, t, hd), (b, s, hd), (b, s, hd))]


# ---------------------------------------------------------------------------------------------
# the pass, on the reference executor
# ---------------------------------------------------------------------------------------------


def test_views_replace_head_transposes():
    args = qkv()
    p = ember.make_program(lambda q, k, v: attention(q, k, v, softmax=False))(*args)
    q = passes.run_passes(p)
    validate(q)
    assert "transpose" not in prims(q)
    gs = [e for e in q.eqns if e.prim is gemm_p]
    assert len(gs) == 2 and all(g.params.get("views") is not None for g in gs)
    # the second product writes the [b, t, h, d] result directly: no copy after it
    assert prims(q)[-1] in ("native_gemm", "reshape")
    for got, want in zip(run_numpy(q, consts(q), args), run_numpy(p, consts(p), args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_views_pass_switchable_and_keeps_unfoldable_copies():
    args = qkv()
    f = lambda q, k, v: attention(q, k, v, softmax=False)  # noqa: E731
    p = ember.make_program(f)(*args)
    off = passes.run_passes(p, [n for n in passes.DEFAULT_PASSES if n != "gemm_views"])
    assert "transpose" in prims(off)
    # a permutation that splits a matrix dim across strides stays a copy (rows = (i, j) with j
    # outer in memory): still correct
    x = RNG.standard_normal((6, 4, 5)).astype(np.float32)
    w = RNG.standard_normal((24, 7)).astype(np.float32)
    g = lambda x, w: jnp.reshape(jnp.transpose(x, (2, 1, 0)), (5, 24)) @ w  # noqa: E731
    p2 = ember.make_program(g)(x, w)
    q2 = passes.run_passes(p2)
    validate(q2)
    np.testing.assert_allclose(run_numpy(q2, consts(q2), [x, w])[0], run_numpy(p2, consts(p2), [x, w])[0],
                               rtol=1e-5, atol=1e-5)


def test_strided_gemm_primitive_reference():
    """``views``: op(a) and op(b) read through strides, the result scattered into a permuted array."""
    x = RNG.standard_normal((2, 5, 3, 4)).astype(np.float32)  # [b, t, h, d]
    y = RNG.standard_normal((2, 6, 3, 4)).astype(np.float32)  # [b, s, h, d]
    # S[b, h] = X[b, :, h, :] @ Y[b, :, h, :]^T, written as [b, h, t, s] (plain) ...
    va = (((2, 60), (3, 4)), (5, 12), (4, 1))
    vb = (((2, 72), (3, 4)), (4, 1), (6, 12))
    s = np.asarray(gemm(x, y, views=(va, vb, ((2, 3, 5, 6), ((6, 30),), 6))))
    want = np.einsum("bthd,bshd->bhts", x.astype(np.float64), y)
    np.testing.assert_allclose(s, want, rtol=1e-5, atol=1e-5)
    # ... and as [b, t, h, s] (the result's rows strided by h * s)
    s2 = np.asarray(gemm(x, y, alpha=2.0, views=(va, vb, ((2, 5, 3, 6), ((2, 90), (3, 6)), 18))))
    np.testing.assert_allclose(s2, 2 * want.transpose(0, 2, 1, 3), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# native code
# ---------------------------------------------------------------------------------------------


@pytest.fixture(params=["kernel", "blas32", "blas64"])
def product(request, monkeypatch):
    """The dtype, with float32 products on the small-GEMM kernel or on BLAS (its size rule off)."""
    if request.param == "kernel":
        gemm_kernel.load(wait=True)
    if request.param == "blas32":
        monkeypatch.setattr(gemm_library, "use_small_sgemm", lambda m, n, k: False)
    return np.float64 if request.param == "blas64" else np.float32


def _tol(dtype):
    return (1e-10, 1e-10) if dtype == np.float64 else (2e-5, 2e-5)


@requires_cc
@pytest.mark.parametrize("softmax", [False, True])
@pytest.mark.parametrize("shape", [(2, 24, 20, 32, 4), (3, 16, 16, 24, 3), (1, 9, 7, 8, 2)])
def test_native_attention(product, softmax, shape):
    b, t, s, hd, h = shape
    args = qkv(b, t, s, hd, product)
    fn = ember.jit(lambda q, k, v: attention(q, k, v, h=h, softmax=softmax), backend="native", **UNFUSED)
    rtol, atol = _tol(product)
    np.testing.assert_allclose(np.asarray(fn(*args)), attention_numpy(*args, h=h, softmax=softmax),
                               rtol=rtol, atol=atol)
    exe = fn.lower(*args).executable
    if exe.fallback_reason is None:
        assert all(s.kind != "kernel" or "transpose" not in s.ir.describe() for s in exe.schedule.steps)


@requires_cc
@pytest.mark.parametrize("perm", [(0, 2, 1, 3), (2, 0, 1, 3), (0, 2, 3, 1)])
def test_native_result_written_permuted(product, perm):
    """A batched product whose result is only transposed (and reshaped) writes it in place."""
    x = RNG.standard_normal((3, 4, 10, 6)).astype(product)
    y = RNG.standard_normal((3, 4, 6, 8)).astype(product)

    def f(x, y):
        return jnp.reshape(jnp.transpose(x @ y, perm), (-1,)) * 2.0

    fn = ember.jit(f, backend="native")
    want = (2 * np.transpose(x.astype(np.float64) @ y, perm)).reshape(-1)
    rtol, atol = _tol(product)
    np.testing.assert_allclose(np.asarray(fn(x, y)), want, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# written-out attention, unfused
# ---------------------------------------------------------------------------------------------


@requires_cc
def test_unfused_attention_matches_numpy(product):
    args = qkv(2, 24, 20, 32, product)
    fn = ember.jit(lambda q, k, v: attention(q, k, v), backend="native", **UNFUSED, num_threads=1)
    exe = fn.lower(*args).executable
    assert not any(e.prim.name == "attention" for e in exe.optimized.eqns)
    exe.plan.check()
    rtol, atol = _tol(product)
    np.testing.assert_allclose(np.asarray(fn(*args)), attention_numpy(*args), rtol=rtol, atol=atol)


@requires_cc
def test_unfused_attention_with_projections_and_nan_rows():
    """Projections around the two products; a NaN in a score row gives a NaN row, as step by
    step."""
    b, t, hd, h = 2, 16, 24, 3
    x = RNG.standard_normal((b, t, hd)).astype(np.float32)
    ws = [RNG.standard_normal((hd, hd)).astype(np.float32) / 5 for _ in range(3)]

    def f(x, wq, wk, wv):
        q, k = x @ wq, x @ wk
        s = (heads(q, b, t, h, 8) @ jnp.swapaxes(heads(k, b, t, h, 8), -1, -2)) * 0.3
        e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        p = e / jnp.sum(e, axis=-1, keepdims=True)
        return p @ heads(jnp.tanh(x @ wv), b, t, h, 8)

    fn = ember.jit(f, backend="native", **UNFUSED, num_threads=1)
    fn.lower(x, *ws).executable.plan.check()
    ref = ember.jit(f, backend="numpy")
    np.testing.assert_allclose(np.asarray(fn(x, *ws)), np.asarray(ref(x, *ws)), rtol=2e-5, atol=2e-5)
    xn = x.copy()
    xn[1, 3, 5] = np.nan
    got, want = np.asarray(fn(xn, *ws)), np.asarray(ref(xn, *ws))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@requires_cc
def test_unfused_attention_with_scores_used_elsewhere_and_threads():
    args = qkv(2, 12, 12, 16)

    def f(q, k, v):
        b, t, hd = q.shape
        s = heads(q, b, t, 2, 8) @ jnp.swapaxes(heads(k, b, t, 2, 8), -1, -2)
        p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        return p @ heads(v, b, t, 2, 8), jnp.sum(s)

    fn = ember.jit(f, backend="native", **UNFUSED, num_threads=1)
    got = fn(*args)
    want = ember.jit(f, backend="numpy")(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-4)
    two = ember.jit(lambda q, k, v: attention(q, k, v, h=2), backend="native", **UNFUSED, num_threads=2)
    np.testing.assert_allclose(np.asarray(two(*args)), attention_numpy(*args, h=2), rtol=2e-5, atol=2e-5)


def test_transformer_block_schedule_has_no_copies():
    """The benchmark's block with attention unfused: the head transposes are strides."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[3] / "benchmarks" / "bench_transformer.py"
    spec = importlib.util.spec_from_file_location("bench_transformer_for_test", path)
    bt = importlib.util.module_from_spec(spec)
    import sys

    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(bt)
    finally:
        sys.path.remove(str(path.parent))
    b, t, d = 2, 32, 64
    x = RNG.standard_normal((b, t, d)).astype(np.float32)
    args = [x, *bt.params(d)]
    fn = ember.jit(bt.block, backend="native", **UNFUSED, num_threads=1)
    exe = fn.lower(*args).executable
    if exe.fallback_reason is not None:
        pytest.skip(exe.fallback_reason)
    assert not any(s.kind == "kernel" and s.ir.describe() in ("reshape,transpose", "transpose,reshape")
                   for s in exe.schedule.steps)
    np.testing.assert_allclose(np.asarray(fn(*args)), bt.block_numpy(*args), rtol=1e-4, atol=1e-4)
    assert math.isfinite(float(np.asarray(fn(*args)).sum()))


@requires_cc
def test_unfused_attention_with_broadcast_mask():
    """The row kernel also reads an additive mask broadcast over heads (its outer loops do not
    merge into one)."""
    b, t, hd, h = 2, 13, 24, 3
    q, k, v = qkv(b, t, t, hd)
    mask = np.where(RNG.random((b, t, t)) < 0.3, -1e9, 0.0).astype(np.float32)

    def f(q, k, v, mask):
        s = (heads(q, b, t, h, 8) @ jnp.swapaxes(heads(k, b, t, h, 8), -1, -2)) * 0.4
        s = s + jnp.reshape(mask, (b, 1, t, t))
        e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
        return (e / jnp.sum(e, axis=-1, keepdims=True)) @ heads(v, b, t, h, 8)

    fn = ember.jit(f, backend="native", **UNFUSED, num_threads=1)
    fn.lower(q, k, v, mask).executable.plan.check()
    want = ember.jit(f, backend="numpy")(q, k, v, mask)
    np.testing.assert_allclose(np.asarray(fn(q, k, v, mask)), np.asarray(want), rtol=2e-5, atol=2e-5)


@requires_cc
@pytest.mark.parametrize("seed", range(16))
def test_random_transposed_operands_and_results(seed):
    """Random permutations of 4-D values as the left operand of a batched product (two batch dims,
    rows, contraction) and of its reshaped result: the rewrite is exact where it applies (a unit
    stride in each matrix) and the copies stay where it does not."""
    rng = np.random.default_rng(100 + seed)
    b1, b2, m, k, n = (int(v) for v in rng.integers(1, 5, 5))
    m, k = m + 1, k + 1
    perm_a = tuple(int(i) for i in rng.permutation(4))
    perm_o = tuple(int(i) for i in rng.permutation(4))
    logical = (b1, b2, m, k)
    stored = tuple(logical[p] for p in np.argsort(perm_a))  # x.transpose(perm_a) is [b1, b2, m, k]
    x = rng.standard_normal(stored).astype(np.float32)
    y = rng.standard_normal((b1 * b2, k, n)).astype(np.float32)

    def f(x, y):
        a = jnp.reshape(jnp.transpose(x, perm_a), (b1 * b2, m, k))
        out = jnp.reshape(a @ y, (b1, b2, m, n))
        return jnp.transpose(out, perm_o) * 1.5

    fn = ember.jit(f, backend="native")
    want = 1.5 * np.transpose((np.transpose(x, perm_a).reshape(b1 * b2, m, k).astype(np.float64) @ y)
                              .reshape(b1, b2, m, n), perm_o)
    np.testing.assert_allclose(np.asarray(fn(x, y)), want, rtol=2e-5, atol=2e-5)
    q = passes.run_passes(ember.make_program(f)(x, y))
    validate(q)
    np.testing.assert_allclose(run_numpy(q, consts(q), [x, y])[0], want, rtol=2e-5, atol=2e-5)


@requires_cc
def test_strided_blas_products_with_size_one_axes(capfd):
    """Seed 33, case 2957 of the fuzzer: the float64 Hessian of a scan over ``grad`` of a 1x1
    Cholesky runs products of shapes like [2, 1] x [1, 1] on BLAS through strided views, whose
    leading dimensions along size-1 axes were the views' own strides (1) where BLAS wants at least
    the stored rows: OpenBLAS refused the call ("parameter number 8 had an illegal value") and left
    C as it was. The Hessian of sum_i x_i / sqrt(x_i^2 + 9) is diagonal, -27 x / (x^2 + 9)^(5/2)."""
    from ember import lax

    def f(x):
        return jnp.linalg.cholesky(x @ jnp.swapaxes(x, -1, -2) + 9 * jnp.eye(x.shape[-2], dtype=x.dtype))

    g = ember.grad(lambda x: jnp.sum(f(x)))
    s = lambda x: lax.scan(lambda c, xi: (c + 1, g(xi)), 0, x)[1]  # noqa: E731
    x = np.array([1.0, -2.5]).reshape(2, 1, 1)  # float64 (the suite runs with x64 on)
    h = np.asarray(ember.jit(ember.hessian(lambda x: jnp.sum(s(x))))(x)).reshape(2, 2)
    want = np.diag(-27 * x.ravel() / (x.ravel() ** 2 + 9) ** 2.5)
    np.testing.assert_allclose(h, want, rtol=1e-12, atol=1e-15)
    assert "illegal value" not in capfd.readouterr().err
