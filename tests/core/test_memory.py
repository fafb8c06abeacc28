"""Eager buffers: alignment, immutability, delete / with-blocks, leak checking, memory stats."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember.errors import DeletedArrayError


def test_buffers_are_aligned_and_immutable():
    x = jnp.asarray(np.arange(10, dtype=np.float32)[1:])  # a misaligned view gets copied
    v = x.value
    assert v.ctypes.data % 64 == 0
    assert not v.flags.writeable
    with pytest.raises(TypeError, match="immutable"):
        x[0] = 1.0


def test_delete_and_with_block_release():
    before = ember.memory_stats()["live_bytes"]
    x = jnp.asarray(np.ones(1000, np.float64))
    assert ember.memory_stats()["live_bytes"] >= before + 8000
    x.delete()
    assert ember.memory_stats()["live_bytes"] <= before + 64
    with pytest.raises(DeletedArrayError, match="deleted"):
        x + 1
    with jnp.asarray(np.ones(10)) as y:
        z = y * 2
    assert y.is_deleted() and not z.is_deleted()
    np.testing.assert_allclose(z, 2 * np.ones(10))


def test_check_leaks_reports_creation_site():
    keep = []
    with ember.check_leaks() as leaks:
        tmp = jnp.asarray(np.ones(3))
        del tmp
        keep.append(jnp.asarray(np.zeros((2, 2), np.float32)))
    assert len(leaks) == 1
    shape, dtype, where = leaks[0]
    assert shape == (2, 2) and dtype == np.float32
    assert "test_memory.py" in where
    with pytest.raises(RuntimeError, match="still alive"):
        with ember.check_leaks(raise_on_leak=True):
            keep.append(jnp.asarray(np.ones(1)))


def test_converting_a_numpy_array_never_freezes_it():
    for _ in range(20):  # some of these buffers are 64-byte aligned by chance
        a = np.random.default_rng(0).random(512)
        x = jnp.asarray(a)
        a[0] = 5.0  # must stay writeable
        assert float(x[0]) != 5.0  # and ember holds its own copy
