"""3x3 stride-2 convolutions by Winograd on the stride phases (native/emit/conv_winograd.py,
csrc/conv_winograd.h): against the float64 NumPy reference of test_conv_native over odd and even
sizes (partial output tiles, tiles spanning images), padding variants (symmetric, asymmetric, VALID,
cropping), NHWC / NCHW / mixed layouts, batch 1, channel and feature counts that are not multiples
of the vector width, float32 / float64; NaN / Inf giving the direct kernel's results (its rerun);
gradients through the path against finite differences; the cost model's choices."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.emit import conv_winograd
from ember.test_util import check_grads
from tests.native.conftest import requires_cc
from tests.native.emit.test_conv_native import NCHW, NHWC, operands, ref, tol
from tests.native.util import run_with_call_step

pytestmark = requires_cc


@pytest.fixture(autouse=True)
def no_program_cache(monkeypatch):
    """The switches below are not part of the program cache's key."""
    monkeypatch.setenv("EMBER_PROGRAM_CACHE", "0")


@pytest.fixture
def forced(monkeypatch):
    """Every eligible geometry takes the path (the cost model would leave small ones direct)."""
    monkeypatch.setattr(conv_winograd, "RATIO", 1e9)


def direct_of(f):
    """``f`` as a different program (so no cache hands back the Winograd one), for the direct kernel."""
    return lambda x, w: f(x, w) + 0.0


def conv(padding, layouts):
    return lambda x, w: lax.conv_general_dilated(x, w, (2, 2), padding, dimension_numbers=layouts)


def run(f, x, w):
    """``f(x, w)`` natively; (result, whether the Winograd step ran)."""
    out, exe = run_with_call_step(f, "conv", x, w)
    return out, "em_cw_run_" in exe.source


CASES = [
    # N, C, H, W, O, padding, layouts
    (8, 16, 32, 32, 32, ((1, 1), (1, 1)), NHWC),  # the benchmark's row: tiles span images
    (2, 5, 7, 9, 7, ((1, 1), (1, 1)), NHWC),  # odd sizes: partial tiles; C, O below a vector
    (1, 16, 10, 11, 40, ((0, 2), (2, 0)), NHWC),  # batch 1, asymmetric pads, O over one panel
    (3, 20, 16, 16, 64, ((1, 1), (1, 1)), NHWC),  # two feature panels, C % VL
    (1, 17, 15, 17, 33, ((1, 0), (0, 1)), NHWC),
    (2, 8, 9, 8, 12, ((0, 0), (0, 0)), NHWC),  # VALID
    (2, 6, 12, 13, 9, ((-1, 2), (2, -1)), NHWC),  # cropping pads
    (1, 3, 3, 4, 5, ((1, 1), (1, 1)), NHWC),  # one tile per image
    (2, 16, 14, 18, 24, ((1, 1), (1, 1)), NCHW),  # channels copied last first, NCHW output
    (2, 7, 11, 10, 20, ((1, 2), (0, 1)), ("NCHW", "HWIO", "NHWC")),
    (2, 9, 10, 11, 18, ((1, 1), (1, 1)), ("NHWC", "OIHW", "NCHW")),
    (1, 6, 13, 9, 10, ((2, 1), (1, 1)), ("NWHC", "WHIO", "NHCW")),  # strided gathers, axes swapped
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_against_reference(forced, case, dtype):
    N, C, H, W, O, padding, layouts = case
    x, w = operands(N, C, H, W, O, 3, 3, 1, layouts, dtype)
    out, used = run(conv(padding, layouts), x, w)
    assert used
    want = ref(x, w, (2, 2), padding, (1, 1), layouts, 1)
    assert out.dtype == dtype and out.shape == want.shape
    np.testing.assert_allclose(out, want, **tol(dtype, 9 * C))


def test_error_next_to_the_direct_kernel(monkeypatch):
    """The transforms' error stays at the direct kernel's (float32, against float64)."""
    x, w = operands(8, 16, 32, 32, 32, 3, 3, 1, NHWC, np.float32)
    want = ref(x, w, (2, 2), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
    wino, used = run(conv(((1, 1), (1, 1)), NHWC), x, w)
    assert used  # the default cost model takes the benchmark's row
    monkeypatch.setattr(conv_winograd, "ENABLED", False)
    direct, used = run(direct_of(conv(((1, 1), (1, 1)), NHWC)), x, w)
    assert not used
    err_w, err_d = np.abs(wino - want).max(), np.abs(direct - want).max()
    assert err_w < 3 * err_d + 1e-6, (err_w, err_d)


@pytest.mark.parametrize("N, C, HW, O, taken", [
    (8, 2, 32, 2, False),  # two channels: the transforms outweigh the saved products
    (1, 64, 14, 64, False),  # a 7x7 output: 16 tiles (64 outputs, 15 past the edge) in 2 blocks of 14
    (1, 64, 28, 128, True),  # a ResNet downsample: the transformed kernel (800 KiB) within L2
    (1, 128, 14, 256, False),  # ... not (3.2 MiB)
    (1, 128, 56, 128, True),  # ResNet-50's 56x56x128 -> 28x28 (1.6 MiB): within MAX_KERNEL_BYTES
])
def test_cost_model(N, C, HW, O, taken):
    x, w = operands(N, C, HW, HW, O, 3, 3, 1, NHWC, np.float32)
    out, used = run(conv(((1, 1), (1, 1)), NHWC), x, w)
    assert used == taken
    want = ref(x, w, (2, 2), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
    np.testing.assert_allclose(out, want, **tol(np.float32, 9 * C))


@pytest.mark.parametrize("layouts", [NHWC, NCHW])
def test_nan_inf_as_the_direct_kernel(forced, monkeypatch, layouts):
    """A lone +Inf with positive weights: the direct sum gives +Inf where the transforms' (p0 - p2)
    w0 + p2 (w0 + w2) would give NaN; the step reruns the direct kernel, so the results (and the
    reference's non-finite pattern) match exactly."""
    x, w = operands(2, 16, 12, 14, 20, 3, 3, 1, layouts, np.float32)
    w = np.abs(w) + np.float32(0.1)
    f = conv(((1, 1), (1, 1)), layouts)
    c_ax, h_ax, w_ax = (layouts[0].index(a) for a in "CHW")
    idx = [0, 0, 0, 0]
    idx[c_ax], idx[h_ax], idx[w_ax] = 3, 4, 6  # an even pixel (p2 of a tile)
    x[tuple(idx)] = np.inf
    idx[0], idx[h_ax], idx[w_ax] = 1, 7, 7
    x[tuple(idx)] = np.nan
    got, used = run(f, x, w)
    assert used
    monkeypatch.setattr(conv_winograd, "ENABLED", False)
    direct, used = run(direct_of(f), x, w)
    assert not used
    np.testing.assert_array_equal(got, direct)
    want = ref(x, w, (2, 2), ((1, 1), (1, 1)), (1, 1), layouts, 1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    assert np.isposinf(got).sum() > 0 and np.isnan(got).sum() > 0
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], **tol(np.float32, 144))


def test_nan_in_kernel(forced):
    x, w = operands(2, 8, 10, 10, 12, 3, 3, 1, NHWC, np.float64)
    w[2, 0, 5, 7] = np.nan
    got, used = run(conv(((1, 1), (1, 1)), NHWC), x, w)
    assert used
    want = ref(x, w, (2, 2), ((1, 1), (1, 1)), (1, 1), NHWC, 1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[..., 7]).all() and np.isfinite(np.delete(got, 7, axis=-1)).all()


def test_grad_through_the_path(forced):
    x, w = operands(2, 6, 9, 8, 10, 3, 3, 1, NHWC, np.float64)
    f = conv(((1, 1), (0, 1)), NHWC)
    _, used = run(f, x, w)
    assert used

    def loss(x, w):
        return jnp.sin(f(x, w)).sum()  # the forward output is needed by the gradient

    check_grads(ember.jit(loss, backend="native"), (x, w), order=1, modes=("rev",))
