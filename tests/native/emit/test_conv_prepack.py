"""Constant convolution kernels packed once per program (native/emit/prepack.py, csrc/prepack.h):
a convolution whose kernel is a program constant (an imported model's weights, a closed-over
array) packs it on the first call into a buffer kept with the program and skips the packing pass
on later calls. Checked against the float64 reference of test_conv_native on repeated calls for
the kernel families (direct, grouped, depthwise, Winograd of both strides, per-image passes,
transposed), with concurrent first calls, and with a non-finite constant kernel (packed per call,
so the Winograd path still notices it and reruns directly)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import ember
from ember import lax
from ember._src.native.emit import conv_winograd
from ember._src.native.rewrite import layout_passes
from tests.native.conftest import requires_cc
from tests.native.emit.test_conv_native import CASES, NCHW, NHWC, conv_fn, operands, ref, tol

pytestmark = requires_cc

PICKED = [CASES[i] for i in (0, 2, 4, 11, 12, 15, 20, 22, 24, 25)]


@pytest.fixture(autouse=True)
def no_program_cache(monkeypatch):
    monkeypatch.setenv("EMBER_PROGRAM_CACHE", "0")


def _source(f, x) -> str:
    return f.lower(x).executable.source


@pytest.mark.parametrize("case", PICKED, ids=lambda c: f"{c[:7]}-{c[-1][0]}-g{c[-2]}")
def test_constant_kernel_packed_once_matches_reference(case):
    N, C, H, W, O, KH, KW, strides, padding, dilation, groups, layouts = case
    x, w = operands(N, C, H, W, O, KH, KW, groups, layouts, np.float32)
    conv = conv_fn(strides, padding, dilation, layouts, groups)
    f = ember.jit(lambda x: conv(x, w))
    want = ref(x, w, strides, padding, dilation, layouts, groups)
    for _ in range(3):  # the first call packs into the kept buffer, the later ones read it
        np.testing.assert_allclose(np.asarray(f(x)), want, **tol(np.float32, C * KH * KW // groups))
    assert "em_prepack_claim" in _source(f, x)
    g = ember.jit(conv)  # the kernel as an argument: packed per call, as before
    assert "em_prepack_claim" not in g.lower(x, w).executable.source
    np.testing.assert_allclose(np.asarray(g(x, w)), want, **tol(np.float32, C * KH * KW // groups))


def test_float64_and_per_image_threads():
    x, w = operands(3, 16, 12, 10, 24, 3, 3, 1, NCHW, np.float64)
    conv = conv_fn((1, 1), ((1, 1), (1, 1)), (1, 1), NCHW, 1)
    f = ember.jit(lambda x: conv(x, w), num_threads=2)
    want = ref(x, w, (1, 1), ((1, 1), (1, 1)), (1, 1), NCHW, 1)
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(f(x)), want, **tol(np.float64, 144))


def test_strided_winograd_and_transposed_conv(monkeypatch):
    monkeypatch.setattr(conv_winograd, "RATIO", 1e9)  # every eligible geometry takes the path
    monkeypatch.setattr(layout_passes, "SMALL_IMAGE_PIXELS", 0)  # (8x7 outputs: else one GEMM)
    x, w = operands(2, 16, 15, 13, 24, 3, 3, 1, NHWC, np.float32)
    conv = conv_fn((2, 2), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
    f = ember.jit(lambda x: conv(x, w))
    want = ref(x, w, (2, 2), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(f(x)), want, **tol(np.float32, 144))
    assert "em_cw_run" in _source(f, x) and "em_prepack_claim" in _source(f, x)
    # a transposed convolution (input dilation: one packed kernel per stride phase)
    t = ember.jit(lambda x: lax.conv_general_dilated(x, w, (1, 1), ((2, 2), (2, 2)), lhs_dilation=(2, 2),
                                                     dimension_numbers=NHWC))
    z = np.zeros((2, 29, 25, 16), np.float32)
    z[:, ::2, ::2] = x
    want = ref(z, w, (1, 1), ((2, 2), (2, 2)), (1, 1), NHWC, 1)
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(t(x)), want, **tol(np.float32, 144))


def test_concurrent_first_calls_agree():
    """Calls that start together: one packs the kept buffer, the others pack into their own
    workspace until it is ready; every result is exact."""
    x, w = operands(1, 32, 20, 20, 48, 3, 3, 1, NHWC, np.float32)
    conv = conv_fn((1, 1), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
    want = ref(x, w, (1, 1), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
    def race(f) -> list[np.ndarray]:
        f.lower(x)
        with ThreadPoolExecutor(4) as pool:
            return list(pool.map(lambda _: np.asarray(f(x)), range(8)))

    for k in range(3):  # a new program each round (a new function): its first calls race
        wk = w.copy()
        for o in race(ember.jit(lambda x, wk=wk: conv(x, wk), num_threads=1)):
            np.testing.assert_allclose(o, want, **tol(np.float32, 288), err_msg=f"round {k}")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_constant_kernel_is_packed_per_call(bad, monkeypatch):
    monkeypatch.setattr(conv_winograd, "RATIO", 1e9)
    x, w = operands(1, 16, 9, 9, 16, 3, 3, 1, NHWC, np.float32)
    w[1, 1, 3, 5] = bad
    conv = conv_fn((2, 2), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
    f = ember.jit(lambda x: conv(x, w))
    want = ref(x, w, (2, 2), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
    for _ in range(2):
        got = np.asarray(f(x))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = np.isfinite(want)
        np.testing.assert_allclose(got[ok], want[ok], **tol(np.float32, 144))
    assert "em_prepack_claim" not in _source(f, x)
