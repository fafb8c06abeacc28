"""Property: a random program traced with named dynamic axes, evaluated at random bindings, equals
the statically shaped trace of the same function at those sizes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
import ember.numpy as jnp
from ember import lax

W = np.linspace(-1.0, 1.0, 16, dtype=np.float32).reshape(4, 4)
BIAS = np.array([[[0.5, -0.25, 1.0, 0.0]]], np.float32)

# Each op maps a rank-3 value of shape (B, S, 4), where B and S may be symbolic expressions, to a
# rank-3 value whose last dim is 4, using shape arithmetic on the way.
OPS = {
    "tanh": lambda x: jnp.tanh(x),
    "bias": lambda x: x + BIAS,
    "matmul": lambda x: x @ W,
    "concat_rows": lambda x: jnp.concatenate([x, jnp.tanh(x)], axis=0),
    "concat_slice": lambda x: jnp.concatenate([x, x * 0.5], axis=1)[:, 1:],
    "merge_axes": lambda x: jnp.reshape(x, (x.shape[0] * x.shape[1], 1, 4)),
    "split_back": lambda x: jnp.reshape(jnp.reshape(x, (-1, 4)), x.shape),
    "swap": lambda x: jnp.transpose(x, (1, 0, 2)),
    "mean_keep": lambda x: jnp.mean(x, axis=1, keepdims=True),
    "center": lambda x: x - jnp.mean(x, axis=1, keepdims=True),
    "sum_rows": lambda x: jnp.sum(x, axis=0, keepdims=True),
    "softmax": lambda x: ember.nn.softmax(x, axis=1),
    "iota": lambda x: x + 0.1 * jnp.arange(x.shape[1], dtype=np.float32)[None, :, None],
    "cumsum": lambda x: jnp.cumsum(x, axis=1),
    "pad": lambda x: jnp.pad(x, ((0, 0), (1, 2), (0, 0))),
    "div_size": lambda x: x / ember.dimension_as_value(x.shape[0]),
    "lax_bcast": lambda x: x * lax.broadcast_in_dim(jnp.max(x, axis=(0, 2)), x.shape, (1,)),
    "rev": lambda x: jnp.flip(x, 1),
}


def _program(names: list[str]) -> object:
    def f(x: object) -> object:
        for n in names:
            x = OPS[n](x)
        return x

    return f


@settings(max_examples=60, deadline=None)
@given(names=st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=6),
       sizes=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 5)), min_size=1, max_size=3),
       seed=st.integers(0, 2**16))
def test_symbolic_program_equals_static_program(names: list[str], sizes: list, seed: int) -> None:
    f = _program(names)
    dyn = ember.jit(f, dynamic_axes={"x": "batch, seq, 4"})
    rng = np.random.default_rng(seed)
    for b, s in sizes:
        x = rng.uniform(-1, 1, (b, s, 4)).astype(np.float32)
        got = dyn(x)
        want = ember.jit(f)(x)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert dyn.cache_info()["compiles"] == 1
    assert dyn.cache_info()["specializations"] == len(set(sizes))
