"""ember.numpy, nn, linalg and fft functions on float64/int64 NumPy input in the default (32-bit)
mode, eagerly and under jit, against JAX in its default mode: the same result dtypes and values
within float32 tolerance."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp

jax = pytest.importorskip("jax", reason="the reference for the default (32-bit) mode is JAX")
import jax.numpy as jjnp  # noqa: E402

pytestmark = pytest.mark.skipif(bool(jax.config.jax_enable_x64),
                                reason="JAX runs with x64 enabled here, not its default mode")

rng = np.random.default_rng(7)
A = rng.standard_normal((4, 5))            # float64
B = rng.standard_normal((5, 3))
P = rng.uniform(0.5, 2.0, (4, 5))          # positive float64
IDX = rng.integers(0, 4, 6)                # int64
SPD = A @ A.T + 4 * np.eye(4)

CASES = {
    "sin": (lambda m: m.sin, (A,)),
    "exp": (lambda m: m.exp, (A,)),
    "log1p": (lambda m: m.log1p, (P,)),
    "sqrt": (lambda m: m.sqrt, (P,)),
    "tanh": (lambda m: m.tanh, (A,)),
    "add_int": (lambda m: m.add, (A, rng.integers(-3, 3, (4, 5)))),
    "multiply_scalar": (lambda m: (lambda x: x * 3), (A,)),
    "true_divide_ints": (lambda m: m.true_divide, (IDX, IDX + 1)),
    "floor_divide_ints": (lambda m: m.floor_divide, (IDX * 7, IDX + 1)),
    "power": (lambda m: m.power, (P, A)),
    "maximum": (lambda m: m.maximum, (A, 0.0)),
    "arctan2": (lambda m: m.arctan2, (A, P)),
    "sum": (lambda m: m.sum, (A,)),
    "sum_int": (lambda m: m.sum, (IDX,)),
    "mean_int": (lambda m: m.mean, (IDX,)),
    "var": (lambda m: (lambda x: m.var(x, axis=0)), (A,)),
    "std": (lambda m: (lambda x: m.std(x, axis=1)), (A,)),
    "prod": (lambda m: (lambda x: m.prod(x, axis=1)), (P,)),
    "cumsum_int": (lambda m: m.cumsum, (IDX,)),
    "argmax": (lambda m: (lambda x: m.argmax(x, axis=1)), (A,)),
    "argsort": (lambda m: (lambda x: m.argsort(x, axis=1)), (A,)),
    "sort": (lambda m: (lambda x: m.sort(x, axis=0)), (A,)),
    "matmul": (lambda m: m.matmul, (A, B)),
    "einsum": (lambda m: (lambda x, y: m.einsum("ij,jk->ik", x, y)), (A, B)),
    "take": (lambda m: (lambda x, i: m.take(x, i, axis=0)), (A, IDX)),
    "where": (lambda m: (lambda x: m.where(x > 0, x, -1)), (A,)),
    "clip": (lambda m: (lambda x: m.clip(x, -0.5, 0.5)), (A,)),
    "round": (lambda m: (lambda x: m.round(x * 10)), (A,)),
    "concatenate": (lambda m: (lambda x, y: m.concatenate([x, y.T], axis=1)),
                    (A, rng.standard_normal((5, 4)))),
    "arange_float_stop": (lambda m: (lambda x: x + m.arange(5.0)), (A,)),
    "linspace": (lambda m: (lambda x: x * m.linspace(0, 1, 5)), (A,)),
    "inv": (lambda m: m.linalg.inv, (SPD,)),
    "solve": (lambda m: m.linalg.solve, (SPD, A)),
    "cholesky": (lambda m: m.linalg.cholesky, (SPD,)),
    "eigvalsh": (lambda m: m.linalg.eigvalsh, (SPD,)),
    "norm": (lambda m: m.linalg.norm, (A,)),
    "fft": (lambda m: m.fft.fft, (A,)),
    "rfft": (lambda m: (lambda x: m.fft.rfft(x, axis=0)), (A,)),
    "one_hot_int": (None, (IDX,)),
    "softmax": (None, (A,)),
    "logsumexp": (None, (A,)),
}


def _fn(name: str, lib: str):
    make, _ = CASES[name]
    if make is not None:
        return make(jnp if lib == "ember" else jjnp)
    nn = ember.nn if lib == "ember" else jax.nn
    special = ember.scipy.special if lib == "ember" else jax.scipy.special
    return {"one_hot_int": lambda i: nn.one_hot(i, 4),
            "softmax": lambda x: nn.softmax(x, axis=-1),
            "logsumexp": lambda x: special.logsumexp(x, axis=1)}[name]


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_jax_default_mode(name, mode):
    args = CASES[name][1]
    f, g = _fn(name, "ember"), _fn(name, "jax")
    if mode == "jit":
        f, g = ember.jit(f), jax.jit(g)
    got, want = f(*args), g(*args)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    w = np.asarray(want)
    tol = 2e-4 if name in ("inv", "solve", "cholesky", "eigvalsh") else 2e-5
    np.testing.assert_allclose(np.asarray(got), w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max())))
