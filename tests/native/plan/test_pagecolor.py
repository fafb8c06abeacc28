"""Page colouring of large outputs (4K aliasing, :mod:`ember._src.native.pagecolor`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ember
from ember._src.native.pagecolor import COLOR_MIN, PAGE, far_page_offset
from ember._src.native.runtime.pool import POOL


def _dist(a: int, b: int) -> int:
    d = (a - b) % PAGE
    return min(d, PAGE - d)


def test_far_page_offset_hand_cases() -> None:
    assert far_page_offset([]) == 0
    assert far_page_offset([None]) == 0
    assert far_page_offset([0]) == 2048
    assert far_page_offset([PAGE * 7 + 16]) == 2048  # 16 + 2048 = 2064, rounded down to a line
    assert far_page_offset([0, 2048]) in (1024, 3072)
    assert far_page_offset([None, 1000, 1000 + PAGE]) == 3008  # (1000 + 2048) rounded down to 64


@given(st.lists(st.integers(0, 1 << 40), min_size=1, max_size=40))
def test_far_page_offset_is_in_the_widest_gap(addresses: list[int]) -> None:
    got = far_page_offset(addresses)
    assert got % 64 == 0 and 0 <= got < PAGE
    offs = sorted({a % PAGE for a in addresses})
    gaps = [(b - a) % PAGE or PAGE for a, b in zip(offs, offs[1:] + offs[:1])]
    # the best any offset can do is half the widest gap; rounding down to a line costs < 64 bytes
    assert min(_dist(got, o) for o in offs) >= max(gaps) // 2 - 64


@pytest.mark.parametrize("in_off", [0, 64, 1024, 2048, 4032])
def test_large_jit_output_is_away_from_its_input(in_off: int) -> None:
    """A 1 MiB output lands at least a quarter page (modulo 4096) from the input it streams,
    wherever the input starts, and the values are the NumPy reference's."""
    x0 = np.random.default_rng(in_off).standard_normal((512, 512)).astype(np.float32)
    raw = np.empty(x0.nbytes + 2 * PAGE, np.uint8)
    start = (in_off - raw.ctypes.data) % PAGE
    x = np.ndarray(x0.shape, x0.dtype, raw, start)
    x[...] = x0
    f = ember.jit(lambda v: ember.nn.softmax(v, axis=-1))
    for _ in range(3):
        y = f(x)
        out = np.asarray(y)
        assert _dist(out.ctypes.data, x.ctypes.data) >= PAGE // 4
        e = np.exp(x0 - x0.max(axis=1, keepdims=True))
        np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=2e-6, atol=1e-7)


def test_pool_colours_only_large_blocks() -> None:
    small, _ = POOL.array((16,), np.dtype(np.float32), 64, avoid=[0])
    assert small.ctypes.data % 64 == 0
    n = COLOR_MIN * 2
    big, addr = POOL.array((n // 4,), np.dtype(np.float32), n, avoid=[PAGE * 3 + 128])
    assert big.ctypes.data == addr and addr % PAGE == 128 + 2048
    big[...] = 1.0  # the whole block is usable at that offset
    assert big.sum() == n // 4
