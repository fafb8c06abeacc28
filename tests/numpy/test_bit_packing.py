"""ember.numpy.packbits / unpackbits against NumPy: shapes (0-d, empty, odd lengths), axes, bit
orders, ``count``, dtypes, jit, vmap and errors."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember.errors import DTypeError

rng = np.random.default_rng(4)


@pytest.mark.parametrize("shape", [(13,), (3, 10), (2, 3, 17), (), (0,), (4, 0)])
@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.uint8, np.int64])
@pytest.mark.parametrize("bitorder", ["big", "little"])
def test_packbits(shape, dtype, bitorder):
    a = rng.integers(-2, 3, size=shape).astype(dtype)
    axes = [None] + (list(range(-len(shape), len(shape))) if shape else [])
    for axis in axes:
        got = jnp.packbits(a, axis=axis, bitorder=bitorder)
        want = np.packbits(a, axis=axis, bitorder=bitorder)
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("shape", [(3,), (2, 3), (0,), (2, 0, 3)])
@pytest.mark.parametrize("bitorder", ["big", "little"])
def test_unpackbits(shape, bitorder):
    a = rng.integers(0, 256, size=shape).astype(np.uint8)
    for axis in [None, *range(len(shape))]:
        n = a.size if axis is None else a.shape[axis]
        for count in (None, 0, 5, -3, 40, -8 * n):
            if n == 0 and count:  # NumPy returns uninitialized memory for these
                continue
            got = jnp.unpackbits(a, axis=axis, count=count, bitorder=bitorder)
            want = np.unpackbits(a, axis=axis, count=count, bitorder=bitorder)
            assert got.dtype == np.uint8
            np.testing.assert_array_equal(np.asarray(got), want)


def test_roundtrip_jit_vmap():
    bits = rng.random((4, 21)) > 0.5
    packed = ember.jit(lambda b: jnp.packbits(b, axis=1))(bits)
    np.testing.assert_array_equal(np.asarray(packed), np.packbits(bits, axis=1))
    back = ember.jit(lambda p: jnp.unpackbits(p, axis=1, count=21))(packed)
    np.testing.assert_array_equal(np.asarray(back).astype(bool), bits)
    np.testing.assert_array_equal(np.asarray(ember.vmap(jnp.packbits)(bits)), np.packbits(bits, axis=1))
    unpacked = ember.vmap(lambda p: jnp.unpackbits(p, bitorder="little"))(packed)
    np.testing.assert_array_equal(np.asarray(unpacked),
                                  np.unpackbits(np.packbits(bits, axis=1), axis=1, bitorder="little"))


def test_errors():
    with pytest.raises(DTypeError):
        jnp.packbits(np.ones(3, np.float32))
    with pytest.raises(DTypeError):
        jnp.unpackbits(np.ones(3, np.int32))
    with pytest.raises(ValueError, match="bitorder"):
        jnp.packbits(np.ones(3, bool), bitorder="middle")
    with pytest.raises(ValueError, match="count"):
        jnp.unpackbits(np.ones(2, np.uint8), count=-17)
    with pytest.raises(ValueError):
        jnp.packbits(np.ones((2, 3), bool), axis=2)
