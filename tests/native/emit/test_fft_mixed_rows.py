"""Rows of 2-3-5 lengths in the fft step against float64/complex128 NumPy: the line kernel
(csrc/fft_line.h, lengths a multiple of CW from CW^2: a radix-CW first stage, its last group padded
when CW does not divide the m / CW butterflies, then the length's radix 8/4/2/3/5 stages on blocks,
the last fused into the store) and the lanes (csrc/fft_lanes.h: the stage order chosen so the first
stage reads the rows and the last writes them through register transposes). Complex rows, real rows
through the half-length line and their inverse, every norm, batches that are empty, single or odd,
lengths below a vector and past the line kernel's reach, an axis that is not last, and jit / grad /
vmap. Each program holds several transforms (one compile). The AVX2 build of the same paths is
checked in tests/native/runtime/test_avx2_build.py."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.native.emit import fft as nfft
from tests.native.conftest import requires_cc
from tests.native.emit.test_fft_line import (
    cdata,
    check_complex_rows,
    check_grad_and_vmap,
    check_real_rows,
    close,
)

pytestmark = requires_cc

# (batch, n, norm, inverse). With AVX-512 (16 float / 8 double lanes): 12 below a vector; 80 in
# lanes (float) or a padded line (double: 10 butterflies, groups of 8); 960, 1200, 2000, 4000, 640
# padded lines (float); 1536 = 6 * 16^2 a whole-group line; 1000 and 3000 (16 does not divide them)
# in lanes with the first and last stages fused (float), padded lines (double); 4800 past the line
# kernel's reach (lanes); 56 = 8 * 7 and 28 = 4 * 7 in lanes, whose radix-7 stage's stride holds
# whole tiles but is neither read from the rows nor fused into the store (it once ran as a radix 2).
# Pair blocks (two lines per block, half the lanes each: lengths a multiple of CW / 2, not of CW):
# float 1000 (7 lines: the last paired with itself), 3000 (one line; a merged radix-15 stage, then
# 5s), 360 (radix 15 then 3), 1800 (15, 3, 5); double (CW / 2 = 4) 1500, 300 and 60.
ROWS = [(3, 12, None, False), (2, 80, "ortho", True), (0, 960, None, False), (5, 960, None, True),
        (7, 1000, None, False), (2, 1200, "forward", False), (3, 1536, "ortho", True), (1, 2000, None, False),
        (2, 3000, None, True), (2, 4000, "ortho", False), (4, 640, None, False), (3, 4800, None, False),
        (3, 56, None, False), (2, 28, None, True), (1, 3000, "ortho", False), (5, 360, None, False),
        (2, 1800, None, True), (3, 1500, "forward", False), (4, 300, None, True), (6, 60, None, False)]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_rows(dtype):
    check_complex_rows(ROWS, dtype)


# (batch, n, norm): real rows of 2m points through the half-length line: m = 1000 (pair blocks,
# float; padded line, double; also one line alone), 960 and 1200 (padded lines), 1536 (whole
# groups), 80 and 15 (lanes), 360 (pair blocks, radix 15 then 3), 300 (pair blocks, double), an
# empty batch
REAL = [(3, 2000, None), (2, 1920, "ortho"), (0, 1200, None), (5, 3072, "forward"), (1, 2400, None),
        (3, 160, None), (2, 30, "ortho"), (1, 2000, "ortho"), (5, 720, None), (3, 600, None)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_real_rows_and_their_inverse(dtype):
    check_real_rows(REAL, dtype)


def test_columns_leading_axes_and_fft2():
    """960-point transforms along axis 0 (five columns in lanes), along the last axis of a 3-d
    array (rows of every leading index in the line kernel), and a 2-d transform whose rows (1200)
    take the line kernel and whose columns (120) the lanes."""
    x, y = cdata((960, 5), np.complex64), cdata((3, 5, 960), np.complex64)
    z = cdata((120, 1200), np.complex64)
    f = lambda a, b, c: (jnp.fft.fft(a, axis=0), jnp.fft.ifft(b, norm="ortho"), jnp.fft.fft2(c))  # noqa: E731
    got = ember.jit(f, backend="native")(x, y, z)
    close(np.asarray(got[0]), np.fft.fft(x.astype(np.complex128), axis=0), np.complex64, 960)
    close(np.asarray(got[1]), np.fft.ifft(y.astype(np.complex128), norm="ortho"), np.complex64, 960)
    close(np.asarray(got[2]), np.fft.fft2(z.astype(np.complex128)), np.complex64, 120 * 1200)


def test_grad_and_vmap_through_2_3_5_rows():
    check_grad_and_vmap(960, 1200)


def test_grad_and_vmap_through_pair_blocks():
    """1000 and 3000 points (pair blocks with 16 float lanes; five rows: the last alone, six: all
    paired)."""
    check_grad_and_vmap(1000, 3000)


def test_reach_gives_2_3_5_rows_the_line_kernel():
    """fft.py's reach (the union over 8- and 16-float lanes) gives the line bit to 2-3-5 rows that
    are a multiple of either lane count from its square up to LINE_MAX, or of half of it from half
    its square (pair blocks), and to real rows through their half line; not to a length with a
    factor 7, one shorter than 8^2 / 2, one past LINE_MAX, nor to columns."""
    assert nfft.reach("float", 0, 960, False, 1, 64, False, 1) & nfft.G_LINE
    assert nfft.reach("float", 0, 1000, False, 1, 64, False, 1) & nfft.G_LINE  # 8 lanes: 1000 = 8 * 125
    assert nfft.reach("float", 1, 2000, True, 1, 64, False, 1) & nfft.G_LINE
    assert nfft.reach("double", 2, 160, True, 1, 64, False, 1) & nfft.G_LINE  # half line 80: 4 or 8 lanes
    assert not nfft.reach("float", 0, 7 * 128, False, 1, 64, False, 1) & nfft.G_LINE
    assert not nfft.reach("float", 0, 20, False, 1, 64, False, 1) & nfft.G_LINE  # shorter than 8^2 / 2
    assert nfft.reach("float", 0, 60, False, 1, 64, False, 1) & nfft.G_LINE  # pair blocks with 8 lanes
    assert not nfft.reach("float", 0, 4800, False, 1, 64, False, 1) & nfft.G_LINE
    assert not nfft.reach("float", 0, 960, False, 5, 64, False, 1) & nfft.G_LINE
    assert nfft.reach("float", 0, 960, False, 1, 64, False, 1) & nfft.G_MIXED
    # pair blocks (half the lanes of 8 floats: 300 = 4 * 75 with AVX2), complex rows and the RFFT's
    # half line, not the IRFFT's
    assert nfft.reach("float", 0, 300, False, 1, 64, False, 1) & nfft.G_LINE
    assert nfft.reach("float", 1, 600, True, 1, 64, False, 1) & nfft.G_LINE
    assert not nfft.reach("float", 2, 600, True, 1, 64, False, 1) & nfft.G_LINE


def test_both_precisions_in_one_program():
    """complex64 and complex128 2-3-5 rows in one program: the precision-independent helpers of
    fft_passes.h (the stage radices) are defined once (a second definition failed to compile)."""
    x, z = cdata((3, 960), np.complex64), cdata((2, 1000), np.complex128)
    got = ember.jit(lambda a, b: (jnp.fft.fft(a), jnp.fft.ifft(b)), backend="native")(x, z)
    close(np.asarray(got[0]), np.fft.fft(x.astype(np.complex128)), np.complex64, 960)
    close(np.asarray(got[1]), np.fft.ifft(z), np.complex128, 1000)
