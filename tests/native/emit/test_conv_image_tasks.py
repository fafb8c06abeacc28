"""Image tasks of the native conv step (``_Geo.image_tasks``, ``_image_tasks`` in native/emit/conv.py):
a convolution whose passes run image by image (a layout or stride-phase copy, a staged output) runs
one pool task per image, each thread on its own slice of the copies, when the images split evenly
over the planned threads or are many. Checked against the float64 NumPy reference of
test_conv_native.py for several batch sizes, layouts, flat and direct blocks, a strided input
gradient (the phases) and a thread count of one, and that the generated program takes the path only
where the rule says."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember._src.native.emit import conv as conv_emit
from tests.native.conftest import requires_cc
from tests.native.emit.test_conv_native import NCHW, NHWC, conv_fn, input_vjp, operands, ref, tol

pytestmark = requires_cc
TASK = "em_cv_image_"

CASES = [
    # C, H, W, O, KH, KW, strides, padding, layouts
    (12, 30, 30, 24, 4, 4, (2, 2), ((1, 2), (1, 2)), NHWC),  # flat blocks (per-phase copies)
    (16, 20, 18, 24, 3, 3, (1, 1), ((1, 1), (1, 1)), NCHW),  # NHWC copy, planar NCHW output
    (5, 13, 11, 7, 3, 3, (2, 1), ((1, 0), (2, 1)), ("NCHW", "HWIO", "NHWC")),  # odd sizes, mixed layouts
    (8, 12, 12, 24, 5, 5, (1, 1), ((2, 2), (2, 2)), ("NHWC", "HWIO", "NHCW")),  # staged output
    (6, 14, 14, 16, 1, 1, (2, 2), ((0, 0), (0, 0)), NCHW),  # strided 1x1: subsampled copy
]


def _jit(case, threads=None):
    C, H, W, O, KH, KW, strides, padding, layouts = case
    opts = {} if threads is None else {"num_threads": threads}
    return ember.jit(conv_fn(strides, padding, (1, 1), layouts, 1), backend="native", **opts)


def _expects_tasks(n: int) -> bool:  # (every case here is below IMAGE_TASK_MAX_MACS per image)
    t = conv_emit.THREADS
    return t > 1 and n >= 2 and (n % t == 0 or n >= 4 * t)


def test_large_images_split_each_pass_instead():
    """An image of more than IMAGE_TASK_MAX_MACS multiply-adds keeps each pass split over the threads
    (and still matches the reference)."""
    C, H, W, O = 128, 28, 28, 128  # 28 x 28 x 128 x 1152 = 115 M per image
    x, w = operands(2, C, H, W, O, 3, 3, 1, NCHW, np.float32)
    jf = ember.jit(conv_fn((1, 1), ((1, 1), (1, 1)), (1, 1), NCHW, 1), backend="native")
    assert TASK not in jf.lower(x, w).executable.source
    want = ref(x, w, (1, 1), ((1, 1), (1, 1)), (1, 1), NCHW, 1)
    np.testing.assert_allclose(np.asarray(jf(x, w)), want, **tol(np.float32, 9 * C))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 9])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_image_tasks_match_reference(case, n):
    C, H, W, O, KH, KW, strides, padding, layouts = case
    x, w = operands(n, C, H, W, O, KH, KW, 1, layouts, np.float32)
    jf = _jit(case)
    src = jf.lower(x, w).executable.source
    assert (TASK in src) == _expects_tasks(n)
    want = ref(x, w, strides, padding, (1, 1), layouts, 1)
    got = np.asarray(jf(x, w))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, **tol(np.float32, KH * KW * C))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_thread_keeps_images_in_turn(dtype):
    case = CASES[0]
    C, H, W, O, KH, KW, strides, padding, layouts = case
    x, w = operands(4, C, H, W, O, KH, KW, 1, layouts, dtype)
    jf = _jit(case, threads=1)
    assert TASK not in jf.lower(x, w).executable.source
    np.testing.assert_allclose(np.asarray(jf(x, w)), ref(x, w, strides, padding, (1, 1), layouts, 1),
                               **tol(dtype, KH * KW * C))


def test_nan_rows_stay_in_their_image():
    """A NaN in one image reaches only that image's outputs: each thread's copies are its own."""
    case = CASES[1]
    C, H, W, O, KH, KW, strides, padding, layouts = case
    x, w = operands(8, C, H, W, O, KH, KW, 1, layouts, np.float32)
    x[5, 3, 7, 4] = np.nan
    got = np.asarray(_jit(case)(x, w))
    want = ref(x, w, strides, padding, (1, 1), layouts, 1)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got[5]).any()
    assert not np.isnan(np.delete(got, 5, axis=0)).any()
    np.testing.assert_allclose(got, want, **tol(np.float32, KH * KW * C))


def test_strided_input_gradient_phases():
    """The input cotangent of a strided convolution (phases of flat blocks) over four images."""
    strides, padding, layouts = (2, 2), ((1, 1), (1, 1)), NHWC  # (the forward may run Winograd)
    x, w = operands(4, 16, 32, 32, 32, 3, 3, 1, layouts, np.float32)
    ct = np.random.default_rng(3).standard_normal((4, 16, 16, 32)).astype(np.float32)
    jf = ember.jit(input_vjp(strides, padding, (1, 1), layouts, 1), backend="native")
    assert (TASK in jf.lower(x, w, ct).executable.source) == _expects_tasks(4)
    got = np.asarray(jf(x, w, ct))
    want = np.asarray(ember.jit(input_vjp(strides, padding, (1, 1), layouts, 1), backend="numpy")(
        x.astype(np.float64), w.astype(np.float64), ct.astype(np.float64)))
    np.testing.assert_allclose(got, want, **tol(np.float32, 9 * 32))
