"""The ``gemm`` + bias/ReLU epilogue fusion (:mod:`ember._src.native.scheduling.gemm_epilogue`) through
``ember.jit``: which patterns fuse (one ``gemm`` step, no separate kernel), the results against
NumPy (float64 products) on the kernel path and on the BLAS path with the epilogue as a loop, and
the patterns that must not fuse still computing the right values."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.emit import gemm_kernel
from ember._src.native.runtime import gemm_library
from ember._src.native.scheduling.gemm_epilogue import GemmEpilogue
from tests.native.conftest import requires_cc

pytestmark = requires_cc


@pytest.fixture(autouse=True)
def kernel_loaded():
    """The kernel library loaded, so that generated programs call it rather than BLAS."""
    gemm_kernel.load(wait=True)


def _relu(x):
    return np.where(np.isnan(x) | (x > 0), x, 0.0)


PATTERNS = {
    "bias_relu": (lambda x, w, b: jnp.maximum(lax.dot(x, w) + b, 0.0),
                  lambda x, w, b: _relu(x @ w + b)),
    "relu_bias_swapped": (lambda x, w, b: jnp.maximum(0.0, b + lax.dot(x, w)),
                          lambda x, w, b: _relu(x @ w + b)),
    "bias": (lambda x, w, b: lax.dot(x, w) + b, lambda x, w, b: x @ w + b),
    "bias_first": (lambda x, w, b: b + lax.dot(x, w), lambda x, w, b: x @ w + b),
    "relu_only": (lambda x, w, b: jnp.maximum(lax.dot(x, w), 0.0), lambda x, w, b: _relu(x @ w)),
    # torch.relu as exported: select_n(v <= 0, v, 0) (NaN kept: v <= 0 is false)
    "bias_select_relu": (lambda x, w, b: (lambda v: jnp.where(v <= 0.0, 0.0, v))(lax.dot(x, w) + b),
                         lambda x, w, b: _relu(x @ w + b)),
}


def _fused_steps(fn, *args):
    exe = fn.lower(*args).executable
    if exe.fallback_reason is not None:
        return None, exe
    return [s for s in exe.schedule.steps if s.kind == "gemm" and s.epilogue is not None], exe


def _check(fn, ref, shapes, rng, nan=True):
    for m, n, k in shapes:
        x = rng.standard_normal((m, k)).astype(np.float32)
        if nan and m > 1:
            x[1, 0] = np.nan
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        got = np.asarray(fn(x, w, b))
        want = ref(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5, err_msg=f"m={m} n={n} k={k}")
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


SHAPES = [(2, 2, 1), (3, 7, 5), (5, 9, 17), (17, 24, 256), (33, 25, 257), (8, 41, 513), (64, 100, 70)]


@pytest.mark.parametrize("name", list(PATTERNS))
def test_patterns_fuse_and_match_numpy(name):
    f, ref = PATTERNS[name]
    fn = ember.jit(f, backend="native")
    _check(fn, ref, SHAPES, np.random.default_rng(0))
    m, n, k = 32, 48, 64
    args = [np.ones((m, k), np.float32), np.ones((k, n), np.float32), np.ones(n, np.float32)]
    fused, exe = _fused_steps(fn, *args)
    if fused is None or gemm_kernel.kernel_symbol() is None:
        pytest.skip("native backend or kernel unavailable here")
    assert len(fused) == 1, str(exe.schedule)
    epi = fused[0].epilogue
    assert isinstance(epi, GemmEpilogue)
    assert epi.relu == ("relu" in name) and (epi.bias is None) == (name == "relu_only")
    assert exe.schedule.count("kernel") == 0, str(exe.schedule)


def _image_layer(rng, nhw):
    """An NHWC image of 24 channels (a NaN at (0, 1, 2, 3)), a 24 x 40 weight, a bias and a
    residual of 40 channels, float32."""
    x = rng.standard_normal((*nhw, 24)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    w = (rng.standard_normal((24, 40)) / 5).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    return x, w, b, rng.standard_normal((*nhw, 40)).astype(np.float32)


@pytest.mark.parametrize("mode", ["kernel", "blas"])
@pytest.mark.parametrize("residual", ["argument", "intermediate"])
def test_residual_then_bias_relu(monkeypatch, residual, mode):
    """``relu(x @ w + b + r)`` read as an NHWC image (rows of ``n``), then the next product: the first
    accumulates into ``r`` (``absorb_residual``; in r's buffer when r is an intermediate dying there),
    bias and ReLU in its store, no kernel after it; on the kernel and on the BLAS path (epilogue as a
    loop)."""
    monkeypatch.setattr(gemm_library, "BLAS_ONLY", mode == "blas")
    rng = np.random.default_rng(3)
    x, w, b, r = _image_layer(rng, (2, 5, 4))

    def f(x, w, b, r):
        r = r * 2.0 if residual == "intermediate" else r
        y = jnp.reshape(lax.dot(jnp.reshape(x, (40, 24)), w), (2, 5, 4, 40)) + b + r
        return lax.dot(jnp.reshape(jnp.where(y <= 0.0, 0.0, y), (40, 40)), w2)  # the next layer
    w2 = (rng.standard_normal((40, 8)) / 6).astype(np.float32)
    fn = ember.jit(lambda *a: f(*a), backend="native")
    got = np.asarray(fn(x, w, b, r))
    r64 = r.astype(np.float64) * (2.0 if residual == "intermediate" else 1.0)
    h = (x.reshape(40, 24).astype(np.float64) @ w + b).reshape(2, 5, 4, 40) + r64
    want = _relu(h).reshape(40, 40) @ w2
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fused, exe = _fused_steps(fn, x, w, b, r)
    if fused is None or gemm_kernel.kernel_symbol() is None or mode == "blas":
        return
    assert len(fused) == 1 and fused[0].epilogue.relu and fused[0].epilogue.bias is not None, \
        str(exe.schedule)
    g = fused[0].eqns[0]
    assert len(g.inputs) == 3 and g.params["beta"] == 1.0 and g.params["c_dims"] == (0, 1)
    assert exe.schedule.count("kernel") == (residual == "intermediate"), str(exe.schedule)  # r * 2 only
    in_place = any(out == fused[0].outputs[0].id for _, out, _ in exe.plan.inplace)
    assert in_place == (residual == "intermediate"), str(exe.plan)


def test_mlp_blas_path_with_epilogue_loop(monkeypatch):
    """With the kernel never called (``BLAS_ONLY``), the fused steps run BLAS and then the epilogue
    as a loop: same results; and with the rule off (``gemm_epilogue=False``) the separate kernel."""

    def mlp(x, w1, b1, w2, b2):
        return lax.dot(jnp.maximum(lax.dot(x, w1) + b1, 0.0), w2) + b2

    rng = np.random.default_rng(1)
    x = rng.standard_normal((37, 130)).astype(np.float32)
    x[3, 5] = np.nan
    w1 = (rng.standard_normal((130, 70)) / 11).astype(np.float32)
    b1, b2 = rng.standard_normal(70).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    w2 = (rng.standard_normal((70, 9)) / 8).astype(np.float32)
    x64 = x.astype(np.float64)
    want = _relu(x64 @ w1 + b1) @ w2 + b2
    outs = {}
    for mode in ("kernel", "blas", "unfused"):
        monkeypatch.setattr(gemm_library, "BLAS_ONLY", mode == "blas")
        # a new function object per mode: jit of one function with the same options shares its
        # traces, and BLAS_ONLY is read when a program is generated
        fn = ember.jit(lambda *a: mlp(*a), backend="native", gemm_epilogue=mode != "unfused")
        got = np.asarray(fn(x, w1, b1, w2, b2))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5, err_msg=mode)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        fused, exe = _fused_steps(fn, x, w1, b1, w2, b2)
        if fused is not None and gemm_kernel.kernel_symbol() is not None:
            assert len(fused) == (0 if mode == "unfused" else 2), str(exe.schedule)
            assert ("dlsym((void *)0, \"" in exe.source) == (mode != "blas")
        outs[mode] = got
    np.testing.assert_allclose(outs["blas"], outs["unfused"], rtol=1e-6, atol=1e-6)


def test_patterns_that_do_not_fuse():
    """A bias along the columns, a product read twice, a product that is an output, and a ReLU
    with a non-zero bound stay separate kernels (and compute the right values)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((12, 20)).astype(np.float32)
    w = rng.standard_normal((20, 16)).astype(np.float32)
    bc = rng.standard_normal(12).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    cases = [
        (lambda x, w, b, bc: jnp.maximum(lax.dot(x, w) + bc[:, None], 0.0),
         lambda: np.maximum(x64 @ w64 + bc[:, None], 0.0)),
        (lambda x, w, b, bc: jnp.maximum(lax.dot(x, w) + b, 0.0) * lax.dot(x, w),
         lambda: np.maximum(x64 @ w64 + b, 0.0) * (x64 @ w64)),
        (lambda x, w, b, bc: (lax.dot(x, w), jnp.maximum(lax.dot(x, w) + b, 0.0)),
         lambda: (x64 @ w64, np.maximum(x64 @ w64 + b, 0.0))),
        (lambda x, w, b, bc: jnp.maximum(lax.dot(x, w) + b, 1.0),
         lambda: np.maximum(x64 @ w64 + b, 1.0)),
    ]
    for f, ref in cases:
        fn = ember.jit(f, backend="native")
        got, want = fn(x, w, b, bc), ref()
        got, want = (got, want) if isinstance(got, tuple) else ([got], [want])
        for g, r in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), r, rtol=1e-5, atol=1e-4)
        fused, exe = _fused_steps(fn, x, w, b, bc)
        if fused is not None:
            assert not fused, str(exe.schedule)


@pytest.mark.parametrize("other", ["strided_shortcut", "shares_zero", "reads_product"])
def test_epilogue_shared_with_a_strided_shortcut(other):
    """A ResNet stage's first block: ``y = relu(x @ w + b + r)`` (an NHWC image) feeds the next
    product and, taken at every second pixel, the strided shortcut's product. Fusion copies the cheap
    ``relu(. + b)`` into the slice's kernel too; the epilogue rule still fuses it into the product's
    store, and the slice kernel is rebuilt to read ``y`` (only a slice left in it). When the other
    reader uses the product itself (``reads_product``), nothing fuses. Both against float64 NumPy,
    with a NaN."""
    rng = np.random.default_rng(5)
    x, w, b, r = _image_layer(rng, (2, 6, 6))
    w2 = (rng.standard_normal((40, 8)) / 6).astype(np.float32)
    w3 = (rng.standard_normal((40, 16)) / 6).astype(np.float32)

    def f(x, w, b, r):
        h = jnp.reshape(lax.dot(jnp.reshape(x, (72, 24)), w), (2, 6, 6, 40))
        z = jnp.zeros(h.shape, h.dtype)  # one zero for both ReLUs (shares_zero)
        y = jnp.where(h + b + r <= z, z, h + b + r)
        nxt = lax.dot(jnp.reshape(y, (72, 40)), w2)
        if other == "reads_product":
            return nxt, y[:, ::2, ::2, :] * 2.0 + h[:, ::2, ::2, :]
        if other == "shares_zero":  # the other reader's own ReLU reads the epilogue's zero
            return nxt, jnp.where(y - r <= z, z, y - r)[:, ::2, ::2, :]
        return nxt, lax.dot(jnp.reshape(y[:, ::2, ::2, :], (18, 40)), w3)

    fn = ember.jit(f, backend="native")
    got = [np.asarray(v) for v in fn(x, w, b, r)]
    h = (x.reshape(72, 24).astype(np.float64) @ w).reshape(2, 6, 6, 40)
    y = _relu(h + b + r)
    want = [y.reshape(72, 40) @ w2]
    want.append(y[:, ::2, ::2] * 2.0 + h[:, ::2, ::2] if other == "reads_product"
                else _relu(y - r)[:, ::2, ::2] if other == "shares_zero"
                else y[:, ::2, ::2].reshape(18, 40) @ w3)
    for g, wv in zip(got, want):
        np.testing.assert_allclose(g, wv, rtol=1e-5, atol=2e-5)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(wv))
    fused, exe = _fused_steps(fn, x, w, b, r)
    if fused is None or gemm_kernel.kernel_symbol() is None:
        return
    first = [s for s in fused if s.epilogue.relu]
    if other == "reads_product":
        assert not first, str(exe.schedule)
        return
    assert len(first) == 1 and first[0].epilogue.bias is not None, str(exe.schedule)
    kernels = [s for s in exe.schedule.steps if s.kind == "kernel"]
    assert len(kernels) == 1 and first[0].outputs[0] in kernels[0].inputs, str(exe.schedule)
    assert "slice" in {e.prim.name for e in kernels[0].eqns}
    if other == "strided_shortcut":
        assert [e.prim.name for e in kernels[0].eqns] == ["slice"], str(exe.schedule)


@pytest.mark.parametrize("mode", ["kernel", "blas"])
def test_dynamic_batch_epilogues(monkeypatch, mode):
    """A two-layer MLP whose batch is a named dynamic axis (one compile): both products take their
    epilogue (the first weight a constant on the prepacked entry, the second an argument), the
    kernel's row rule is tested per call, and a call outside it (one row; every call on the BLAS
    path) runs BLAS and the epilogue as a loop. Each batch matches the static-shape program bit
    for bit and float64 NumPy, NaN kept."""
    monkeypatch.setattr(gemm_library, "BLAS_ONLY", mode == "blas")
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((130, 70)) / 11).astype(np.float32)
    b1, b2 = rng.standard_normal(70).astype(np.float32), rng.standard_normal(9).astype(np.float32)

    def mlp(x, w2):
        return lax.dot(jnp.maximum(lax.dot(x, w1) + b1, 0.0), w2) + b2

    w2 = (rng.standard_normal((70, 9)) / 8).astype(np.float32)
    dyn = ember.jit(lambda x, w2: mlp(x, w2), backend="native", dynamic_axes={"x": ("batch", None)})
    for m in (1, 2, 5, 64, 700):
        x = rng.standard_normal((m, 130)).astype(np.float32)
        x[m // 2, 5] = np.nan
        got = np.asarray(dyn(x, w2))
        want = _relu(x.astype(np.float64) @ w1 + b1) @ w2 + b2
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5, err_msg=f"batch {m}")
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        static = ember.jit(lambda x, w2: mlp(x, w2), backend="native")
        np.testing.assert_array_equal(got.view(np.int32), np.asarray(static(x, w2)).view(np.int32))
    assert dyn.cache_info()["compiles"] == 1
    from ember._src.native import specialize
    sym = specialize.symbolic_executable(dyn.lower(x, w2).program)
    if sym.fallback_reason is not None or gemm_kernel.kernel_symbol() is None:
        return
    fused = [s for s in sym.schedule.steps if s.kind == "gemm" and s.epilogue is not None]
    assert len(fused) == 2 and sym.schedule.count("kernel") == 0, str(sym.schedule)
    assert [s.epilogue.relu for s in fused] == [True, False], str(sym.schedule)
