"""Stride-1 convolutions with large kernels by FFT (native/emit/conv_fft.py, csrc/conv_fft.h): results
against a float64 NumPy reference over layouts, paddings, channel counts and both float types; NaN
and Inf (the step runs the direct kernel then); which convolutions take the path."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember._src.native.emit import conv_fft
from ember.test_util import check_grads
from tests.native.conftest import requires_cc
from tests.native.emit.test_conv_native import NCHW, NHWC, conv_fn, operands, ref, run_native, tol

pytestmark = requires_cc
FFT_CALL = "em_cf_bin_f"  # the frequency-domain product's task


def source(f, *args):
    return ember.jit(f, backend="native").lower(*args).executable.source


def taken(f, *args):
    """Whether the program's conv equation runs by FFT (decided on its equation, nothing compiled)."""
    (e,) = [e for e in ember.make_program(f)(*args).eqns if e.prim.name == "conv"]
    return conv_fft.chosen(e)


CASES = [
    # N, C, H, W, O, KH, KW, strides, padding, layouts
    (8, 16, 32, 32, 32, 7, 7, 1, ((3, 3), (3, 3)), NHWC),  # the benchmark's 7x7 row
    (1, 33, 17, 15, 33, 7, 7, 1, ((3, 3), (3, 3)), NCHW),  # lane tails of channels and features
    (2, 5, 30, 31, 17, 5, 5, 1, ((0, 0), (0, 0)), NHWC),  # VALID, odd sizes
    (3, 8, 12, 12, 16, 7, 7, 1, ((5, 1), (0, 4)), NHWC),  # asymmetric pads, low pad above KH / 2
    (2, 6, 16, 16, 9, 7, 5, 1, ((0, 6), (4, 0)), ("NCHW", "HWIO", "NHWC")),  # rectangular, mixed layouts
    (1, 16, 9, 40, 16, 6, 4, 1, ((2, 3), (1, 2)), ("NHWC", "OIHW", "NCHW")),  # even taps
    (2, 3, 25, 25, 64, 7, 7, 1, ((3, 3), (3, 3)), NHWC),  # three channels
    (1, 16, 7, 7, 16, 7, 7, 1, ((6, 6), (6, 6)), NHWC),  # full convolution: output larger than input
    (1, 4, 3, 3, 8, 7, 7, 1, ((3, 3), (3, 3)), NHWC),  # kernel larger than the image
    (1, 1, 40, 37, 1, 7, 7, 1, ((3, 3), (3, 3)), NHWC),  # one channel, one feature
    (4, 2, 11, 9, 3, 5, 5, 1, ((2, 2), (2, 2)), NHWC),  # odd rows (pairs of rows: the last alone)
    (1, 3, 1, 6, 2, 5, 5, 1, ((2, 2), (0, 0)), NCHW),  # one row
    (2, 4, 80, 70, 16, 7, 7, 1, ((3, 3), (3, 3)), NHWC),  # tiles (overlap-save), partial last tiles
    # strided: over the phase copies (stride squared times the channels, fewer taps)
    (1, 3, 45, 41, 20, 7, 7, 2, ((3, 3), (3, 3)), NHWC),  # stem-like
    (2, 3, 30, 29, 17, 7, 7, 2, ((2, 4), (0, 3)), NCHW),
    (1, 5, 30, 31, 8, 5, 5, 3, ((2, 2), (1, 1)), NHWC),  # stride 3
    (1, 2, 20, 20, 3, 6, 6, 2, ((0, 0), (5, 1)), ("NHWC", "OIHW", "NCHW")),  # even taps, pads past the taps
    (1, 3, 100, 90, 16, 7, 7, 2, ((3, 3), (3, 3)), NHWC),  # strided and tiled
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_matches_reference(case, dtype, monkeypatch):
    """Every case runs by FFT (the cost model's threshold raised: the small ones would stay direct)."""
    monkeypatch.setattr(conv_fft, "RATIO", 1e9)
    monkeypatch.setenv("EMBER_PROGRAM_CACHE", "0")  # a cached program would keep its earlier choice
    N, C, H, W, O, KH, KW, s, padding, layouts = case
    x, w = operands(N, C, H, W, O, KH, KW, 1, layouts, dtype)
    f = conv_fn((s, s), padding, (1, 1), layouts, 1)
    assert taken(f, x, w)
    assert FFT_CALL in source(f, x, w)
    want = ref(x, w, (s, s), padding, (1, 1), layouts, 1)
    got = run_native(f, x, w)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, **tol(dtype, KH * KW * C))


def test_relative_error_float32():
    """Max error relative to the output's largest value, float32 FFT against float64: at the level of
    float32 rounding of the sums (the direct kernel's on the same data is of the same order)."""
    x, w = operands(8, 16, 32, 32, 32, 7, 7, 1, NHWC, np.float32)
    f = conv_fn((1, 1), "SAME", (1, 1), NHWC, 1)
    want = ref(x, w, (1, 1), ((3, 3), (3, 3)), (1, 1), NHWC, 1)
    got = run_native(f, x, w)
    assert np.abs(got - want).max() / np.abs(want).max() < 2e-6


@pytest.mark.parametrize("layouts", [NHWC, NCHW])
def test_nan_and_inf_run_the_direct_kernel(layouts):
    """A transform would spread a NaN or Inf over its whole plane; the step checks the operands and
    runs the direct kernel instead, so non-finite values stay where the reference has them."""
    x, w = operands(2, 8, 20, 22, 16, 7, 7, 1, NHWC, np.float32)
    x[0, 5, 7, 2] = np.nan
    x[1, 0, 0, 1] = np.inf
    x[1, 10, 21, 6] = -np.inf
    w[3, 3, 0, 3] = np.inf  # meets padded zeros at the border: NaN there, as in the reference
    if layouts == NCHW:
        x, w = x.transpose(0, 3, 1, 2).copy(), w.transpose(3, 2, 0, 1).copy()
    f = conv_fn((1, 1), "SAME", (1, 1), layouts, 1)
    assert taken(f, x, w)
    got = run_native(f, x, w)
    with np.errstate(invalid="ignore"):
        want = ref(x, w, (1, 1), ((3, 3), (3, 3)), (1, 1), layouts, 1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    assert fin.sum() > want.size // 2
    np.testing.assert_allclose(got[fin], want[fin], **tol(np.float32, 49 * 8))
    # the same operands made finite again take the FFT and agree with the reference
    x, w = np.nan_to_num(x, posinf=3.0, neginf=-3.0), np.nan_to_num(w, posinf=3.0)
    np.testing.assert_allclose(run_native(f, x, w), ref(x, w, (1, 1), ((3, 3), (3, 3)), (1, 1), layouts, 1),
                               **tol(np.float32, 49 * 8))


def test_grad_against_finite_differences(monkeypatch):
    """The input cotangent of a stride-1 7x7 convolution is one too (the flipped kernel): by FFT
    (forced, as these sizes are small), like the forward convolution."""
    monkeypatch.setattr(conv_fft, "RATIO", 1e9)
    monkeypatch.setenv("EMBER_PROGRAM_CACHE", "0")
    x, w = operands(2, 4, 9, 8, 5, 7, 7, 1, NHWC, np.float64)
    f = conv_fn((1, 1), "SAME", (1, 1), NHWC, 1)
    assert taken(f, x, w)
    check_grads(ember.jit(f, backend="native"), (x, w), order=1, modes=("fwd", "rev"))


@pytest.mark.parametrize("case,want", [
    ((8, 16, 32, 32, 32, 7, 7, (1, 1), (1, 1), 1), True),
    ((8, 16, 32, 32, 32, 5, 5, (1, 1), (1, 1), 1), True),
    ((8, 16, 32, 32, 32, 3, 3, (1, 1), (1, 1), 1), False),  # 3x3: Winograd / direct
    # the ResNet stem, over its phases: by FFT where the C is compiled for 256-bit vectors; 1.34x
    # slower than the direct kernel with its prepacked kernel on 512-bit ones (measured, see EFFICIENCY)
    ((1, 3, 224, 224, 64, 7, 7, (2, 2), (1, 1), 1), {"256": True, "512": False}),
    ((8, 16, 32, 32, 32, 7, 7, (2, 1), (1, 1), 1), False),  # unequal strides
    ((8, 16, 32, 32, 32, 7, 7, (5, 5), (1, 1), 1), False),  # stride above MAX_STRIDE
    ((8, 16, 32, 32, 32, 7, 7, (1, 1), (2, 2), 1), False),  # dilated kernel
    ((8, 16, 32, 32, 32, 7, 7, (1, 1), (1, 1), 2), False),  # groups
    ((1, 64, 56, 56, 64, 5, 5, (1, 1), (1, 1), 1), False),  # kernel spectrum beyond the cache
])
@pytest.mark.parametrize("width", ["256", "512"])
def test_which_convolutions_take_it(case, want, width, monkeypatch):
    """The choice under each vector width's cost model (whatever this machine compiles for)."""
    monkeypatch.setattr(conv_fft, "efficiency", lambda: conv_fft.EFFICIENCY[width])
    N, C, H, W, O, KH, KW, strides, dilation, groups = case
    x = np.zeros((N, H, W, C), np.float32)
    w = np.zeros((KH, KW, C // groups, O), np.float32)
    want = want[width] if isinstance(want, dict) else want
    assert taken(conv_fn(strides, "SAME", dilation, NHWC, groups), x, w) == want


def test_efficiency_follows_the_compiled_vector_width():
    from ember._src.native.runtime import toolchain
    info = toolchain.find_compiler()
    wide = "-mavx512f" in info.target.split()
    assert conv_fft.efficiency() == conv_fft.EFFICIENCY["512" if wide else "256"]


def test_transform_sizes():
    assert [conv_fft.smooth(n) for n in (1, 7, 35, 37, 49, 97)] == [1, 8, 36, 40, 50, 100]
    assert conv_fft.radices(36) == [4, 3, 3]
    assert conv_fft.radices(40) == [4, 2, 5]
    assert conv_fft.radices(1) == []


def test_phase_taps_of_the_stem():
    """7 taps at stride 2, low padding 3: phase 0 (even input pixels) holds the odd taps 1, 3, 5 one
    place later, phase 1 the even taps 0, 2, 4, 6; a stride-1 problem of 4 taps, low padding 2."""
    assert conv_fft._phase_axis(2, 7, 3) == (4, 2, [-1, 1, 3, 5, 0, 2, 4, 6])
    assert conv_fft._phase_axis(1, 5, 2) == (5, 2, [0, 1, 2, 3, 4])
