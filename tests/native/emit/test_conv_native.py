"""The ``conv`` primitive and its native call step (native/emit/conv.py, csrc/conv.h): against a
float64 NumPy reference written here (explicit loops over the kernel taps of the zero-padded input,
in the operands' own layouts) over edge sizes (1x1 images, kernels larger than the input, odd
sizes, one channel, strides above the kernel, dilation, cropping pads), NHWC / NCHW / mixed
layouts, groups 1, 2 and depthwise, float32 / float64, NaN / Inf, an empty batch; the program runs
the conv call step (no im2col slices, no fallback); gradients against finite differences and JAX;
vmap; one compile across batch sizes; the workspace stays far below an im2col buffer."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import ember
from ember import lax
from ember._src.native.emit import conv_fft
from ember.test_util import check_grads
from tests.native.conftest import requires_cc
from tests.native.util import run_with_call_step

pytestmark = requires_cc
RNG = np.random.default_rng(20)


def ref(x, w, strides, padding, dilation, layouts, groups):
    """float64 reference:
    ``out[n, o, y, x] = sum_{c, i, j} xpad[n, g(o) Cg + c, y s + i d, x s + j d] w[o, c, i, j]``."""
    lhs, rhs, out = layouts
    s0, s1 = (a for a in rhs if a not in "OI")  # spatial axes in the kernel's order (strides, pads)
    xc = np.transpose(np.asarray(x, np.float64), [lhs.index(a) for a in "NC" + s0 + s1])
    wc = np.transpose(np.asarray(w, np.float64), [rhs.index(a) for a in "OI" + s0 + s1])
    N, C, H, W = xc.shape
    O, Cg, KH, KW = wc.shape
    (sh, sw), (dh, dw) = strides, dilation
    (hl, hh), (wl, wh) = padding
    big = np.zeros((N, C, H + abs(hl) + abs(hh), W + abs(wl) + abs(wh)))
    big[:, :, abs(hl):abs(hl) + H, abs(wl):abs(wl) + W] = xc
    xp = big[:, :, abs(hl) - hl:abs(hl) + H + hh, abs(wl) - wl:abs(wl) + W + wh]  # pads / crops applied
    OH = max(0, (xp.shape[2] - (KH - 1) * dh - 1) // sh + 1)
    OW = max(0, (xp.shape[3] - (KW - 1) * dw - 1) // sw + 1)
    y = np.zeros((N, O, OH, OW))
    Og = O // groups
    for o in range(O):
        g = o // Og
        for i in range(KH):
            for j in range(KW):
                patch = xp[:, g * Cg:(g + 1) * Cg, i * dh:i * dh + (OH - 1) * sh + 1:sh,
                           j * dw:j * dw + (OW - 1) * sw + 1:sw]
                y[:, o] += np.einsum("nchw,c->nhw", patch, wc[o, :, i, j])
    return np.transpose(y, [("NC" + s0 + s1).index(a) for a in out])


def shape_of(layout, **dims):
    return tuple(dims[a] for a in layout)


def operands(N, C, H, W, O, KH, KW, groups, layouts, dtype):
    x = RNG.standard_normal(shape_of(layouts[0], N=N, C=C, H=H, W=W)).astype(dtype)
    w = RNG.standard_normal(shape_of(layouts[1], O=O, I=C // groups, H=KH, W=KW)).astype(dtype)
    return x, w


def conv_fn(strides, padding, dilation, layouts, groups):
    return lambda x, w: lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=dilation,
                                                 dimension_numbers=layouts, feature_group_count=groups)


def run_native(f, *args):
    """``f`` jitted natively; asserts the program runs one conv call step (no im2col, no fallback)."""
    out, exe = run_with_call_step(f, "conv", *args)
    assert not any(e.prim.name in ("concatenate", "dot_general") for e in exe.optimized.eqns)
    assert "em_cv_" in exe.source
    return out


def tol(dtype, K=16):
    """Tolerances for sums of ``K`` products of standard normal values."""
    eps = 1e-6 if np.dtype(dtype) == np.float32 else 1e-14
    return dict(rtol=10 * eps, atol=eps * max(K, 16))


NHWC = ("NHWC", "HWIO", "NHWC")
NCHW = ("NCHW", "OIHW", "NCHW")
CASES = [
    # N, C, H, W, O, KH, KW, strides, padding, dilation, groups, layouts
    (2, 16, 32, 32, 32, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, NHWC),  # interior and edge blocks
    (1, 64, 14, 14, 64, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, NHWC),
    (2, 3, 23, 21, 40, 7, 7, (2, 2), ((3, 3), (3, 3)), (1, 1), 1, NHWC),  # stem-like, odd sizes, O % NR
    (2, 8, 17, 19, 20, 1, 1, (1, 1), ((0, 0), (0, 0)), (1, 1), 1, NHWC),  # 1x1: a plain product
    (2, 8, 17, 19, 20, 1, 1, (2, 2), ((0, 0), (0, 0)), (1, 1), 1, NCHW),  # strided 1x1 downsample
    (1, 5, 1, 1, 3, 1, 1, (1, 1), ((0, 0), (0, 0)), (1, 1), 1, NHWC),  # 1x1 image
    (2, 4, 1, 1, 6, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, NHWC),  # kernel larger than the input
    (1, 1, 9, 11, 1, 3, 2, (1, 1), ((1, 0), (0, 1)), (1, 1), 1, NHWC),  # one channel
    (2, 6, 13, 12, 7, 2, 2, (3, 4), ((0, 0), (1, 0)), (1, 1), 1, NHWC),  # stride above the kernel
    (2, 6, 15, 16, 9, 3, 3, (1, 2), ((2, 2), (1, 3)), (2, 3), 1, NHWC),  # dilation (tap segments)
    (2, 6, 15, 16, 9, 3, 3, (1, 1), ((-1, 2), (2, -1)), (1, 1), 1, NHWC),  # cropping pads
    (2, 8, 18, 20, 12, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 2, NHWC),  # two groups
    (2, 8, 18, 20, 12, 3, 3, (2, 1), ((1, 1), (1, 1)), (1, 1), 2, NCHW),
    (2, 16, 20, 18, 16, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 16, NHWC),  # depthwise
    (2, 16, 20, 18, 16, 5, 5, (2, 2), ((2, 2), (2, 2)), (2, 1), 16, NCHW),
    (2, 4, 9, 10, 8, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 4, NHWC),  # channel multiplier 2
    (0, 4, 9, 10, 8, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, NHWC),  # empty batch
    (2, 6, 11, 13, 10, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, ("NCHW", "HWIO", "NHWC")),  # mixed
    (2, 6, 11, 13, 10, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, ("NHWC", "OIHW", "NCHW")),
    (2, 6, 11, 13, 10, 3, 2, (1, 1), ((1, 1), (1, 0)), (1, 1), 1, ("NWHC", "WHIO", "NHCW")),
    # Winograd F(2x2, 3x3): odd output sizes (partial tiles), VALID and cropping pads, NCHW, O % NR
    (2, 16, 15, 13, 24, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, NHWC),
    (1, 32, 9, 30, 40, 3, 3, (1, 1), ((0, 0), (0, 0)), (1, 1), 1, NCHW),
    (1, 20, 8, 7, 16, 3, 3, (1, 1), ((2, -1), (0, 2)), (1, 1), 1, NHWC),
    (3, 16, 2, 3, 17, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, ("NCHW", "HWIO", "NHWC")),
    # ... with a transformed kernel past L2 (over 1 MiB): chunks of several blocks of tiles per task,
    # one chunk per image (partial last block), two chunks per image (a partial last chunk)
    (2, 144, 13, 11, 136, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, NHWC),
    (1, 256, 17, 17, 144, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, ("NHWC", "OIHW", "NHWC")),
    # NCHW transposes: full register blocks and overlapping last blocks (40 channels, 37 columns)
    (2, 40, 13, 37, 36, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, NCHW),
    # NCHW output of the direct kernel through its per-task buffer: chunks spanning rows, O % NR
    (2, 20, 11, 45, 40, 5, 5, (1, 1), ((2, 2), (2, 2)), (1, 1), 1, NCHW),
    (1, 17, 9, 33, 19, 3, 3, (2, 2), ((1, 1), (1, 1)), (1, 1), 1, ("NHWC", "HWIO", "NCHW")),
    # images smaller than a register tile, several batches
    (5, 12, 4, 5, 40, 2, 2, (1, 1), ((0, 0), (1, 0)), (1, 1), 1, NHWC),
    (7, 6, 3, 3, 20, 3, 3, (1, 1), ((0, 0), (0, 0)), (1, 1), 2, NCHW),
    (1, 64, 6, 6, 16, 4, 4, (1, 1), ((1, 2), (1, 2)), (1, 1), 1, NHWC),  # K = 1024, borders packed
    # strided 1x1 of an NCHW input: only the pixels read are copied; high padding reads zeros
    (2, 24, 9, 11, 20, 1, 1, (2, 3), ((0, 2), (0, 3)), (1, 1), 2, NCHW),
    (2, 64, 14, 14, 40, 1, 1, (2, 2), ((0, 0), (0, 0)), (1, 1), 1, ("NCHW", "OIHW", "NHWC")),
    # depthwise on NCHW planes: more than one register chunk of pixels, cropping pads, strides
    (2, 3, 9, 70, 3, 3, 3, (1, 1), ((1, 2), (-1, 1)), (1, 2), 3, NCHW),
    (1, 5, 12, 140, 5, 3, 3, (2, 2), ((1, 1), (1, 1)), (1, 1), 5, ("NCHW", "OIHW", "NHWC")),
    (1, 4, 1, 2, 4, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 4, NCHW),  # kernel larger than the image
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_matches_reference(case, dtype):
    N, C, H, W, O, KH, KW, strides, padding, dilation, groups, layouts = case
    x, w = operands(N, C, H, W, O, KH, KW, groups, layouts, dtype)
    want = ref(x, w, strides, padding, dilation, layouts, groups)
    got = run_native(conv_fn(strides, padding, dilation, layouts, groups), x, w)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, **tol(dtype, KH * KW * C // groups))


@pytest.mark.parametrize("groups,layouts", [(1, NHWC), (8, NHWC), (1, NCHW), (8, NCHW)])
def test_nan_and_inf_propagate(groups, layouts):
    x, w = operands(1, 8, 16, 30, 8, 3, 3, groups, NHWC, np.float32)
    x[0, 5, 7, 2] = np.nan  # interior
    x[0, 0, 0, 1] = np.inf  # corner: blocks touching the padding
    x[0, 10, 29, 6] = -np.inf
    w[1, 1, 0, 3] = np.inf  # a kernel Inf meets padded zeros at the border: NaN there, as in the reference
    if layouts == NCHW:  # the same values in PyTorch's layout (depthwise: the plane kernel)
        x, w = x.transpose(0, 3, 1, 2).copy(), w.transpose(3, 2, 0, 1).copy()
    f = conv_fn((1, 1), "SAME", (1, 1), layouts, groups)
    got = run_native(f, x, w)
    with np.errstate(invalid="ignore"):
        want = ref(x, w, (1, 1), ((1, 1), (1, 1)), (1, 1), layouts, groups)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], **tol(np.float32))


WINO_CALL = "em_cv_wino_f32((const em_cv_ctx_f32 *)c_"  # a task calling the Winograd kernel


def test_winograd_is_chosen_for_3x3_stride_1_and_not_otherwise():
    def source(C, O, strides=(1, 1), groups=1):
        x, w = operands(1, C, 12, 12, O, 3, 3, groups, NHWC, np.float32)
        jf = ember.jit(conv_fn(strides, "SAME", (1, 1), NHWC, groups), backend="native")
        return jf.lower(x, w).executable.source

    assert WINO_CALL in source(32, 32)
    assert WINO_CALL not in source(8, 32)  # few features: the direct kernel
    assert WINO_CALL not in source(32, 32, strides=(2, 2))
    assert WINO_CALL not in source(32, 32, groups=2)
    assert WINO_CALL in source(256, 256)  # 4 MiB transformed kernel: chunks of tiles per task
    assert WINO_CALL not in source(512, 256)  # over WINOGRAD_MAX_KERNEL_BYTES


def test_winograd_chunks_read_a_large_kernel_once_per_image():
    """A transformed kernel past L2 runs chunks of several blocks of tiles per task (the geometry's
    CB), as many as fit WINOGRAD_CHUNK_BYTES and at most an image's; a small kernel one block."""
    from ember._src.native.emit import conv as conv_emit

    def geo(C, O, hw, n=1, dtype=np.float32):
        x, w = operands(n, C, hw, hw, O, 3, 3, 1, NHWC, dtype)
        exe = ember.jit(conv_fn((1, 1), "SAME", (1, 1), NHWC, 1), backend="native").lower(x, w).executable
        e = next(e for e in exe.optimized.eqns if e.prim.name == "conv")
        return conv_emit._Geo(e)

    assert geo(128, 128, 14).CB == 1  # 1 MiB: stays in L2
    g = geo(256, 256, 14)  # ResNet's 14x14x256: 49 tiles, 4 blocks of 14
    assert g.winograd and g.CB == (4 if conv_emit.THREADS == 1 else 2)
    assert g.tile >= g.CB * conv_emit.MR_MAX * 16 * 256
    assert geo(256, 256, 14, n=2).CB == 4  # two images: a task each
    assert geo(256, 256, 30, n=2).CB == 4  # 225 tiles: 1 MiB of them per task
    assert geo(256, 128, 30, n=2, dtype=np.float64).CB == 2


@pytest.mark.parametrize("case,call", [
    ((2, 16, 20, 18, 16, 3, 3, (1, 1), 16, NCHW), "em_cv_dwplane_f32((const"),  # depthwise on planes
    ((2, 24, 9, 11, 20, 1, 1, (2, 2), 1, NCHW), "em_cv_nhwc_sub_f32((const"),  # strided 1x1 of NCHW
])
def test_layout_kernels_are_chosen(case, call):
    N, C, H, W, O, KH, KW, strides, groups, layouts = case
    x, w = operands(N, C, H, W, O, KH, KW, groups, layouts, np.float32)
    f = conv_fn(strides, ((0, 0), (0, 0)), (1, 1), layouts, groups)
    assert call in ember.jit(f, backend="native").lower(x, w).executable.source


def test_nchw_direct_output_needs_no_staging_pass():
    """The direct kernel writes an NCHW output itself (transposed out of a per-task buffer); a layout
    with strided features and pixels (NHCW) is still staged and moved by a last pass."""
    def source(out):
        x, w = operands(2, 8, 12, 12, 24, 5, 5, 1, NHWC, np.float32)
        f = conv_fn((1, 1), "SAME", (1, 1), ("NHWC", "HWIO", out), 1)
        return ember.jit(f, backend="native").lower(x, w).executable.source

    assert "em_cv_unstage_f32((const" not in source("NCHW")
    assert "em_cv_unstage_f32((const" in source("NHCW")


@pytest.mark.parametrize("where", ["input", "kernel", "constant_kernel", "nan_only"])
def test_winograd_nan_and_inf(where):
    """NaN and infinities give the direct sum's results: the transforms would turn an infinity into
    NaN (they subtract inputs), so they sum ``x * 0`` over what they read and the step reruns the
    direct kernel when that is not zero; a constant kernel that is not finite takes the direct route
    only. A NaN alone stays on the Winograd path (its outputs are the direct sum's NaN)."""
    x, w = operands(2, 16, 10, 12, 16, 3, 3, 1, NHWC, np.float32)
    x[0, 4, 5, 3] = np.nan
    if where == "input":
        x[0, 0, 11, 7] = np.inf
        x[1, 6, 2, 9] = -np.inf
    elif where != "nan_only":
        w = np.abs(w) + np.float32(0.1)
        w[1, 2, 4, 5] = np.inf
    f = conv_fn((1, 1), "SAME", (1, 1), NHWC, 1)
    if where == "constant_kernel":
        got = run_native(lambda x: f(x, w), x)
    else:
        got = run_native(f, x, w)
        assert WINO_CALL in ember.jit(f).lower(x, w).executable.source
    with np.errstate(invalid="ignore"):
        want = ref(x, w, (1, 1), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    assert np.isinf(want).any() == (where != "nan_only")
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], **tol(np.float32, 144))


@pytest.mark.parametrize("where", ["input", "kernel"])
def test_winograd_nan_and_inf_symbolic_sizes(where):
    """The same with named dynamic batch, height and width (one compile): the rerun's direct step
    chooses flat or plain blocks per call, and its flat route had taken the Winograd geometry
    again (the same NaN) before."""
    f = conv_fn((1, 1), "SAME", (1, 1), NHWC, 1)
    jf = ember.jit(f, backend="native", dynamic_axes={"x": ("n", "h", "w", None)})
    for n, h, wd in ((2, 10, 12), (1, 14, 14), (1, 5, 30)):
        x, w = operands(n, 16, h, wd, 16, 3, 3, 1, NHWC, np.float32)
        x[0, 1, 2, 3] = np.nan
        if where == "input":
            x[0, 0, wd - 1, 7] = np.inf
            x[n - 1, h - 1, 2, 9] = -np.inf
        else:
            w = np.abs(w) + np.float32(0.1)
            w[1, 2, 4, 5] = np.inf
        got = np.asarray(jf(x, w))
        with np.errstate(invalid="ignore"):
            want = ref(x, w, (1, 1), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
        for test in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(test(got), test(want))
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin], want[fin], **tol(np.float32, 144))
    assert jf.cache_info()["compiles"] == 1
    assert WINO_CALL in jf.lower(x, w).compile(n=n, h=h, w=wd).as_text()


@pytest.mark.parametrize("layouts,groups", [(NHWC, 1), (NCHW, 2), (NHWC, 4)])
def test_grad_against_finite_differences(layouts, groups):
    x, w = operands(2, 4, 6, 5, 4, 3, 2, groups, layouts, np.float64)
    f = conv_fn((2, 1), ((1, 0), (1, 1)), (1, 2), layouts, groups)
    check_grads(ember.jit(f, backend="native"), (x, w), order=1, modes=("fwd", "rev"))


def test_grad_and_vmap_match_jax():
    jax = pytest.importorskip("jax")
    x, w = operands(3, 6, 12, 11, 8, 3, 3, 2, NHWC, np.float32)
    fe = conv_fn((2, 1), ((1, 1), (0, 2)), (1, 2), NHWC, 2)

    def fj(x, w):
        return jax.lax.conv_general_dilated(x, w, (2, 1), ((1, 1), (0, 2)), rhs_dilation=(1, 2),
                                            dimension_numbers=NHWC, feature_group_count=2)

    def loss(f):
        return lambda x, w: (f(x, w) ** 2).sum()

    ge = ember.jit(ember.grad(loss(fe), argnums=(0, 1)), backend="native")(x, w)
    gj = jax.grad(loss(fj), argnums=(0, 1))(x, w)
    for a, b in zip(ge, gj):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-3)
    xb = RNG.standard_normal((2, *x.shape)).astype(np.float32)
    wb = RNG.standard_normal((2, *w.shape)).astype(np.float32)
    for axes, args in (((0, None), (xb, w)), ((None, 0), (x, wb)), ((0, 0), (xb, wb))):
        got = ember.jit(ember.vmap(fe, axes), backend="native")(*args)
        np.testing.assert_allclose(np.asarray(got), np.asarray(jax.vmap(fj, axes)(*args)), rtol=1e-4,
                                   atol=1e-4)


def test_vjp_fuzz_against_jax():
    """Both cotangents over random strides (incl. above the kernel and the input), dilations,
    cropping pads, groups and odd sizes, against ``jax.vjp`` in float64 (the transposes are
    convolutions themselves: per-residue phases for strides above 1); one in four runs natively."""
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(7)
    done = 0
    for i in range(60):
        H, W = (int(v) for v in rng.integers(1, 10, 2))
        KH, KW = (int(v) for v in rng.integers(1, 5, 2))
        strides = tuple(int(v) for v in rng.integers(1, 5, 2))
        dil = tuple(int(v) for v in rng.integers(1, 4, 2))
        pads = [tuple(int(v) for v in rng.integers(-1, 4, 2)) for _ in range(2)]
        G = int(rng.choice([1, 2]))
        OH = (H + sum(pads[0]) - (KH - 1) * dil[0] - 1) // strides[0] + 1
        OW = (W + sum(pads[1]) - (KW - 1) * dil[1] - 1) // strides[1] + 1
        if OH < 1 or OW < 1:
            continue
        x = rng.standard_normal((2, H, W, 2 * G))
        w = rng.standard_normal((KH, KW, 2, 3 * G))
        ct = rng.standard_normal((2, OH, OW, 3 * G))
        f = conv_fn(strides, pads, dil, NHWC, G)
        fj = partial(jax.lax.conv_general_dilated, window_strides=strides, padding=pads, rhs_dilation=dil,
                     dimension_numbers=NHWC, feature_group_count=G)
        x64 = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", True)
        try:
            want = [np.asarray(v) for v in jax.vjp(fj, x, w)[1](ct)]
        finally:
            jax.config.update("jax_enable_x64", x64)
        vjp = partial(lambda f, x, w, ct: ember.vjp(f, x, w)[1](ct), f)
        got = ember.jit(vjp, backend="native")(x, w, ct) if i % 4 == 0 else vjp(x, w, ct)
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-10,
                                       err_msg=str((H, W, KH, KW, strides, dil, pads, G)))
        done += 1
    assert done > 20


@pytest.mark.parametrize("layouts", [NHWC, NCHW])
def test_vmap_against_reference(layouts):
    x, w = operands(2, 4, 7, 8, 6, 3, 3, 2, layouts, np.float64)
    xb = RNG.standard_normal((3, *x.shape))
    wb = RNG.standard_normal((3, *w.shape))
    f = conv_fn((1, 2), ((1, 1), (1, 1)), (1, 1), layouts, 2)
    got = np.asarray(ember.jit(ember.vmap(f, (0, 0)), backend="native")(xb, wb))
    for i in range(3):
        np.testing.assert_allclose(got[i], ref(xb[i], wb[i], (1, 2), ((1, 1), (1, 1)), (1, 1), layouts, 2),
                                   **tol(np.float64))
    got = np.asarray(ember.jit(ember.vmap(f, (None, 0)), backend="native")(x, wb))
    for i in range(3):
        np.testing.assert_allclose(got[i], ref(x, wb[i], (1, 2), ((1, 1), (1, 1)), (1, 1), layouts, 2),
                                   **tol(np.float64))


def test_matches_jax_float32():
    jax = pytest.importorskip("jax")
    for case in CASES:
        N, C, H, W, O, KH, KW, strides, padding, dilation, groups, layouts = case
        x, w = operands(N, C, H, W, O, KH, KW, groups, layouts, np.float32)
        want = jax.lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=dilation,
                                            dimension_numbers=layouts, feature_group_count=groups)
        got = run_native(conv_fn(strides, padding, dilation, layouts, groups), x, w)
        # float32 sums of K products: both sides round (JAX's own error against float64 reaches
        # 1.1e-4 at K = 2304), by up to a few ulps of the sum of the products' magnitudes (a result
        # near 0 that cancels terms of 30 differs by 1.3e-4 at K = 2304 on the Winograd route)
        atol = max(1e-4, 1e-6 * KH * KW * C // groups)
        mag = ref(np.abs(x), np.abs(w), strides, padding, dilation, layouts, groups)
        np.testing.assert_array_less(np.abs(got - np.asarray(want)), atol + 1e-4 * np.abs(want) + 4e-6 * mag)


@pytest.mark.parametrize("layouts,C,O", [(NHWC, 5, 7), (NCHW, 5, 7), (NHWC, 16, 16), (NHWC, 144, 136)])
def test_one_compile_across_batch_sizes(layouts, C, O):
    """A named batch axis: the NCHW copy's workspace and the task counts are size expressions
    (144 -> 136: Winograd with a transformed kernel past L2, one block of tiles per task)."""
    g = conv_fn((1, 1), "SAME", (1, 1), layouts, 1)
    jf = ember.jit(lambda x, w: g(x, w), dynamic_axes={"x": ("batch", None, None, None)}, backend="native")
    w = operands(1, C, 9, 10, O, 3, 3, 1, layouts, np.float32)[1]
    for n in (1, 3, 8):
        x = operands(n, C, 9, 10, O, 3, 3, 1, layouts, np.float32)[0]
        want = ref(x, w, (1, 1), ((1, 1), (1, 1)), (1, 1), layouts, 1)
        np.testing.assert_allclose(np.asarray(jf(x, w)), want, **tol(np.float32, 9 * C))
    info = jf.cache_info()
    assert info["compiles"] == 1, info


def test_workspace_is_bounded_by_tiles_not_im2col(monkeypatch):
    # the direct kernel's tiles (the FFT path, off here, holds spectra: tests/native/emit/test_conv_fft.py)
    monkeypatch.setattr(conv_fft, "ENABLED", False)
    monkeypatch.setenv("EMBER_PROGRAM_CACHE", "0")
    x, w = operands(8, 16, 32, 32, 32, 7, 7, 1, NHWC, np.float32)
    jf = ember.jit(conv_fn((1, 1), "SAME", (1, 1), NHWC, 1), backend="native")
    jf(x, w)
    plan = jf.lower(x, w).executable.plan
    im2col = 8 * 32 * 32 * 7 * 7 * 16 * 4
    assert plan.arena_bytes < im2col / 10, (plan.arena_bytes, im2col)


def prims_of(f, *args):
    return {e.prim.name for e in ember.make_program(f)(*args).eqns}


def test_unsupported_configurations_keep_the_composite():
    x, w = operands(2, 4, 6, 6, 4, 3, 3, 1, NHWC, np.float32)
    assert "conv" in prims_of(conv_fn((1, 1), "SAME", (1, 1), NHWC, 1), x, w)
    lhs_dilated = lambda x, w: lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)),  # noqa: E731
                                                        lhs_dilation=(2, 2), dimension_numbers=NHWC)
    assert "conv" not in prims_of(lhs_dilated, x, w)
    assert "conv" not in prims_of(conv_fn((1, 1), "SAME", (1, 1), NHWC, 1), x.astype(np.int32),
                                  w.astype(np.int32))
    x1 = RNG.standard_normal((2, 9, 3)).astype(np.float32)
    w1 = RNG.standard_normal((3, 3, 5)).astype(np.float32)
    one_d = lambda x, w: lax.conv_general_dilated(x, w, (1,), "SAME",  # noqa: E731
                                                  dimension_numbers=("NWC", "WIO", "NWC"))
    assert "conv" not in prims_of(one_d, x1, w1)


def test_inside_a_scan_body():
    x, w = operands(2, 16, 12, 12, 16, 3, 3, 1, NHWC, np.float32)
    w = w * 0.1

    step = conv_fn((1, 1), "SAME", (1, 1), NHWC, 1)

    def f(x):
        return lax.scan(lambda c, _: (step(c, w), None), x, None, length=3)[0]

    want = x.astype(np.float64)
    for _ in range(3):
        want = ref(want, w, (1, 1), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
    np.testing.assert_allclose(np.asarray(ember.jit(f, backend="native")(x)), want, **tol(np.float32, 144))


def kernel_grad_ref(x, ct, w_shape, strides, padding, dilation, layouts):
    """float64 kernel cotangent of a one-group convolution, in the kernel's layout:
    ``dw[o, c, i, j] = sum_{n, y, x} xpad[n, c, y s + i d, x s + j d] ct[n, o, y, x]``."""
    lhs, rhs, out = layouts
    s0, s1 = (a for a in rhs if a not in "OI")
    xc = np.transpose(np.asarray(x, np.float64), [lhs.index(a) for a in "NC" + s0 + s1])
    cc = np.transpose(np.asarray(ct, np.float64), [out.index(a) for a in "NC" + s0 + s1])
    KH, KW = (w_shape[rhs.index(a)] for a in s0 + s1)
    N, C, H, W = xc.shape
    (sh, sw), (dh, dw) = strides, dilation
    (hl, hh), (wl, wh) = padding
    big = np.zeros((N, C, H + abs(hl) + abs(hh), W + abs(wl) + abs(wh)))
    big[:, :, abs(hl):abs(hl) + H, abs(wl):abs(wl) + W] = xc
    xp = big[:, :, abs(hl) - hl:abs(hl) + H + hh, abs(wl) - wl:abs(wl) + W + wh]
    OH, OW = cc.shape[2:]
    dwt = np.zeros((cc.shape[1], C, KH, KW))
    for i in range(KH):
        for j in range(KW):
            patch = xp[:, :, i * dh:i * dh + (OH - 1) * sh + 1:sh, j * dw:j * dw + (OW - 1) * sw + 1:sw]
            dwt[:, :, i, j] = np.einsum("nchw,nohw->oc", patch, cc)
    return np.transpose(dwt, [("OI" + s0 + s1).index(a) for a in rhs])


WG_CASES = [
    # N, C, H, W, O, KH, KW, strides, padding, dilation, layouts: the kernel cotangent's transpose
    # runs em_cv_wg (vectors along the input features C, at least 3/4 full)
    (8, 16, 32, 32, 32, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), NHWC),  # the benchmark's shape
    (3, 12, 13, 11, 20, 3, 3, (2, 2), ((1, 1), (1, 1)), (1, 1), NHWC),  # odd, stride 2, C and O tails
    (2, 16, 15, 14, 9, 5, 4, (3, 2), ((2, 1), (0, 3)), (2, 1), NCHW),  # stride 3, dilation, NCHW
    (2, 24, 9, 10, 33, 2, 3, (1, 1), ((0, 0), (1, 1)), (1, 3), ("NCHW", "HWIO", "NHWC")),  # mixed
    (1, 32, 7, 9, 8, 3, 3, (1, 1), ((-1, 2), (2, -1)), (1, 1), ("NHWC", "OIHW", "NCHW")),  # cropping
    (5, 16, 5, 6, 40, 4, 4, (1, 1), ((2, 2), (2, 2)), (1, 1), NHWC),  # output hardly below the kernel
]


def kernel_vjp(strides, padding, dilation, layouts):
    f = conv_fn(strides, padding, dilation, layouts, 1)
    return lambda x, w, ct: ember.vjp(lambda w: f(x, w), w)[1](ct)[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", WG_CASES, ids=[f"wg{i}" for i in range(len(WG_CASES))])
def test_kernel_gradient_gemm_matches_reference(case, dtype):
    N, C, H, W, O, KH, KW, strides, padding, dilation, layouts = case
    x, w = operands(N, C, H, W, O, KH, KW, 1, layouts, dtype)
    y = ref(x, w, strides, padding, dilation, layouts, 1)
    ct = RNG.standard_normal(y.shape).astype(dtype)
    jf = ember.jit(kernel_vjp(strides, padding, dilation, layouts), backend="native")
    assert "em_cv_wgrun_" in jf.lower(x, w, ct).executable.source
    got = np.asarray(jf(x, w, ct))
    want = kernel_grad_ref(x, ct, w.shape, strides, padding, dilation, layouts)
    assert got.dtype == dtype and got.shape == w.shape
    np.testing.assert_allclose(got, want, **tol(dtype, y.size // O))


def test_kernel_gradient_gemm_nan_and_inf():
    """NaN in the input reaches every tap that reads it; an Inf in the cotangent meets the padding's
    zeros at the border taps (NaN there, as in the zero-padded definition), Inf elsewhere."""
    layouts = NHWC
    x, w = operands(2, 16, 9, 10, 16, 3, 3, 1, layouts, np.float32)
    ct = RNG.standard_normal((2, 9, 10, 16)).astype(np.float32)
    x[1, 4, 5, 3] = np.nan
    ct[0, 0, 4, 7] = np.inf  # first row: taps kh = 0 read the padding there
    ct[1, 5, 9, 2] = -np.inf  # last column: taps kw = 2 read the padding
    jf = ember.jit(kernel_vjp((1, 1), ((1, 1), (1, 1)), (1, 1), layouts), backend="native")
    assert "em_cv_wgrun_" in jf.lower(x, w, ct).executable.source
    got = np.asarray(jf(x, w, ct))
    with np.errstate(invalid="ignore"):
        want = kernel_grad_ref(x, ct, w.shape, (1, 1), ((1, 1), (1, 1)), (1, 1), layouts)
    assert np.isnan(want).any() and np.isinf(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], **tol(np.float32, 180))


def test_kernel_gradient_gemm_only_where_vectors_fill():
    """Few input features (vectors mostly padding) and kernels not larger than the output keep the
    direct kernel."""
    def source(C, KH, H):
        x, w = operands(2, C, H, H, 16, KH, KH, 1, NHWC, np.float32)
        y = ref(x, w, (1, 1), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
        jf = ember.jit(kernel_vjp((1, 1), ((1, 1), (1, 1)), (1, 1), NHWC), backend="native")
        return jf.lower(x, w, y.astype(np.float32)).executable.source

    assert "em_cv_wgrun_" in source(16, 3, 12)
    assert "em_cv_wgrun_" not in source(3, 3, 12)  # the stem's 3 channels
    assert "em_cv_wgrun_" not in source(16, 5, 4)  # 4x4 output of the transpose, 2x2 kernel


IG_CASES = [
    # N, C, H, W, O, KH, KW, strides, padding, dilation, groups, layouts: input cotangents of strided
    # convolutions, one input-dilated conv step (a stride-1 convolution per output residue class)
    (8, 16, 14, 14, 32, 1, 1, (2, 2), ((0, 0), (0, 0)), (1, 1), 1, NHWC),  # downsample: 3/4 zeros
    (2, 16, 15, 13, 20, 3, 3, (2, 2), ((1, 1), (1, 1)), (1, 1), 1, NHWC),  # odd sizes: uneven phases
    (2, 6, 13, 12, 7, 2, 2, (3, 4), ((0, 0), (1, 0)), (1, 1), 1, NCHW),  # stride above the kernel
    (2, 6, 15, 16, 9, 3, 3, (2, 3), ((2, 2), (1, 3)), (2, 3), 1, NHWC),  # dilation shares the stride
    (2, 8, 18, 20, 12, 3, 3, (2, 1), ((1, 1), (1, 1)), (1, 1), 2, NCHW),  # groups
    (1, 5, 12, 11, 6, 3, 3, (3, 3), ((-1, 2), (2, -1)), (1, 1), 1, ("NCHW", "HWIO", "NHWC")),  # crop
    (3, 3, 23, 21, 16, 7, 7, (2, 2), ((3, 3), (3, 3)), (1, 1), 1, NHWC),  # the stem's
]


def input_vjp(strides, padding, dilation, layouts, groups):
    f = conv_fn(strides, padding, dilation, layouts, groups)
    return lambda x, w, ct: ember.vjp(lambda x: f(x, w), x)[1](ct)[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", IG_CASES, ids=[f"ig{i}" for i in range(len(IG_CASES))])
def test_strided_input_gradient_is_one_step(case, dtype):
    """Against the float64 vjp of the reference (the reference is linear in x: its transpose applied
    to ct, column by column of a basis would be slow; JAX's float64 vjp is the independent check)."""
    jax = pytest.importorskip("jax")
    N, C, H, W, O, KH, KW, strides, padding, dilation, groups, layouts = case
    x, w = operands(N, C, H, W, O, KH, KW, groups, layouts, dtype)
    y = ref(x, w, strides, padding, dilation, layouts, groups)
    ct = RNG.standard_normal(y.shape).astype(dtype)
    got, exe = run_with_call_step(input_vjp(strides, padding, dilation, layouts, groups), "conv", x, w, ct)
    assert not any(e.prim.name in ("concatenate", "pad", "dot_general") for e in exe.optimized.eqns)
    assert sum(e.prim.name == "conv" for e in exe.optimized.eqns) == 1
    fj = partial(jax.lax.conv_general_dilated, window_strides=strides, padding=padding, rhs_dilation=dilation,
                 dimension_numbers=layouts, feature_group_count=groups)
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        want = np.asarray(jax.vjp(lambda x: fj(x, w.astype(np.float64)), x.astype(np.float64))[1](
            ct.astype(np.float64))[0])
    finally:
        jax.config.update("jax_enable_x64", x64)
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got, want, **tol(dtype, KH * KW * O))


def test_strided_input_gradient_nan_and_inf():
    """A NaN or Inf in the cotangent reaches exactly the input positions its taps touch (the other
    phases' positions stay finite, the 1x1 downsample's skipped ones zero)."""
    x, w = operands(2, 8, 12, 12, 16, 3, 3, 1, NHWC, np.float32)
    ct = RNG.standard_normal((2, 6, 6, 16)).astype(np.float32)
    ct[0, 2, 3, 5] = np.nan
    ct[1, 0, 5, 1] = np.inf
    jf = ember.jit(input_vjp((2, 2), ((1, 1), (1, 1)), (1, 1), NHWC, 1), backend="native")
    got = np.asarray(jf(x, w, ct))
    want = np.asarray(ember.jit(input_vjp((2, 2), ((1, 1), (1, 1)), (1, 1), NHWC, 1), backend="numpy")(
        x.astype(np.float64), w.astype(np.float64), ct.astype(np.float64)))
    assert np.isnan(want).any() and np.isfinite(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], **tol(np.float32, 144))
    w1 = operands(2, 8, 12, 12, 16, 1, 1, 1, NHWC, np.float32)[1]
    got = np.asarray(ember.jit(input_vjp((2, 2), ((0, 0), (0, 0)), (1, 1), NHWC, 1), backend="native")(
        x, w1, ct))
    assert np.isnan(got[0, 4, 6]).all() and (got[:, 1::2] == 0).all() and (got[:, :, 1::2] == 0).all()


def test_input_dilated_conv_transposes_and_vmaps():
    """Second order: the input-dilated conv's own transposes (its kernel cotangent dilates the input
    first, its input cotangent takes every stride-th value) and vmap, against JAX in float64."""
    jax = pytest.importorskip("jax")
    x, w = operands(2, 4, 9, 8, 6, 3, 3, 2, NHWC, np.float64)
    fe = conv_fn((2, 3), ((1, 1), (0, 2)), (1, 1), NHWC, 2)

    def fj(x, w):
        return jax.lax.conv_general_dilated(x, w, (2, 3), ((1, 1), (0, 2)), dimension_numbers=NHWC,
                                            feature_group_count=2)

    ct = RNG.standard_normal(np.asarray(fe(x, w)).shape)

    def second(vjp, f):  # d/d(w, ct) of <x-cotangent, x>**2-like scalar
        return lambda w, ct: vjp(lambda x: f(x, w), x)[1](ct)[0]

    ge = ember.jit(ember.grad(lambda w, ct: (second(ember.vjp, fe)(w, ct) ** 2).sum(), argnums=(0, 1)),
                   backend="native")(w, ct)
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        gj = jax.grad(lambda w, ct: (second(jax.vjp, fj)(w, ct) ** 2).sum(), argnums=(0, 1))(w, ct)
        cb = RNG.standard_normal((3, *ct.shape))
        vj = jax.vmap(lambda c: second(jax.vjp, fj)(w, c))(cb)
    finally:
        jax.config.update("jax_enable_x64", x64)
    for a, b in zip(ge, gj):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-10)
    ve = ember.jit(ember.vmap(lambda c: second(ember.vjp, fe)(w, c)), backend="native")(cb)
    np.testing.assert_allclose(np.asarray(ve), np.asarray(vj), rtol=1e-10, atol=1e-10)


def test_strided_input_gradient_one_compile_across_batch_sizes():
    """A named batch axis: the phases' staging offsets are size expressions."""
    jax = pytest.importorskip("jax")
    _, w = operands(1, 6, 11, 10, 8, 3, 3, 1, NCHW, np.float32)
    vjp = input_vjp((2, 2), ((1, 1), (1, 1)), (1, 1), NCHW, 1)
    jf = ember.jit(vjp, dynamic_axes={"x": ("batch", None, None, None), "ct": ("batch", None, None, None)},
                   backend="native")
    fj = partial(jax.lax.conv_general_dilated, window_strides=(2, 2), padding=((1, 1), (1, 1)),
                 dimension_numbers=NCHW)
    for n in (1, 3, 4):
        x = operands(n, 6, 11, 10, 8, 3, 3, 1, NCHW, np.float32)[0]
        ct = RNG.standard_normal((n, 8, 6, 5)).astype(np.float32)
        want = np.asarray(jax.vjp(lambda x: fj(x, w), x)[1](ct)[0])
        np.testing.assert_allclose(np.asarray(jf(x, w, ct)), want, rtol=1e-4, atol=1e-4)
    assert jf.cache_info()["compiles"] == 1, jf.cache_info()
