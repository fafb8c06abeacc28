"""Programs the GPU tests run on every backend: (name, function, argument maker)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import ember
import ember.numpy as jnp


def _mlp(params: list, x: np.ndarray) -> ember.Array:
    w1, b1, w2, b2 = params
    h = jnp.tanh(x @ w1 + b1)
    return jnp.maximum(h @ w2 + b2, 0.0)


def _loss(params: list, x: np.ndarray, y: np.ndarray) -> ember.Array:
    return jnp.mean((_mlp(params, x) - y) ** 2)


def scan_loss(w: ember.Array, xs: ember.Array) -> ember.Array:
    """A scalar of a 3-wide ``tanh`` recurrence scanned over the rows of ``xs`` (its last carry and
    every step's output): the scan whose gradient the loop tests take on each backend."""
    def body(c, x):
        c = jnp.tanh(c * w + x)
        return c, c
    c, ys = ember.lax.scan(body, jnp.zeros(3, jnp.float32), xs, checkpoint=False)
    return jnp.sum(c) + jnp.sum(ys * ys)


def _mlp_params(rng: np.random.Generator) -> list:
    f = np.float32
    return [(rng.standard_normal((20, 32)) * 0.3).astype(f), rng.standard_normal(32).astype(f),
            (rng.standard_normal((32, 5)) * 0.3).astype(f), rng.standard_normal(5).astype(f)]


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _with_nan_and_ties(x: np.ndarray) -> np.ndarray:
    x[2, 5] = np.nan  # NaN wins (NumPy's rule)
    x[3, :] = 1.0  # all equal: the first index
    x[4, 100] = x[4, 900] = 99.0  # a tie: the first index
    return x


CASES: list[tuple[str, Callable, Callable[[np.random.Generator], tuple]]] = [
    ("elementwise_chain", lambda x, y: jnp.tanh(x * 2.0 + 1.0) * jnp.exp(-y) + jnp.sqrt(jnp.abs(y)),
     lambda r: (_f32(r, 1000), _f32(r, 1000))),
    ("broadcast_add", lambda x, b: x / (1.0 + jnp.exp(-x)) + b,
     lambda r: (_f32(r, 7, 33), _f32(r, 33))),
    ("softmax_rows", lambda x: ember.nn.softmax(x, axis=-1), lambda r: (_f32(r, 37, 300),)),
    ("logsumexp_cols", lambda x: jnp.log(jnp.sum(jnp.exp(x), axis=0)), lambda r: (_f32(r, 50, 9),)),
    ("whole_sum_multipass", lambda x: jnp.sum(x), lambda r: (_f32(r, 300, 301),)),
    ("max_min", lambda x: (jnp.max(x, axis=1), jnp.min(x)), lambda r: (_f32(r, 13, 4097),)),
    ("matmul", lambda a, b: a @ b, lambda r: (_f32(r, 33, 70), _f32(r, 70, 19))),
    ("matmul_transposed", lambda a, b: a.T @ b.T, lambda r: (_f32(r, 40, 17), _f32(r, 23, 40))),
    ("batched_matmul", lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
     lambda r: (_f32(r, 3, 9, 20), _f32(r, 3, 20, 11))),
    ("mlp_forward", _mlp, lambda r: (_mlp_params(r), _f32(r, 64, 20))),
    ("mlp_grad", ember.grad(_loss), lambda r: (_mlp_params(r), _f32(r, 64, 20), _f32(r, 64, 5))),
    ("vmap_dot", ember.vmap(lambda v, m: jnp.tanh(m @ v)), lambda r: (_f32(r, 6, 8), _f32(r, 6, 5, 8))),
    ("int32_ops", lambda i, j: (i * 3 + j // 2, jnp.maximum(i, j) - jnp.sum(i), i > j),
     lambda r: (r.integers(-50, 50, (17, 4)).astype(np.int32), r.integers(1, 50, (17, 4)).astype(np.int32))),
    ("where_compare", lambda x, y: jnp.where(x > y, x * y, y - x), lambda r: (_f32(r, 200), _f32(r, 200))),
    ("concatenate_pad", lambda x: (jnp.concatenate([x, x[:, ::-1], x * 2.0], axis=1),
                                   ember.lax.pad(x, np.float32(-1), ((-1, 2, 1), (2, -1, 2)))),
     lambda r: (_f32(r, 4, 6),)),
    ("grad_of_strided_slice", ember.grad(lambda x: jnp.sum(jnp.sin(x[1:3, ::2]) ** 2)),
     lambda r: (_f32(r, 4, 6),)),
    ("argmax_argmin_nan_ties", lambda x: (ember.lax.argmax(x, 1, np.int32), ember.lax.argmin(x, 0, np.int32)),
     lambda r: (_with_nan_and_ties(_f32(r, 7, 1000)),)),
    ("take_fill_clip", lambda p, i: (ember.lax.take(p, i, axis=0, mode="fill"),
                                     jnp.take(p, i, axis=1, mode="clip") * 2.0, p[i[0]]),
     lambda r: (_f32(r, 5, 4), np.array([[0, 4], [-1, 7]], np.int32))),
    ("transpose_reshape", lambda x: (x.T.reshape(6, 20) * 2.0)[1:5, ::3], lambda r: (_f32(r, 8, 15),)),
]
