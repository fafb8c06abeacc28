"""Convolutions with symbolic batch, height and width (named dynamic axes): ``lax.conv_general_dilated``
binds the ``conv`` primitive and the native backend runs its call step (csrc/conv.h, geometry from the
size symbols at run time), one compile serving several image sizes; against the float64 NumPy
reference of test_conv_native.py and PyTorch; gradients (the tap-by-tap cotangents of
prims/conv_taps.py) against PyTorch and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import lax
from ember._src.native import specialize
from tests.native.conftest import requires_cc
from tests.native.emit.test_conv_native import NCHW, NHWC, conv_fn, operands, ref, tol

pytestmark = requires_cc
AXES = {"NHWC": ("b", "h", "w", None), "NCHW": ("b", None, "h", "w")}

CASES = [
    # C, O, KH, KW, strides, padding, dilation, groups, layouts
    (4, 8, 3, 3, (1, 1), "SAME", (1, 1), 1, NCHW),
    (16, 16, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, NHWC),  # Winograd F(2x2, 3x3)
    (3, 10, 7, 7, (2, 2), ((3, 3), (3, 3)), (1, 1), 1, NCHW),  # stem-like
    (6, 9, 3, 3, (2, 2), "VALID", (1, 1), 1, NHWC),
    (8, 12, 1, 1, (2, 2), ((0, 0), (0, 0)), (1, 1), 1, NCHW),  # strided 1x1 downsample
    (6, 8, 3, 3, (1, 2), ((2, 2), (1, 3)), (2, 3), 1, NHWC),  # dilation
    (8, 12, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 2, NCHW),  # two groups
    (16, 16, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 16, NHWC),  # depthwise, channel rows
    (5, 5, 3, 3, (2, 2), ((1, 1), (1, 1)), (1, 1), 5, NCHW),  # depthwise on planes
    (6, 8, 3, 3, (1, 1), ((-1, 2), (2, -1)), (1, 1), 1, NHWC),  # cropping pads
]
SIZES = [(2, 9, 11), (1, 16, 13), (3, 5, 6)]


def _dynamic(f, layouts):
    return ember.jit(f, dynamic_axes={"x": AXES[layouts[0]]}, backend="native")


def _assert_native_conv(jf, x, w, sizes):
    low = jf.lower(x, w)
    prims = {e.prim.name for e in low.program.eqns}
    assert "conv" in prims and not {"concatenate", "dot_general"} & prims, prims
    # one symbolic program (not a static build per size), running the conv kernels
    assert specialize.symbolic_executable(low.program).fallback_reason is None
    source = low.compile(**sizes).as_text()
    assert "em_cv_" in source


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_one_compile_matches_reference(case):
    C, O, KH, KW, strides, padding, dilation, groups, layouts = case
    f = conv_fn(strides, padding, dilation, layouts, groups)
    jf = _dynamic(f, layouts)
    w = operands(1, C, KH, KW, O, KH, KW, groups, layouts, np.float32)[1]
    for n, h, wd in SIZES:
        x = operands(n, C, h, wd, O, KH, KW, groups, layouts, np.float32)[0]
        pads = padding
        if isinstance(padding, str):  # the pads XLA's rule gives (static here: a reference only)
            pads = lax.padtype_to_pads((h, wd), ((KH - 1) * dilation[0] + 1, (KW - 1) * dilation[1] + 1),
                                       strides, padding)
        want = ref(x, w, strides, pads, dilation, layouts, groups)
        np.testing.assert_allclose(np.asarray(jf(x, w)), want, **tol(np.float32, KH * KW * C // groups))
    assert jf.cache_info()["compiles"] == 1
    _assert_native_conv(jf, x, w, {"b": n, "h": h, "w": wd})


def test_matches_torch_float64_and_output_1x1():
    torch = pytest.importorskip("torch")
    f = conv_fn((2, 2), ((1, 1), (1, 1)), (1, 1), NCHW, 1)
    jf = _dynamic(f, NCHW)
    w = np.random.default_rng(3).standard_normal((7, 4, 3, 3))
    for n, h, wd in ((2, 1, 1), (1, 2, 2), (2, 17, 6)):  # 1x1 outputs first
        x = np.random.default_rng(n * h).standard_normal((n, 4, h, wd))
        want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), stride=2, padding=1).numpy()
        got = np.asarray(jf(x, w))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert jf.cache_info()["compiles"] == 1


def test_image_smaller_than_kernel_raises():
    """A size where the kernel does not fit the (padded) image gives a negative output size: the
    call refuses the binding (the static path's output would be empty)."""
    f = conv_fn((1, 1), "VALID", (1, 1), NHWC, 1)
    jf = _dynamic(f, NHWC)
    x, w = operands(1, 3, 6, 6, 4, 5, 5, 1, NHWC, np.float32)
    np.testing.assert_allclose(np.asarray(jf(x, w)), ref(x, w, (1, 1), ((0, 0), (0, 0)), (1, 1), NHWC, 1),
                               **tol(np.float32, 75))
    with pytest.raises(Exception, match="violates a shape constraint"):
        jf(x[:, :3, :3], w)


@pytest.mark.parametrize("case", [
    (4, 6, 3, 3, (2, 2), ((1, 1), (1, 1)), (1, 1), 1, "NCHW"),
    (4, 6, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), 2, "NHWC"),
    (6, 6, 3, 3, (2, 1), ((1, 0), (0, 1)), (1, 2), 6, "NCHW"),  # depthwise, dilation, uneven pads
], ids=["strided", "groups", "depthwise"])
def test_grad_against_torch(case):
    pytest.importorskip("torch")
    C, O, KH, KW, strides, padding, dilation, groups, layout = case
    layouts = NCHW if layout == "NCHW" else NHWC
    f = conv_fn(strides, padding, dilation, layouts, groups)
    loss = lambda x, w: (f(x, w) ** 2).sum()  # noqa: E731
    jg = ember.jit(ember.grad(loss, argnums=(0, 1)), dynamic_axes={"x": AXES[layout]}, backend="native")
    rng = np.random.default_rng(11)
    w = rng.standard_normal((O, C // groups, KH, KW))
    for n, h, wd in ((2, 9, 11), (1, 6, 8), (3, 7, 5)):
        x = rng.standard_normal((n, C, h, wd))
        _check_grads_against_torch(jg, x, w, layout, padding, strides, dilation, groups)
    assert jg.cache_info()["compiles"] == 1


def test_grad_against_finite_differences():
    f = conv_fn((2, 2), ((1, 2), (0, 1)), (1, 1), NHWC, 1)
    jf = _dynamic(f, NHWC)
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((1, 7, 6, 3)), rng.standard_normal((3, 3, 3, 4))
    jg = ember.jit(ember.grad(lambda x, w: (f(x, w) ** 3).sum(), argnums=(0, 1)),
                   dynamic_axes={"x": AXES["NHWC"]}, backend="native")
    gx, gw = (np.asarray(g) for g in jg(x, w))
    eps = 1e-6
    for arr, g, which in ((x, gx, 0), (w, gw, 1)):
        for idx in [tuple(rng.integers(0, s) for s in arr.shape) for _ in range(6)]:
            d = np.zeros_like(arr)
            d[idx] = eps
            args_p = (x + d, w) if which == 0 else (x, w + d)
            args_m = (x - d, w) if which == 0 else (x, w - d)
            fd = ((np.asarray(jf(*args_p)) ** 3).sum() - (np.asarray(jf(*args_m)) ** 3).sum()) / (2 * eps)
            np.testing.assert_allclose(g[idx], fd, rtol=1e-6, atol=1e-8)


def _same_pads(n, k, s, d, lower=False):
    """The ``"SAME"`` pair of one axis, by the rule: total ``max((ceil(n/s) - 1) s + (k - 1) d + 1 - n, 0)``,
    the low pad half of it (rounded down; ``"SAME_LOWER"``: up)."""
    total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
    return (total - total // 2, total // 2) if lower else (total // 2, total - total // 2)


SAME_CASES = [
    # C, O, KH, KW, strides, dilation, layouts, padding
    (4, 6, 3, 3, (2, 2), (1, 1), NHWC, "SAME"),
    (3, 5, 3, 3, (3, 3), (1, 1), NCHW, "SAME"),
    (4, 4, 3, 3, (2, 3), (2, 1), NHWC, "SAME"),  # dilation: an effective 5 x 3 window
    (2, 3, 4, 4, (3, 2), (1, 1), NCHW, "SAME_LOWER"),
    (3, 4, 2, 2, (3, 3), (1, 1), NHWC, "SAME"),  # window smaller than the stride: a pad only at some sizes
    (4, 8, 1, 1, (2, 2), (1, 1), NCHW, "SAME"),
]


@pytest.mark.parametrize("case", SAME_CASES, ids=[f"same{i}" for i in range(len(SAME_CASES))])
def test_same_padding_strided_symbolic(case):
    """``"SAME"`` at strides > 1 with symbolic sizes: the pads depend on the size modulo the stride,
    computed per call; one compile, odd and even sizes, against the float64 reference with the pads of
    the rule (JAX's)."""
    C, O, KH, KW, strides, dilation, layouts, padding = case
    f = conv_fn(strides, padding, dilation, layouts, 1)
    jf = _dynamic(f, layouts)
    w = operands(1, C, KH, KW, O, KH, KW, 1, layouts, np.float32)[1]
    for n, h, wd in SIZES + [(1, 8, 7)]:
        x = operands(n, C, h, wd, O, KH, KW, 1, layouts, np.float32)[0]
        pads = [_same_pads(v, k, s, d, padding == "SAME_LOWER")
                for v, k, s, d in zip((h, wd), (KH, KW), strides, dilation)]
        want = ref(x, w, strides, pads, dilation, layouts, 1)
        got = np.asarray(jf(x, w))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, **tol(np.float32, KH * KW * C))
    assert jf.cache_info()["compiles"] == 1
    _assert_native_conv(jf, x, w, {"b": n, "h": h, "w": wd})


def test_same_padding_strided_symbolic_matches_jax():
    jax = pytest.importorskip("jax")
    f = conv_fn((2, 2), "SAME", (1, 1), NHWC, 1)
    jf = _dynamic(f, NHWC)
    w = operands(1, 5, 3, 3, 7, 3, 3, 1, NHWC, np.float32)[1]
    for n, h, wd in ((1, 10, 9), (2, 7, 12)):
        x = operands(n, 5, h, wd, 7, 3, 3, 1, NHWC, np.float32)[0]
        want = np.asarray(jax.lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=NHWC))
        np.testing.assert_allclose(np.asarray(jf(x, w)), want, rtol=1e-5, atol=1e-5)
    assert jf.cache_info()["compiles"] == 1


@pytest.mark.parametrize("layout, strides, dilation", [("NCHW", (2, 2), (1, 1)), ("NHWC", (3, 2), (1, 2))])
def test_same_padding_strided_grad_against_torch(layout, strides, dilation):
    """Gradients of a ``"SAME"`` strided convolution with symbolic sizes (one compile) against PyTorch
    on the input padded by the rule."""
    pytest.importorskip("torch")
    layouts = NCHW if layout == "NCHW" else NHWC
    f = conv_fn(strides, "SAME", dilation, layouts, 1)
    jg = ember.jit(ember.grad(lambda x, w: (f(x, w) ** 2).sum(), argnums=(0, 1)),
                   dynamic_axes={"x": AXES[layout]}, backend="native")
    rng = np.random.default_rng(13)
    w = rng.standard_normal((4, 3, 3, 3))
    for n, h, wd in ((2, 9, 10), (1, 8, 7), (3, 6, 11)):
        x = rng.standard_normal((n, 3, h, wd))
        pads = [_same_pads(v, 3, s, d) for v, s, d in zip((h, wd), strides, dilation)]
        _check_grads_against_torch(jg, x, w, layout, pads, strides, dilation, 1)
    assert jg.cache_info()["compiles"] == 1


def _flat_at(n, h, wd, C, O, K, s, p):
    """Whether the static rule takes flat blocks at these sizes (a square kernel ``K``, stride ``s``,
    padding ``p``)."""
    from ember._src.native.emit import conv as cv

    oh, ow = (h + 2 * p - K) // s + 1, (wd + 2 * p - K) // s + 1
    nvec = 1 if O <= cv.VEC_BYTES_MAX // 4 else 2
    return cv.flat_wins(h, wd, oh, ow, K, K, s, s, p, p, C, K * K * C, nvec, cv.MR_MAX, cv.FLAT_MAX_WIDTH,
                        cv.FLAT_PACK_COST, cv.FLAT_COPY_COST)


ROUTE_CASES = [
    # C, O, K, stride, pad, layouts, sizes (flat blocks at some, blocks of pixels at others)
    (16, 32, 3, 2, 1, NCHW, [(2, 9, 11), (1, 16, 13), (3, 17, 100), (1, 30, 13)]),
    (3, 10, 7, 2, 3, NHWC, [(1, 9, 11), (2, 30, 6), (1, 5, 6), (3, 16, 41)]),
]


@pytest.mark.parametrize("const", [False, True], ids=["argument", "constant"])
@pytest.mark.parametrize("case", ROUTE_CASES, ids=["strided3x3", "stem7x7"])
def test_route_chosen_per_call(case, const):
    """Symbolic sizes choose flat blocks or blocks of pixels per call (the static cost rule in C):
    one compile, sizes on both sides of the rule in turn, batch 1 and more, odd sizes, against the
    float64 reference; a constant kernel is kept packed in each route's own tap order."""
    C, O, K, s, p, layouts, sizes = case
    flat = [_flat_at(*sz, C, O, K, s, p) for sz in sizes]
    assert len(set(flat)) == 2 and flat[0] != flat[1]  # both routes run, one after the other
    f = conv_fn((s, s), ((p, p), (p, p)), (1, 1), layouts, 1)
    w = operands(1, C, K, K, O, K, K, 1, layouts, np.float32)[1]
    if const:
        jf = _dynamic(lambda x: f(x, w), layouts)
    else:
        jf = _dynamic(f, layouts)
    args = () if const else (w,)
    for n, h, wd in sizes:
        x = operands(n, C, h, wd, O, K, K, 1, layouts, np.float32)[0]
        want = ref(x, w, (s, s), ((p, p), (p, p)), (1, 1), layouts, 1)
        np.testing.assert_allclose(np.asarray(jf(x, *args)), want, **tol(np.float32, K * K * C))
    assert jf.cache_info()["compiles"] == 1
    source = jf.lower(x, *args).compile(b=n, h=h, w=wd).as_text()
    assert "em_cv_flat_wins(" in source and "em_cv_flat_f32(" in source and "em_cv_blocks_f32(" in source


def test_route_rule_in_c_matches_python(tmp_path):
    """csrc/conv_route.h's em_cv_flat_wins decides as the static emitter's flat_wins on a grid of
    geometries and sizes (compiled on its own, called through ctypes)."""
    import ctypes
    import shutil
    import subprocess

    from ember._src.native.csrc import load
    from ember._src.native.emit import conv as cv

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    src, lib = tmp_path / "route.c", tmp_path / "route.so"
    # the header's functions are static: a wrapper with external linkage
    head = "#include <stddef.h>\n#include <stdint.h>\n"
    src.write_text(head + load("conv_route.h") + "int route_flat_wins("
                   "int64_t H, int64_t W, int64_t OH, int64_t OW, "
                   "int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t hlo, int64_t wlo, int64_t C, "
                   "int64_t K, int64_t nvec, int64_t mr, int64_t mw, double pk, double cp) { return "
                   "em_cv_flat_wins(H, W, OH, OW, KH, KW, sh, sw, hlo, wlo, C, K, nvec, mr, mw, pk, cp); }\n")
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    fn = ctypes.CDLL(str(lib)).route_flat_wins
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int64] * 15 + [ctypes.c_double] * 2
    seen = set()
    for K, s, p, C in ((3, 1, 1, 8), (3, 2, 1, 16), (7, 2, 3, 3), (5, 3, 0, 4), (2, 2, 0, 6)):
        for h in (1, 4, 9, 16, 33):
            for wd in (1, 5, 13, 28, 60, 97):
                oh, ow = (h + 2 * p - K) // s + 1, (wd + 2 * p - K) // s + 1
                for nvec in (1, 2):
                    args = (h, wd, oh, ow, K, K, s, s, p, p, C, K * K * C, nvec, cv.MR_MAX, cv.FLAT_MAX_WIDTH,
                            cv.FLAT_PACK_COST, cv.FLAT_COPY_COST)
                    want = cv.flat_wins(*args)
                    assert bool(fn(*args)) == want, args
                    seen.add(want)
    assert seen == {True, False}


GEMM_CASES = [
    # C, O, K, stride, pad, sizes (output images of at most 64 pixels: the GEMM route; larger: direct)
    (16, 24, 3, 1, 1, [(2, 5, 7), (1, 13, 9), (3, 7, 9), (1, 3, 3)]),
    (12, 40, 3, 2, 1, [(1, 15, 17), (3, 9, 8), (2, 23, 31)]),
    # 1x1s are products at every size (conv_gemm), the strided one of a strided slice: no conv step
    (8, 20, 1, 1, 0, [(2, 5, 7), (1, 17, 11), (3, 4, 3)]),
    (10, 12, 1, 2, 0, [(1, 9, 8), (2, 21, 13), (3, 5, 4)]),
]


@pytest.mark.parametrize("case", GEMM_CASES, ids=["3x3", "3x3s2", "1x1", "1x1s2"])
def test_gemm_route_chosen_per_call(case):
    """A constant kernel on channels-last images runs the static program's GEMM route (patches times
    the prepacked kernel) where its output images are small, the direct kernel elsewhere; a 1x1 is a
    product before scheduling (``conv_gemm``). One compile, against the float64 reference."""
    from ember._src.native.emit import gemm_kernel

    if not gemm_kernel.load(wait=True):
        pytest.skip("ember's GEMM kernel library does not run on this machine")
    C, O, K, s, p, sizes = case
    rng = np.random.default_rng(21)
    w = rng.standard_normal((K, K, C, O)).astype(np.float32)
    pads = ((p, p), (p, p))
    jf = _dynamic(lambda x: lax.conv_general_dilated(x, w, (s, s), pads, dimension_numbers=NHWC), NHWC)
    for n, h, wd in sizes:
        x = rng.standard_normal((n, h, wd, C)).astype(np.float32)
        want = ref(x, w, (s, s), pads, (1, 1), NHWC, 1)
        np.testing.assert_allclose(np.asarray(jf(x)), want, **tol(np.float32, K * K * C))
    assert jf.cache_info()["compiles"] == 1
    source = jf.lower(x).compile(b=n, h=h, w=wd).as_text()
    if K == 1:
        assert "em_skp_fn()" in source and "em_cv_run_" not in source
        return
    assert "em_skp_fn()" in source and "em_cv_run_" in source  # both routes
    assert source.count("em_cv_cols_f32(") == 2  # the patches gathered (the definition and a call)


def test_same_padding_strided_symbolic_pooling():
    """``padtype_to_pads`` serves windowed reductions too: a 3x3 stride-2 ``"SAME"`` max pool with
    symbolic sizes (one compile) against NumPy on the input padded by the rule with -inf."""
    f = lambda x: lax.reduce_window(x, -np.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")  # noqa: E731
    jf = ember.jit(f, dynamic_axes={"x": ("b", "h", "w", None)}, backend="native")
    rng = np.random.default_rng(17)
    for n, h, wd in ((1, 9, 10), (2, 8, 7), (1, 5, 6)):
        x = rng.standard_normal((n, h, wd, 3)).astype(np.float32)
        (hl, hh), (wl, wh) = _same_pads(h, 3, 2, 1), _same_pads(wd, 3, 2, 1)
        xp = np.pad(x, ((0, 0), (hl, hh), (wl, wh), (0, 0)), constant_values=-np.inf)
        oh, ow = -(-h // 2), -(-wd // 2)
        want = np.stack([np.stack([xp[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max((1, 2)) for j in range(ow)], 1)
                         for i in range(oh)], 1)
        np.testing.assert_array_equal(np.asarray(jf(x)), want)
    assert jf.cache_info()["compiles"] == 1


def _check_grads_against_torch(jg, x, w, layout, padding, strides, dilation, groups):
    """``jg(x, w)`` (the gradients of the sum of squares of a convolution of the NCHW ``x`` and OIHW
    ``w``, given in ``layout``) against torch's, float64."""
    import torch  # (the callers skip without it)

    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    (hl, hh), (wl, wh) = padding
    y = torch.nn.functional.conv2d(torch.nn.functional.pad(xt, (wl, wh, hl, hh)), wt, stride=strides,
                                   dilation=dilation, groups=groups)
    (y ** 2).sum().backward()
    xa = x if layout == "NCHW" else x.transpose(0, 2, 3, 1)
    wa = w if layout == "NCHW" else w.transpose(2, 3, 1, 0)
    gx, gw = (np.asarray(g) for g in jg(xa, wa))
    if layout == "NHWC":
        gx, gw = gx.transpose(0, 3, 1, 2), gw.transpose(3, 2, 0, 1)
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gw, wt.grad.numpy(), rtol=1e-10, atol=1e-10)
