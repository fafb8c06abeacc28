"""The convolution + bias/ReLU epilogue fusion (:mod:`ember._src.native.scheduling.conv_epilogue`)
through ``ember.jit``: on each route of the convolution step (direct blocks, flat blocks, Winograd,
Winograd on stride phases, grouped, a last feature panel only partly used), the fused step's values
are those of the unfused program bit for bit and match a float64 NumPy convolution, NaN and
infinities included; what does not fuse (features not last, a depthwise convolution, the output
read twice) still computes the right values."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.emit import conv as conv_emit
from ember._src.native.emit import conv_winograd
from tests.native.conftest import requires_cc

pytestmark = requires_cc


def _relu(x):
    return np.where(np.isnan(x) | (x > 0), x, 0.0)


def _conv_ref(x, w, stride, pad, groups):
    """NHWC input, HWIO kernel, float64, zero padding."""
    x = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    kh, kw, cg, o = w.shape
    n, h, wd, c = x.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    og = o // groups
    out = np.zeros((n, oh, ow, o))
    for g in range(groups):
        xs = x[..., g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, i:i + stride * oh:stride, j:j + stride * ow:stride, :]
                with np.errstate(invalid="ignore"):
                    wk = w[i, j, :, g * og:(g + 1) * og].astype(np.float64)
                    out[..., g * og:(g + 1) * og] += patch @ wk
    return out


# (name, N, H, W, C, O, kernel, stride, pad, groups): the route the geometry takes is checked below
CASES = [
    ("blocks", 2, 30, 61, 8, 40, 3, 1, 1, 1),        # wide image, few features: direct blocks
    ("flat", 2, 20, 20, 8, 40, 5, 2, 2, 1),          # narrow strided output: flat blocks
    ("winograd", 1, 14, 14, 32, 64, 3, 1, 1, 1),
    ("winograd_phases", 1, 32, 32, 8, 40, 3, 2, 1, 1),
    ("grouped", 1, 20, 50, 16, 40, 3, 1, 1, 2),
    ("stem", 1, 40, 40, 3, 64, 7, 2, 3, 1),
]


def _route(x, w, stride, pad, groups):
    f = lambda x, w: lax.conv_general_dilated(  # noqa: E731
        x, w, (stride, stride), [(pad, pad)] * 2, dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=groups)
    e = next(e for e in ember.make_program(f)(x, w).eqns if e.prim.name == "conv")
    g = conv_emit._Geo(e)
    return "winograd_phases" if conv_winograd.chosen(g) else "winograd" if g.winograd else \
        "flat" if g.flat else "blocks"


@pytest.mark.parametrize("form", ["bias_relu", "bias", "select_relu"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_conv_epilogue_routes(case, form):
    name, n, h, wd, c, o, k, stride, pad, groups = case
    rng = np.random.default_rng(abs(hash((name, form))) % 2**32)
    x = rng.standard_normal((n, h, wd, c)).astype(np.float32)
    x[0, 1, 2, 0] = np.nan
    x[0, h - 1, wd - 2, c - 1] = np.inf
    w = (rng.standard_normal((k, k, c // groups, o)) / np.sqrt(k * k * c)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    b[:2] = [0.0, -0.0]

    def f(x, w, b):
        y = lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad)] * 2,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=groups)
        if form == "bias":
            return y + b
        if form == "select_relu":
            return jnp.where(y + b <= 0.0, 0.0, y + b)
        return jnp.maximum(y + b, 0.0)

    assert _route(x, w, stride, pad, groups) == {"grouped": "blocks", "stem": "flat"}.get(name, name)
    fused = ember.jit(f, backend="native")
    plain = ember.jit(lambda *a: f(*a), backend="native", gemm_epilogue=False)
    got, base = np.asarray(fused(x, w, b)), np.asarray(plain(x, w, b))
    want = _conv_ref(x, w, stride, pad, groups) + b
    want = want if form == "bias" else _relu(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got.view(np.int32), base.view(np.int32))
    exe = fused.lower(x, w, b).executable
    if exe.fallback_reason is None:
        steps = [s for s in exe.schedule.steps if s.kind == "call" and s.epilogue is not None]
        assert len(steps) == 1 and steps[0].epilogue.relu == (form != "bias"), str(exe.schedule)
        assert exe.schedule.count("kernel") == 0, str(exe.schedule)


def test_conv_epilogue_not_fused():
    """Features not last (NCHW output), a depthwise convolution, and an output read by two kernels
    keep their separate kernels, with the right values."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 9, 10, 8)).astype(np.float32)
    w = rng.standard_normal((3, 3, 8, 16)).astype(np.float32) / 9
    wd = rng.standard_normal((3, 3, 1, 8)).astype(np.float32) / 3
    b = rng.standard_normal(16).astype(np.float32)
    bd = rng.standard_normal(8).astype(np.float32)
    pads = [(1, 1)] * 2
    y64 = _conv_ref(x, w, 1, 1, 1)
    yd64 = _conv_ref(x, wd, 1, 1, 8)
    cases = [
        (lambda x: jnp.maximum(lax.conv_general_dilated(x, w, (1, 1), pads, dimension_numbers=(
            "NHWC", "HWIO", "NCHW")) + b[:, None, None], 0.0),
         _relu(y64 + b).transpose(0, 3, 1, 2)),
        (lambda x: jnp.maximum(lax.conv_general_dilated(x, wd, (1, 1), pads, dimension_numbers=(
            "NHWC", "HWIO", "NHWC"), feature_group_count=8) + bd, 0.0), _relu(yd64 + bd)),
        (lambda x: (lambda y: (jnp.maximum(y + b, 0.0), y * 2.0))(lax.conv_general_dilated(
            x, w, (1, 1), pads, dimension_numbers=("NHWC", "HWIO", "NHWC"))), (_relu(y64 + b), y64 * 2.0)),
    ]
    for f, want in cases:
        fn = ember.jit(f, backend="native")
        got = fn(x)
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for g_, w_ in zip(got, want):
            np.testing.assert_allclose(np.asarray(g_), w_, rtol=1e-4, atol=1e-4)
        exe = fn.lower(x).executable
        if exe.fallback_reason is None:
            assert not [s for s in exe.schedule.steps if s.kind == "call" and s.epilogue is not None], \
                str(exe.schedule)


def test_stem_conv_bias_relu_then_max_pool():
    """A ResNet stem in channels-last order: 7x7 stride-2 convolution, a bias add, a ReLU and a 3x3
    stride-2 max pool with padding 1. The bias and ReLU go into the convolution (the ReLU from the
    kernel it shared with the pool's padding), and the padding is read inside the pool's kernel (one
    kernel: pad, slices, max), not written out first. Against float64 NumPy with NaN, +-Inf and a
    negative zero in the input."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 30, 30, 3)).astype(np.float32)
    x[0, 3, 4, 1], x[1, 10, 10, 0], x[1, 20, 5, 2], x[0, 0, 0, 0] = np.nan, np.inf, -np.inf, -0.0
    w = (rng.standard_normal((7, 7, 3, 40)) / 12).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)

    def f(x, w, b):
        y = lax.conv_general_dilated(x, w, (2, 2), [(3, 3)] * 2, dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = y + b
        y = jnp.where(y <= 0.0, 0.0, y)
        return lax.reduce_window(y, -np.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                                 ((0, 0), (1, 1), (1, 1), (0, 0)))

    fn = ember.jit(f, backend="native")
    got = np.asarray(fn(x, w, b))
    with np.errstate(invalid="ignore"):
        y = _relu(_conv_ref(x, w, 2, 3, 1) + b)
    yp = np.pad(y, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
    oh = (y.shape[1] - 1) // 2 + 1
    want = np.maximum.reduce([yp[:, i:i + 2 * oh:2, j:j + 2 * oh:2] for i in range(3) for j in range(3)])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    assert np.isnan(want).any() and np.isposinf(want).any()
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    plain = ember.jit(lambda *a: f(*a), backend="native", gemm_epilogue=False)
    np.testing.assert_array_equal(got.view(np.int32), np.asarray(plain(x, w, b)).view(np.int32))
    exe = fn.lower(x, w, b).executable
    if exe.fallback_reason is not None:
        return
    conv = [s for s in exe.schedule.steps if s.kind == "call"]
    assert len(conv) == 1 and conv[0].epilogue.relu and conv[0].epilogue.bias is not None, str(exe.schedule)
    kernels = [s for s in exe.schedule.steps if s.kind == "kernel"]
    assert len(kernels) == 1 and {e.prim.name for e in kernels[0].eqns} >= {"pad", "max"}, str(exe.schedule)
    assert "em_blendf(" in exe.source


# (name, C, O, kernel, stride, pad, (n, h, w) bindings): each compiled once with symbolic batch,
# height and width; the bindings run different routes per call
SYMBOLIC_CASES = [
    # output images of at most 64 pixels: the patches' GEMM (prepacked constant kernel); larger: blocks
    # or flat blocks, chosen per call
    ("gemm_or_direct", 12, 40, 3, 2, 1, [(1, 15, 17), (2, 40, 37), (3, 9, 8), (1, 61, 12)]),
    ("1x1", 16, 24, 1, 1, 0, [(2, 5, 7), (1, 30, 11), (3, 4, 3)]),  # a product (conv_gemm)
    ("winograd", 16, 32, 3, 1, 1, [(1, 14, 14), (2, 9, 23), (1, 1, 1), (1, 30, 7)]),
    ("stem", 3, 64, 7, 2, 3, [(1, 40, 40), (2, 19, 33), (1, 5, 5)]),
]


@pytest.mark.parametrize("form", ["bias_relu", "bias"])
@pytest.mark.parametrize("case", SYMBOLIC_CASES, ids=[c[0] for c in SYMBOLIC_CASES])
def test_conv_epilogue_symbolic_sizes(case, form):
    """Named dynamic batch, height and width (one compile): the fused step's values equal the unfused
    program's bit for bit at every binding, whichever route the call takes (the patches' GEMM applies
    the epilogue in the GEMM kernel's store), and match float64 NumPy with NaN, infinities and a
    negative-zero bias."""
    from ember._src.native import specialize
    from ember._src.native.emit import gemm_kernel

    if not gemm_kernel.load(wait=True):
        pytest.skip("ember's GEMM kernel library does not run on this machine")
    name, c, o, k, stride, pad, sizes = case
    rng = np.random.default_rng(abs(hash((name, form, "sym"))) % 2**32)
    w = (rng.standard_normal((k, k, c, o)) / np.sqrt(k * k * c)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    b[:2] = [0.0, -0.0]

    def f(x, b):
        y = lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad)] * 2,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC")) + b
        return y if form == "bias" else jnp.maximum(y, 0.0)

    axes = {"x": ("n", "h", "w", None)}
    fused = ember.jit(f, backend="native", dynamic_axes=axes)
    plain = ember.jit(lambda x, b: f(x, b), backend="native", dynamic_axes=axes, gemm_epilogue=False)
    for n, h, wd in sizes:
        x = rng.standard_normal((n, h, wd, c)).astype(np.float32)
        x[0, h // 2, wd - 1, 0] = np.nan
        x[-1, 0, 0, c - 1] = np.inf
        got = np.asarray(fused(x, b))
        np.testing.assert_array_equal(got.view(np.int32), np.asarray(plain(x, b)).view(np.int32))
        with np.errstate(invalid="ignore"):
            want = _conv_ref(x, w, stride, pad, 1) + b
        want = want if form == "bias" else _relu(want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        with np.errstate(invalid="ignore"):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert fused.cache_info()["compiles"] == 1
    sym = specialize.symbolic_executable(fused.lower(x, b).program)
    assert sym.fallback_reason is None, sym.fallback_reason
    steps = [s for s in sym.schedule.steps if s.kind != "alias"]
    # a 1x1 is a product at symbolic sizes too (conv_gemm), its epilogue in the GEMM's store
    kind = "gemm" if name == "1x1" else "call"
    assert [s.kind for s in steps] == [kind] and steps[0].epilogue.relu == (form == "bias_relu"), \
        str(sym.schedule)
    assert steps[0].epilogue.bias is not None
