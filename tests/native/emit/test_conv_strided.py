"""Flat blocks of the native conv step (``em_cv_flat`` in csrc/conv.h, chosen by
``_Geo._flat_wins`` in native/emit/conv.py): narrow images copied once per stride phase into padded
channels-last images and multiplied on a virtual image of ``Wz`` columns. Checked against the
float64 NumPy reference of test_conv_native.py (explicit loops over the taps of the zero-padded
input) over random and edge sizes, strides 1-3, padding variants (none, symmetric, uneven,
cropping), NHWC / NCHW / mixed layouts, float32 / float64, NaN / Inf, and the phases of strided
input gradients against the NumPy backend in float64."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember._src.native.emit import conv as conv_emit
from tests.native.conftest import requires_cc
from tests.native.emit.test_conv_native import NCHW, NHWC, conv_fn, input_vjp, operands, ref, run_native, tol

pytestmark = requires_cc
RNG = np.random.default_rng(52)
FLAT_CALL = "em_cv_flat_f32((const"  # a task running flat blocks (float32)

CASES = [
    # N, C, H, W, O, KH, KW, strides, padding, layouts
    (3, 16, 32, 32, 32, 3, 3, (2, 2), ((1, 1), (1, 1)), NHWC),  # the benchmark's strided 3x3
    (2, 16, 32, 32, 32, 3, 3, (2, 2), ((1, 1), (1, 1)), NCHW),  # ... on PyTorch's layout (planar out)
    (2, 5, 9, 13, 7, 3, 3, (2, 2), ((1, 1), (1, 1)), NHWC),  # odd sizes, features below a vector
    (1, 3, 11, 10, 40, 5, 5, (3, 3), ((2, 2), (2, 2)), NHWC),  # stride 3, two feature panels
    (2, 4, 12, 14, 17, 3, 3, (3, 3), ((0, 0), (0, 0)), NCHW),  # stride 3 = kernel, VALID
    (2, 6, 13, 12, 9, 2, 2, (3, 3), ((0, 0), (1, 0)), NHWC),  # stride above the kernel: phases unread
    (2, 6, 13, 12, 9, 2, 2, (3, 4), ((0, 0), (1, 0)), NHWC),  # ... (direct blocks: few blocks packed)
    (2, 7, 15, 16, 20, 3, 3, (2, 1), ((2, 0), (1, 3)), ("NCHW", "HWIO", "NHWC")),  # uneven pads, mixed
    (1, 8, 14, 15, 16, 3, 4, (2, 2), ((-1, 2), (2, -1)), NHWC),  # cropping pads
    (2, 9, 16, 16, 24, 4, 4, (2, 2), ((1, 2), (1, 2)), ("NHWC", "OIHW", "NCHW")),  # even kernel, NCHW out
    (2, 6, 10, 10, 16, 3, 3, (1, 1), ((1, 1), (1, 1)), NHWC),  # stride 1 (few features: no Winograd)
    (3, 2, 2, 3, 5, 3, 3, (2, 2), ((1, 1), (1, 1)), NCHW),  # images smaller than the kernel
    (2, 16, 32, 32, 32, 7, 7, (1, 1), ((3, 3), (3, 3)), NHWC),  # 7x7 on 32 x 32: direct (the cost model)
]


def _source(case, dtype=np.float32):
    N, C, H, W, O, KH, KW, strides, padding, layouts = case
    x, w = operands(N, C, H, W, O, KH, KW, 1, layouts, dtype)
    jf = ember.jit(conv_fn(strides, padding, (1, 1), layouts, 1), backend="native")
    return jf.lower(x, w).executable.source


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=[f"flat{i}" for i in range(len(CASES))])
def test_flat_blocks_match_reference(case, dtype):
    N, C, H, W, O, KH, KW, strides, padding, layouts = case
    x, w = operands(N, C, H, W, O, KH, KW, 1, layouts, dtype)
    want = ref(x, w, strides, padding, (1, 1), layouts, 1)
    got = run_native(conv_fn(strides, padding, (1, 1), layouts, 1), x, w)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, **tol(dtype, KH * KW * C))


def test_flat_blocks_are_chosen_for_narrow_images_only():
    assert FLAT_CALL in _source(CASES[0]) and FLAT_CALL in _source(CASES[1])
    assert FLAT_CALL in _source(CASES[5])
    # wide images (blocks of whole rows read in place), 1x1 kernels, groups, dilation: the direct blocks
    assert FLAT_CALL not in _source(CASES[-1])  # 6 of 38 virtual columns dropped: more than packing costs
    assert FLAT_CALL not in _source((1, 3, 224, 224, 64, 7, 7, (2, 2), ((3, 3), (3, 3)), NHWC))
    assert FLAT_CALL not in _source((1, 8, 16, 16, 16, 1, 1, (2, 2), ((0, 0), (0, 0)), NHWC))
    x, w = operands(1, 8, 16, 16, 16, 3, 3, 2, NHWC, np.float32)
    jf = ember.jit(conv_fn((2, 2), "SAME", (1, 1), NHWC, 2), backend="native")
    assert FLAT_CALL not in jf.lower(x, w).executable.source
    x, w = operands(1, 8, 16, 16, 16, 3, 3, 1, NHWC, np.float32)
    jf = ember.jit(conv_fn((2, 2), "SAME", (2, 2), NHWC, 1), backend="native")
    assert FLAT_CALL not in jf.lower(x, w).executable.source


def test_flat_and_direct_blocks_agree(monkeypatch):
    """The same convolution with flat blocks switched off (fresh programs: the switch is not in the
    program cache's key, so the cache is bypassed by distinct shapes) gives the same values up to
    rounding (the sums run in another order of the taps)."""
    case = (2, 5, 17, 19, 12, 3, 3, (2, 2), ((1, 1), (1, 1)), NHWC)
    N, C, H, W, O, KH, KW, strides, padding, layouts = case
    x, w = operands(N, C, H, W, O, KH, KW, 1, layouts, np.float64)
    f = conv_fn(strides, padding, (1, 1), layouts, 1)
    flat = ember.jit(f, backend="native")
    assert "em_cv_flat_f64((const" in flat.lower(x, w).executable.source
    monkeypatch.setattr(conv_emit, "FLAT", False)
    direct = ember.jit(lambda x, w: f(x, w) + 0.0, backend="native")
    assert "em_cv_flat_f64((const" not in direct.lower(x, w).executable.source
    np.testing.assert_allclose(np.asarray(flat(x, w)), np.asarray(direct(x, w)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layouts", [NHWC, NCHW])
def test_flat_blocks_nan_and_inf(layouts):
    """NaN / Inf in the input reach exactly the outputs whose taps read them; a kernel Inf meets the
    padding's zeros at the border (NaN there, as in the zero-padded reference); the dropped virtual
    columns (which read the next row's padding and pixels) leak nothing."""
    x, w = operands(1, 8, 17, 18, 16, 3, 3, 1, NHWC, np.float32)
    x[0, 5, 7, 2] = np.nan
    x[0, 0, 0, 1] = np.inf  # a corner
    x[0, 9, 17, 6] = -np.inf  # the last column: read by the next virtual row's dropped pixel
    x[0, 16, 3, 0] = np.inf  # the last row
    w[1, 2, 0, 3] = np.inf
    if layouts == NCHW:
        x, w = x.transpose(0, 3, 1, 2).copy(), w.transpose(3, 2, 0, 1).copy()
    f = conv_fn((2, 2), ((1, 1), (1, 1)), (1, 1), layouts, 1)
    got = run_native(f, x, w)
    with np.errstate(invalid="ignore"):
        want = ref(x, w, (2, 2), ((1, 1), (1, 1)), (1, 1), layouts, 1)
    assert np.isnan(want).any() and np.isinf(want).any() and np.isfinite(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], **tol(np.float32, 72))


IG_CASES = [
    # N, C, H, W, O, KH, KW, strides, padding, layouts: input cotangents, whose phases (stride-1
    # convolutions of 2x2, 2x1, 1x2, ... taps over the cotangent) run flat blocks
    (8, 16, 32, 32, 32, 3, 3, (2, 2), ((1, 1), (1, 1)), NHWC),  # the benchmark's
    (2, 5, 15, 13, 20, 3, 3, (2, 2), ((1, 1), (1, 1)), NHWC),  # odd sizes: uneven phases
    (2, 4, 16, 17, 9, 5, 5, (3, 3), ((2, 2), (2, 2)), NCHW),  # stride 3
    (1, 6, 12, 11, 16, 4, 3, (2, 3), ((0, 1), (2, 0)), ("NCHW", "HWIO", "NHWC")),  # uneven pads
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", IG_CASES, ids=[f"ig{i}" for i in range(len(IG_CASES))])
def test_strided_input_gradient_phases(case, dtype):
    N, C, H, W, O, KH, KW, strides, padding, layouts = case
    x, w = operands(N, C, H, W, O, KH, KW, 1, layouts, dtype)
    y = ref(x, w, strides, padding, (1, 1), layouts, 1)
    ct = RNG.standard_normal(y.shape).astype(dtype)
    jf = ember.jit(input_vjp(strides, padding, (1, 1), layouts, 1), backend="native")
    assert "em_cv_flat_" in jf.lower(x, w, ct).executable.source
    got = np.asarray(jf(x, w, ct))
    want = np.asarray(ember.jit(input_vjp(strides, padding, (1, 1), layouts, 1), backend="numpy")(
        x.astype(np.float64), w.astype(np.float64), ct.astype(np.float64)))
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got, want, **tol(dtype, KH * KW * O))
