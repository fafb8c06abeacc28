"""Random programs for fuzzing: DAGs of elementwise, broadcast, movement, reduction, matmul and
fallback ops over random shapes and dtypes (complex64 with complex ops and FFTs among them), built
from a seed so a failure reproduces."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import ember.numpy as jnp
from ember import lax


def make(seed: int, n_ops: int = 12) -> tuple[Callable, list[np.ndarray], str]:
    """(function, example inputs, description) for ``seed``."""
    rng = np.random.default_rng(seed)
    dtype = rng.choice([np.float32, np.float32, np.float64, np.int32, np.complex64])
    ndim = int(rng.integers(1, 4))
    shape = tuple(int(d) for d in rng.integers(1, 7, ndim))
    n_in = int(rng.integers(1, 4))
    inputs = []
    for _ in range(n_in):
        s = tuple(d if rng.random() < 0.8 else 1 for d in shape)
        if dtype == np.int32:
            inputs.append(rng.integers(-20, 20, s).astype(np.int32))
        elif dtype == np.complex64:
            inputs.append((rng.standard_normal(s) + 1j * rng.standard_normal(s)).astype(dtype))
        else:
            inputs.append((rng.standard_normal(s) * 2).astype(dtype))
    recipe: list[tuple] = []
    for _ in range(n_ops):
        op = str(rng.choice({np.int32: OPS_INT, np.complex64: OPS_COMPLEX}.get(dtype, OPS)))
        recipe.append((op, int(rng.integers(0, 1 << 30))))
    n_out = int(rng.integers(1, 4))

    def f(*xs):
        vals = list(xs)
        for op, s in recipe:
            r = np.random.default_rng(s)
            a = vals[int(r.integers(len(vals)))]
            b = vals[int(r.integers(len(vals)))]
            try:
                v = APPLY[op](a, b, r)
            except (ValueError, TypeError):  # shape mismatch for this op: skip it
                continue
            if v is not None:
                vals.append(v)
        return tuple(vals[-n_out:])

    desc = f"seed={seed} dtype={np.dtype(dtype)} shape={shape} ops={[o for o, _ in recipe]}"
    return f, inputs, desc


def _unary(a, b, r):
    fn = r.choice(["exp", "tanh", "neg", "abs", "sqrtabs", "logabs", "logistic", "sin", "square"])
    if fn == "exp":
        return jnp.exp(jnp.tanh(a))
    if fn == "sqrtabs":
        return jnp.sqrt(jnp.abs(a))
    if fn == "logabs":
        return jnp.log(jnp.abs(a) + 1.0)
    if fn == "square":
        return a * a
    if fn == "logistic":
        return lax.logistic(a)
    return getattr(jnp, {"neg": "negative"}.get(fn, fn))(a)


def _binary(a, b, r):
    return [jnp.add, jnp.subtract, jnp.multiply, jnp.maximum, jnp.minimum][int(r.integers(5))](a, b)


def _int_binary(a, b, r):
    fns = [jnp.add, jnp.subtract, jnp.multiply, jnp.maximum, jnp.minimum, jnp.bitwise_xor]
    return fns[int(r.integers(len(fns)))](a, b)


def _where(a, b, r):
    return jnp.where(a > b, a, b)


def _reduce(a, b, r):
    if a.ndim == 0:
        return None
    k = int(r.integers(1, a.ndim + 1))
    axes = tuple(sorted(r.choice(a.ndim, k, replace=False).tolist()))
    red = [lax.reduce_sum, lax.reduce_max, lax.reduce_min][int(r.integers(3))](a, axes)
    if r.random() < 0.5:  # broadcast back and combine (softmax-like)
        kept = tuple(i for i in range(a.ndim) if i not in axes)
        return a - lax.broadcast_in_dim(red, a.shape, kept)
    return red


def _transpose(a, b, r):
    if a.ndim < 2:
        return None
    return lax.transpose(a, tuple(r.permutation(a.ndim).tolist()))


def _reshape(a, b, r):
    return lax.reshape(a, (int(np.prod(a.shape)),)) if r.random() < 0.5 else lax.reshape(a, (*a.shape, 1))


def _slice(a, b, r):
    if a.ndim == 0:
        return None
    starts = [int(r.integers(0, max(d - 1, 0) + 1)) if d > 1 else 0 for d in a.shape]
    limits = [int(r.integers(s + 1, d + 1)) if d > 0 else 0 for s, d in zip(starts, a.shape)]
    strides = [int(r.integers(1, 3)) for _ in a.shape]
    return lax.slice(a, starts, limits, strides)


def _pad(a, b, r):
    if a.ndim == 0:
        return None
    cfg = [(int(r.integers(-1, 3)) if d > 1 else 0, int(r.integers(0, 2)), int(r.integers(0, 2)))
           for d in a.shape]
    return lax.pad(a, lax.convert_element_type(1, a.dtype), cfg)


def _rev(a, b, r):
    return lax.rev(a, tuple(range(a.ndim))[::2])


def _concat(a, b, r):
    if a.ndim == 0 or a.shape != b.shape:
        return None
    return lax.concatenate([a, b], int(r.integers(a.ndim)))


def _matmul(a, b, r):
    if a.ndim == 0:
        return None
    x = a.reshape(-1, a.shape[-1]) if a.ndim > 1 else a.reshape(1, -1)
    w = np.random.default_rng(int(r.integers(1 << 30))).standard_normal((x.shape[-1], 3))
    w = w.astype(np.dtype(a.dtype)) if np.dtype(a.dtype).kind == "f" else (w * 3).astype(np.dtype(a.dtype))
    y = lax.dot(x, lax.convert_element_type(w, a.dtype))
    return y * lax.convert_element_type(2, a.dtype) + lax.convert_element_type(1, a.dtype)


def _sort(a, b, r):
    if a.ndim == 0:
        return None
    return lax.sort(a, int(r.integers(a.ndim)))


def _cunary(a, b, r):
    fn = ["exp", "conj", "abs", "sqrt", "square", "neg", "swap"][int(r.integers(7))]
    if fn == "exp":
        return jnp.exp(a * 0.25)
    if fn == "abs":
        return lax.convert_element_type(jnp.abs(a), a.dtype)
    if fn == "square":
        return a * a * 0.5
    if fn == "swap":
        return lax.complex(jnp.imag(a), jnp.real(a))
    return getattr(jnp, {"neg": "negative"}.get(fn, fn))(a)


def _cbinary(a, b, r):
    return [jnp.add, jnp.subtract, jnp.multiply][int(r.integers(3))](a, b)


def _creduce(a, b, r):
    if a.ndim == 0:
        return None
    k = int(r.integers(1, a.ndim + 1))
    return lax.reduce_sum(a, tuple(sorted(r.choice(a.ndim, k, replace=False).tolist())))


def _fft(a, b, r):
    if a.ndim == 0:
        return None
    return jnp.fft.fft(a, axis=int(r.integers(a.ndim))) * 0.5


APPLY = {"cunary": _cunary, "cbinary": _cbinary, "creduce": _creduce, "fft": _fft,
         "unary": _unary, "binary": _binary, "ibinary": _int_binary, "where": _where, "reduce": _reduce,
         "transpose": _transpose, "reshape": _reshape, "slice": _slice, "pad": _pad, "rev": _rev,
         "concat": _concat, "matmul": _matmul, "sort": _sort}
OPS = ["unary", "unary", "binary", "binary", "where", "reduce", "reduce", "transpose", "reshape", "slice",
       "pad", "rev", "concat", "matmul", "sort"]
OPS_INT = ["ibinary", "ibinary", "where", "reduce", "transpose", "reshape", "slice", "pad", "rev", "concat",
           "matmul", "sort"]
OPS_COMPLEX = ["cunary", "cunary", "cbinary", "cbinary", "creduce", "transpose", "reshape", "slice", "pad",
               "rev", "concat", "matmul", "fft"]
