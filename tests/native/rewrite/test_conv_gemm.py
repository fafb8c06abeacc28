"""The ``conv_gemm`` pass (native/rewrite/layout_passes.py): NHWC convolutions with a constant kernel
that are 1x1, or have small output images, run as one GEMM of their patches (strided slices of the
padded input, concatenated) by the kernel as a matrix. Values against the float64 NumPy reference of
test_conv_native over odd sizes, strides, asymmetric padding, kernel dilation, kernel layouts,
batch > 1, float32 / float64; what stays a convolution (a kernel passed in, groups, large images);
a ResNet-style NCHW block through ``channels_last`` and this pass against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import lax
from ember._src.native.rewrite.layout_passes import SMALL_IMAGE_PIXELS
from tests.native.conftest import requires_cc
from tests.native.emit.test_conv_native import operands, ref, tol

pytestmark = requires_cc

RNG = np.random.default_rng(35)
NHWC_HWIO = ("NHWC", "HWIO", "NHWC")
NHWC_OIHW = ("NHWC", "OIHW", "NHWC")


def prims(f, *args):
    """The primitives of ``f``'s program after the native passes."""
    return {e.prim.name for e in ember.jit(f, backend="native").lower(*args).executable.optimized.eqns}


def with_constant_kernel(w, strides, padding, dilation, layouts, groups=1):
    return lambda x: lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=dilation,
                                              dimension_numbers=layouts, feature_group_count=groups)


CASES = [
    # N, C, H, W, O, KH, KW, strides, padding, dilation, layouts
    (1, 16, 7, 7, 40, 1, 1, (1, 1), ((0, 0), (0, 0)), (1, 1), NHWC_HWIO),  # ResNet-50's 7x7 1x1
    (2, 9, 9, 7, 5, 1, 1, (2, 2), ((0, 0), (0, 0)), (1, 1), NHWC_OIHW),  # strided downsample, odd sizes
    (1, 3, 5, 6, 7, 1, 1, (2, 1), ((0, 0), (0, 0)), (1, 1), NHWC_HWIO),  # unequal strides
    (1, 16, 40, 40, 8, 1, 1, (1, 1), ((0, 0), (0, 0)), (1, 1), NHWC_OIHW),  # a 1x1 at any image size
    (1, 16, 7, 7, 24, 3, 3, (1, 1), ((1, 1), (1, 1)), (1, 1), NHWC_OIHW),  # ResNet's 7x7 3x3
    (3, 9, 11, 13, 10, 3, 3, (2, 2), ((0, 1), (1, 0)), (1, 1), NHWC_HWIO),  # strided, asymmetric pads
    (1, 8, 7, 7, 6, 3, 3, (1, 1), ((2, 2), (2, 2)), (2, 2), NHWC_OIHW),  # kernel dilation
    (2, 12, 5, 5, 33, 5, 5, (1, 1), ((2, 2), (2, 2)), (1, 1), NHWC_HWIO),  # 5x5 kernel
    (1, 10, 8, 6, 17, 2, 3, (1, 1), ((0, 0), (1, 1)), (1, 1), NHWC_OIHW),  # unequal kernel sides
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_against_reference(case, dtype):
    N, C, H, W, O, KH, KW, strides, padding, dilation, layouts = case
    x, w = operands(N, C, H, W, O, KH, KW, 1, layouts, dtype)
    f = with_constant_kernel(w, strides, padding, dilation, layouts)
    got = prims(f, x)
    assert "conv" not in got and "native_gemm" in got, got
    out = np.asarray(ember.jit(f, backend="native")(x))
    want = ref(x, w, strides, padding, dilation, layouts, 1)
    assert out.dtype == dtype and out.shape == want.shape
    np.testing.assert_allclose(out, want, **tol(dtype, KH * KW * C))


@pytest.mark.parametrize("which", ["kernel passed in", "groups", "large image", "NCHW alone"])
def test_stays_a_convolution(which):
    layouts, groups, hw = NHWC_HWIO, 1, 7
    if which == "groups":
        groups = 2
    elif which == "large image":
        hw = int(SMALL_IMAGE_PIXELS ** 0.5) + 2
    elif which == "NCHW alone":  # a lone NCHW convolution keeps its kernel's own NCHW paths
        layouts = ("NCHW", "OIHW", "NCHW")
    x, w = operands(1, 8, hw, hw, 8, 3, 3, groups, layouts, np.float32)
    conv = with_constant_kernel(w, (1, 1), ((1, 1), (1, 1)), (1, 1), layouts, groups)
    f = (lambda x, w: lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=layouts)
         ) if which == "kernel passed in" else None
    args = (x, w) if f else (x,)
    assert "conv" in prims(f or conv, *args)
    out = np.asarray(ember.jit(f or conv, backend="native")(*args))
    np.testing.assert_allclose(out, ref(x, w, (1, 1), ((1, 1), (1, 1)), (1, 1), layouts, groups),
                               **tol(np.float32, 9 * 8))


def test_resnet_block_against_torch():
    """An NCHW bottleneck at 7x7 (1x1 reduce, 3x3, 1x1 expand, batch norms folded into constants,
    residual add, ReLUs) imported from PyTorch: every convolution runs as a GEMM."""
    torch = pytest.importorskip("torch")
    import ember.torch

    torch.manual_seed(0)
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Conv2d(32, 8, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
            self.b = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
            self.c = nn.Sequential(nn.Conv2d(8, 32, 1), nn.BatchNorm2d(32))
            self.down = nn.Conv2d(32, 32, 3, stride=2, padding=1)

        def forward(self, x):
            return self.down(torch.relu(self.c(self.b(self.a(x))) + x))

    m = Block().eval()
    for mod in m.modules():  # batch norms with non-trivial statistics
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-1, 1)
            mod.running_var.uniform_(0.5, 2)
            mod.weight.data.uniform_(0.5, 1.5)
    x = torch.randn(2, 32, 7, 7)
    imported = ember.torch.import_module(m, args=(x,))
    sess = ember.InferenceSession(imported)
    got = np.asarray(next(iter(sess.run({imported.input_names[0]: x.numpy()}).values())))
    with torch.inference_mode():
        want = m(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_input_gradient_through_the_path():
    """The input cotangent through a constant-kernel convolution run as a GEMM, against finite
    differences."""
    from ember.test_util import check_grads

    x, w = operands(2, 8, 7, 7, 6, 3, 3, 1, NHWC_HWIO, np.float64)
    conv = with_constant_kernel(w, (1, 1), ((1, 1), (1, 1)), (1, 1), NHWC_HWIO)
    assert "native_gemm" in prims(ember.grad(lambda x: (conv(x) ** 2).sum()), x)
    check_grads(ember.jit(lambda x: (conv(x) ** 2).sum(), backend="native"), (x,), order=1, modes=("rev",))


@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[5]], ids=["strided1x1", "3x3small", "strided3x3"])
def test_dynamic_batch_runs_one_gemm_program(case):
    """A named dynamic batch axis (the import of a model with a dynamic batch) keeps the pass: the
    product's rows are the symbolic batch times the static pixels; one compile for three batches."""
    from ember._src.native import specialize
    N, C, H, W, O, KH, KW, strides, padding, dilation, layouts = case
    x0, w = operands(1, C, H, W, O, KH, KW, 1, layouts, np.float32)
    f = with_constant_kernel(w, strides, padding, dilation, layouts)
    jf = ember.jit(f, dynamic_axes={"x": ("b", None, None, None)}, backend="native")
    for n in (3, 1, 2):
        x = operands(n, C, H, W, O, KH, KW, 1, layouts, np.float32)[0]
        want = ref(x, w, strides, padding, dilation, layouts, 1)
        np.testing.assert_allclose(np.asarray(jf(x)), want, **tol(np.float32, KH * KW * C))
    assert jf.cache_info()["compiles"] == 1
    exe = specialize.symbolic_executable(jf.lower(x).program)
    assert exe.fallback_reason is None
    got = {e.prim.name for e in exe.optimized.eqns}
    assert "conv" not in got and "native_gemm" in got, got


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[2]], ids=["1x1", "strided1x1", "unequal strides"])
def test_symbolic_image_sizes_keep_1x1_products(case):
    """With a named dynamic batch, height and width (a CNN imported for every image size), a 1x1
    convolution is still a product: its rows are the symbolic batch times the symbolic pixels (its
    patches a strided slice of symbolic size when strided). One compile serves every nonzero size; a
    3x3 kernel at symbolic sizes stays a convolution (its image size is unknown)."""
    from ember._src.native import specialize
    N, C, H, W, O, KH, KW, strides, padding, dilation, layouts = case
    w = operands(1, C, H, W, O, KH, KW, 1, layouts, np.float32)[1]
    f = with_constant_kernel(w, strides, padding, dilation, layouts)
    jf = ember.jit(f, dynamic_axes={"x": ("b", "h", "w", None)}, backend="native")
    for n, h, wd in ((2, H, W), (1, 13, 6), (3, 1, 1), (2, 31, 17), (1, 0, 4)):
        x = operands(n, C, h, wd, O, KH, KW, 1, layouts, np.float32)[0]
        want = ref(x, w, strides, padding, dilation, layouts, 1)
        got = np.asarray(jf(x))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, **tol(np.float32, KH * KW * C))
        # (an axis of size 0 is traced as a static program of its own: docs/dynamic_axes.md)
        assert jf.cache_info()["compiles"] == 1 + (h == 0)
    x = operands(2, C, H, W, O, KH, KW, 1, layouts, np.float32)[0]
    exe = specialize.symbolic_executable(jf.lower(x).program)
    assert exe.fallback_reason is None
    got = {e.prim.name for e in exe.optimized.eqns}
    assert "conv" not in got and "native_gemm" in got, got
    x3, w3 = operands(1, 8, 9, 9, 8, 3, 3, 1, NHWC_HWIO, np.float32)
    f3 = with_constant_kernel(w3, (1, 1), ((1, 1), (1, 1)), (1, 1), NHWC_HWIO)
    j3 = ember.jit(f3, dynamic_axes={"x": ("b", "h", "w", None)}, backend="native")
    exe3 = specialize.symbolic_executable(j3.lower(x3).program)
    assert "conv" in {e.prim.name for e in exe3.optimized.eqns}
    want3 = ref(x3, w3, (1, 1), ((1, 1), (1, 1)), (1, 1), NHWC_HWIO, 1)
    np.testing.assert_allclose(np.asarray(j3(x3)), want3, **tol(np.float32, 72))
