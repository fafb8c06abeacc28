"""Large samples of every ember.random sampler from one key, and a compact fingerprint of their
bits, shared by the classic-scheme and partitionable-scheme tests (whose reference fingerprints
were recorded from JAX 0.10.2 under each scheme)."""

from __future__ import annotations

import numpy as np

import ember.numpy as jnp
import ember.random as er

N = 100001

_LOGP = np.log(np.array([0.1, 0.2, 0.3, 0.4], np.float32))
SAMPLERS = {
    "bits_u32": lambda k: er.bits(k, (N,)),
    "bits_u8": lambda k: er.bits(k, (N,), jnp.uint8),
    "bits_u16": lambda k: er.bits(k, (N,), jnp.uint16),
    "uniform_f32": lambda k: er.uniform(k, (N,), minval=-2.0, maxval=3.0),
    "uniform_f16": lambda k: er.uniform(k, (N,), jnp.float16),
    "uniform_bf16": lambda k: er.uniform(k, (N,), jnp.bfloat16),
    "normal_f32": lambda k: er.normal(k, (N,)),
    "normal_f16": lambda k: er.normal(k, (N,), jnp.float16),
    "normal_bf16": lambda k: er.normal(k, (N,), jnp.bfloat16),
    "normal_c64": lambda k: er.normal(k, (N,), jnp.complex64),
    "exponential": lambda k: er.exponential(k, (N,)),
    "gumbel": lambda k: er.gumbel(k, (N,)),
    "laplace": lambda k: er.laplace(k, (N,)),
    "logistic": lambda k: er.logistic(k, (N,)),
    "randint": lambda k: er.randint(k, (N,), -7, 1000),
    "bernoulli": lambda k: er.bernoulli(k, 0.3, (N,)),
    "categorical": lambda k: er.categorical(k, _LOGP, shape=(N,)),
    "permutation": lambda k: er.permutation(k, 1000),
    "split": lambda k: er.split(k, 5000),
    "bits_u64": lambda k: er.bits(k, (N,), jnp.uint64),
    "uniform_f64": lambda k: er.uniform(k, (N,), jnp.float64, minval=-2.0, maxval=3.0),
    "normal_f64": lambda k: er.normal(k, (N,), jnp.float64),
    "randint_i64": lambda k: er.randint(k, (N,), -7, 2**40, jnp.int64),
}


def sample(name: str):
    """Sampler ``name`` on ``PRNGKey(1234)`` (the key the reference values were recorded with)."""
    return SAMPLERS[name](er.PRNGKey(1234))


def fingerprint(x) -> tuple[int, tuple[int, ...]]:
    """The wrapping uint64 sum of the raw bit patterns and the first three patterns."""
    x = np.asarray(x)
    if x.dtype == np.bool_:
        x = x.astype(np.uint8)
    if x.dtype.kind == "c":
        x = x.view(np.float32 if x.dtype == np.complex64 else np.float64)
    b = x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize]).astype(np.uint64)
    return int(np.sum(b, dtype=np.uint64)), tuple(int(v) for v in b.ravel()[:3])
