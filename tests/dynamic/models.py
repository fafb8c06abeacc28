"""Small models written with ember.numpy / lax, with independent NumPy references."""

from __future__ import annotations

import numpy as np

import ember
import ember.numpy as jnp
from ember import lax

F32 = np.float32


def mlp_params(rng: np.random.Generator, d_in: int = 16, d_hidden: int = 32, d_out: int = 8) -> dict:
    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(F32)

    return {"w1": w(d_in, d_hidden), "b1": (0.1 * rng.standard_normal(d_hidden)).astype(F32),
            "w2": w(d_hidden, d_out), "b2": (0.1 * rng.standard_normal(d_out)).astype(F32)}


def mlp(params: dict, x: object) -> object:
    """Two dense layers, ReLU, and a log-softmax over the classes."""
    h = jnp.maximum(x @ params["w1"] + params["b1"], 0.0)
    logits = h @ params["w2"] + params["b2"]
    m = jnp.max(logits, axis=-1, keepdims=True)
    z = logits - m
    return z - jnp.log(jnp.sum(jnp.exp(z), axis=-1, keepdims=True))


def mlp_ref(params: dict, x: np.ndarray) -> np.ndarray:
    p = {k: v.astype(np.float64) for k, v in params.items()}
    h = np.maximum(x.astype(np.float64) @ p["w1"] + p["b1"], 0.0)
    logits = h @ p["w2"] + p["b2"]
    z = logits - logits.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def block_params(rng: np.random.Generator, d: int = 16, d_ff: int = 32) -> dict:
    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(F32)

    return {"wq": w(d, d), "wk": w(d, d), "wv": w(d, d), "wo": w(d, d), "w1": w(d, d_ff),
            "w2": w(d_ff, d), "g": (1 + 0.1 * rng.standard_normal(d)).astype(F32),
            "beta": (0.1 * rng.standard_normal(d)).astype(F32)}


def _layernorm(x: object, g: object, beta: object) -> object:
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + 1e-5) * g + beta


def block(params: dict, x: object) -> tuple:
    """A pre-norm causal self-attention block with an MLP, and a mean over the sequence.

    Uses the symbolic sizes: a causal mask from ``arange(seq)``, a reshape to ``(batch*seq, d)``
    for the MLP, a softmax over the named ``seq`` axis and a mean dividing by ``seq``.
    """
    b, s, d = x.shape
    h = _layernorm(x, params["g"], params["beta"])
    q, k, v = h @ params["wq"], h @ params["wk"], h @ params["wv"]
    scores = lax.dot_general(q, k, (((2,), (2,)), ((0,), (0,)))) / np.sqrt(d).astype(F32)
    pos = jnp.arange(s)
    causal = pos[:, None] >= pos[None, :]
    scores = jnp.where(causal, scores, -1e9)
    scores = scores - jnp.max(scores, axis=-1, keepdims=True)
    p = jnp.exp(scores)
    p = p / jnp.sum(p, axis=-1, keepdims=True)
    att = lax.dot_general(p, v, (((2,), (1,)), ((0,), (0,)))) @ params["wo"]
    x = x + att
    flat = jnp.reshape(x, (b * s, d))
    ff = jnp.maximum(_layernorm(flat, params["g"], params["beta"]) @ params["w1"], 0.0) @ params["w2"]
    y = jnp.reshape(flat + ff, (b, s, d))
    pooled = jnp.sum(y, axis=1) / ember.dimension_as_value(s)
    return y, pooled


def _layernorm_ref(x: np.ndarray, g: np.ndarray, beta: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + beta


def block_ref(params: dict, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = {k: v.astype(np.float64) for k, v in params.items()}
    x = x.astype(np.float64)
    b, s, d = x.shape
    h = _layernorm_ref(x, p["g"], p["beta"])
    q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
    scores = np.einsum("bqd,bkd->bqk", q, k) / np.sqrt(d)
    scores = np.where(np.tril(np.ones((s, s), bool)), scores, -1e9)
    scores = scores - scores.max(-1, keepdims=True)
    pr = np.exp(scores)
    pr = pr / pr.sum(-1, keepdims=True)
    x = x + np.einsum("bqk,bkd->bqd", pr, v) @ p["wo"]
    flat = x.reshape(b * s, d)
    ff = np.maximum(_layernorm_ref(flat, p["g"], p["beta"]) @ p["w1"], 0.0) @ p["w2"]
    y = (flat + ff).reshape(b, s, d)
    return y, y.mean(1)


SEQS = [1, 2, 3, 5, 7, 8, 9, 12, 16, 17, 23, 31, 32, 40, 47, 64]  # 16 distinct sequence lengths


def block_inputs(rng: np.random.Generator, d: int) -> list[tuple[int, int, np.ndarray]]:
    """(batch, seq, x) for each of :data:`SEQS`: float32 inputs of shape (batch, seq, d), the batch
    cycling through 1, 2, 3."""
    out = []
    for i, s in enumerate(SEQS):
        b = 1 + i % 3
        out.append((b, s, rng.standard_normal((b, s, d)).astype(np.float32)))
    return out


def assert_block_close(got: tuple, want: tuple, b: int, s: int, d: int, atol: float = 1e-4) -> None:
    """``block``'s outputs ``got`` have the shapes of a (b, s, d) input and equal ``want``."""
    y, pooled = got
    assert y.shape == (b, s, d) and pooled.shape == (b, d)
    np.testing.assert_allclose(np.asarray(y), np.asarray(want[0]), rtol=1e-4, atol=atol)
    np.testing.assert_allclose(np.asarray(pooled), np.asarray(want[1]), rtol=1e-4, atol=atol)
