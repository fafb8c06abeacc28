"""``jnp.float32(x)`` and friends: callable scalar types that also act as dtypes (JAX semantics)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ember
import ember.numpy as jnp

NAMES = ["bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
         "float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("name", NAMES)
def test_call_converts_like_numpy(name):
    t = getattr(jnp, name)
    ref_t = getattr(np, name)
    for v in (0, 1, 3.75, -2, True):
        if name.startswith("uint") and v == -2:
            continue
        got = t(v)
        assert isinstance(got, ember.Array) and got.dtype == np.dtype(ref_t) and not got.weak_type
        np.testing.assert_array_equal(np.asarray(got), np.asarray(ref_t(v)))
    xs = np.array([0.5, 1.5, 2.0])
    np.testing.assert_array_equal(np.asarray(t(xs)), xs.astype(ref_t))


@pytest.mark.parametrize("name", NAMES + ["bfloat16"])
def test_acts_as_its_dtype(name):
    t = getattr(jnp, name)
    want = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(getattr(np, name))
    assert np.dtype(t) == want and t.dtype == want
    assert want == t and t == want and t == want.type and not (t != want)
    assert {want: 1}[t] == 1 and hash(t) == hash(want)
    assert jnp.zeros(2, t).dtype == want and jnp.asarray([1, 0], dtype=t).dtype == want
    assert np.zeros(2, t).dtype == want


def test_isinstance_issubdtype_and_info():
    assert isinstance(np.float32(1), jnp.float32) and not isinstance(np.float64(1), jnp.float32)
    assert jnp.issubdtype(jnp.float32, jnp.floating) and not jnp.issubdtype(jnp.int8, jnp.floating)
    assert jnp.issubdtype(jnp.uint16, jnp.unsignedinteger) and jnp.issubdtype(jnp.int8, jnp.signedinteger)
    assert jnp.issubdtype(jnp.complex64, jnp.complexfloating) and jnp.issubdtype(jnp.int32, jnp.number)
    assert jnp.finfo(jnp.float32).eps == np.finfo(np.float32).eps
    assert jnp.iinfo(jnp.int16).max == np.iinfo(np.int16).max
    assert jnp.bool is jnp.bool_


def test_under_jit_and_grad():
    f = ember.jit(lambda x: jnp.int32(x * 2.7))
    np.testing.assert_array_equal(np.asarray(f(jnp.arange(4.0))), (np.arange(4.0) * 2.7).astype(np.int32))
    g = ember.grad(lambda x: jnp.float32(x) ** 2)
    assert float(g(jnp.float32(3.0))) == pytest.approx(6.0)
    assert ember.jit(lambda: jnp.float32(0.5) + 1)().dtype == np.float32
