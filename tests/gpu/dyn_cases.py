"""Programs with named dynamic axes the GPU tests run: (name, function, dynamic_axes, sizes,
argument maker of a size). Sizes include 1 and sizes that are not a multiple of the workgroup."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import ember
import ember.numpy as jnp

_B = np.random.default_rng(7).standard_normal(5).astype(np.float32)  # a static operand


def _f32(n: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal(shape).astype(np.float32)


ROWS = (1, 5, 300)  # 300: two map workgroups, the last one partly idle
SMALL = (1, 5, 37)  # matmul tiles (16) and two-axis programs: a partial tile

DYN_CASES: list[tuple[str, Callable, object, tuple, Callable[[int], tuple]]] = [
    ("chain", lambda x: jnp.tanh(x) * 2.0 + jnp.exp(-x) - x * x, (("n", None),), ROWS,
     lambda n: (_f32(n, n, 5),)),
    ("broadcast_static", lambda x: x * _B + jnp.sum(x, axis=1, keepdims=True), (("n", None),), ROWS,
     lambda n: (_f32(n, n, 5),)),
    ("sum_dynamic_axis", lambda x: jnp.sum(x, axis=0), (("n", None),), ROWS, lambda n: (_f32(n, n, 5),)),
    ("max_static_axis", lambda x: jnp.max(x, axis=1), (("n", None),), ROWS, lambda n: (_f32(n, n, 5),)),
    ("whole_sum_parts", lambda x: jnp.sum(x * x), (("n",),), ROWS, lambda n: (_f32(n, 40 * n),)),
    ("mean_dim_as_value", lambda x: jnp.mean(x, axis=0), (("n", None),), ROWS, lambda n: (_f32(n, n, 5),)),
    ("argmax_dynamic", lambda x: jnp.argmax(x, axis=0), (("n", None),), ROWS, lambda n: (_f32(n, n, 5),)),
    ("matmul_dynamic_m_k", lambda a, b: jnp.tanh(a @ b), (("m", "k"), ("k", None)), SMALL,
     lambda n: (_f32(n, n, n + 2), _f32(n + 1, n + 2, 3))),
    ("slices", lambda x: x[1:] * 2.0 - x[:-1] + x[::-1][1:], (("n", None),), ROWS,
     lambda n: (_f32(n, n + 1, 5),)),
    ("concatenate", lambda x: jnp.concatenate([x, x[:1] * 2.0, x], axis=0), (("n", None),), ROWS,
     lambda n: (_f32(n, n, 5),)),
    ("pad", lambda x: jnp.pad(x, ((1, 2), (0, 1)), constant_values=3.0), (("n", None),), ROWS,
     lambda n: (_f32(n, n, 5),)),
    ("transpose", lambda x: x.T * 3.0 + jnp.sum(x, axis=0)[:, None], (("n", None),), ROWS,
     lambda n: (_f32(n, n, 5),)),
    ("softmax_dynamic_axis", lambda x: ember.nn.softmax(x, axis=0), (("n", None),), ROWS,
     lambda n: (_f32(n, n, 5),)),
    ("softmax_static_rows", lambda x: ember.nn.softmax(x, axis=-1), ((None, "n"),), ROWS,
     lambda n: (_f32(n, 3, n),)),
    ("two_axes", lambda x: jnp.tanh(x) - jnp.max(x, axis=1, keepdims=True) + x.sum(0), (("b", "s"),), SMALL,
     lambda n: (_f32(n, n, n + 3),)),
    ("two_axes_reshape_iota", lambda x: x.reshape(-1, 5).sum(1) + jnp.arange(x.shape[0] * x.shape[1]),
     (("b", "s", None),), SMALL, lambda n: (_f32(n, n, n + 1, 5),)),
]
