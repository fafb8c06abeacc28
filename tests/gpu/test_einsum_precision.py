"""``precision=`` of ``jnp.einsum`` (and ``jnp.linalg.multi_dot``): JAX's accepted values ride on
every ``dot_general`` the contraction makes, so they reach the CUDA backend's GEMM steps and
choose cuBLAS's compute type there, through ``grad`` too; bad values are a ValueError naming the
argument; the CPU computes every level alike (checked against NumPy)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.gpu import cuda_blas
from ember._src.prims.dot import Precision

P = lax.Precision


def _r(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


# (precision= as given, the precision the equation carries, cuBLAS's compute type for float32)
VALUES = [
    (None, None, cuda_blas.COMPUTE_32F),
    ("default", Precision.DEFAULT, cuda_blas.COMPUTE_32F_FAST_16BF),
    ("high", Precision.HIGH, cuda_blas.COMPUTE_32F_FAST_TF32),
    ("highest", Precision.HIGHEST, cuda_blas.COMPUTE_32F),
    ("bfloat16", Precision.DEFAULT, cuda_blas.COMPUTE_32F_FAST_16BF),
    ("tensorfloat32", Precision.HIGH, cuda_blas.COMPUTE_32F_FAST_TF32),
    ("float32", Precision.HIGHEST, cuda_blas.COMPUTE_32F),
    (P.DEFAULT, Precision.DEFAULT, cuda_blas.COMPUTE_32F_FAST_16BF),
    (P.HIGH, Precision.HIGH, cuda_blas.COMPUTE_32F_FAST_TF32),
    (P.HIGHEST, Precision.HIGHEST, cuda_blas.COMPUTE_32F),
    (("bfloat16", "highest"), Precision.HIGHEST, cuda_blas.COMPUTE_32F),  # a pair: the higher
    ((P.DEFAULT, P.HIGH), Precision.HIGH, cuda_blas.COMPUTE_32F_FAST_TF32),
    ([P.HIGH, None], Precision.HIGH, cuda_blas.COMPUTE_32F_FAST_TF32),
]
_IDS = [repr(v[0]) for v in VALUES]

# (subscripts, operand shapes, dot_generals the contraction makes)
SPECS = [
    ("ij,jk->ik", [(3, 4), (4, 5)], 1),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], 1),
    ("ij,kj->ik", [(3, 4), (5, 4)], 1),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)], 2),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)], 1),
]


def _operands(shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    return [_r(*s, seed=i) for i, s in enumerate(shapes)]


def _gemms(f, args) -> list:
    exe = ember.jit(f, backend="cuda").lower(*args).executable
    return [k for k in exe.schedule.kernels if k.kind == "gemm"]


@pytest.mark.parametrize("value,carried,compute", VALUES, ids=_IDS)
@pytest.mark.parametrize("spec,shapes,count", SPECS, ids=[s[0] for s in SPECS])
def test_einsums_precision_reaches_every_gemm_step(spec: str, shapes, count: int, value, carried,
                                                   compute: int) -> None:
    """Each product's GEMM step carries the precision; under any ``jax_default_matmul_precision``
    it (when given) chooses the compute type; the CPU result is NumPy's."""
    args = _operands(shapes)
    f = lambda *xs: jnp.einsum(spec, *xs, precision=value)  # noqa: E731
    gemms = _gemms(f, args)
    assert len(gemms) == count
    for k in gemms:
        g = k.info["gemm"]
        assert g["precision"] == carried
        sizes = tuple(int(g[d]) for d in "BMNK")
        for setting in (None, Precision.DEFAULT, Precision.HIGHEST):
            got = cuda_blas.gemm_arguments(g, sizes, 1, 2, 3, setting)["computeType"]
            want = compute if carried is not None else cuda_blas.compute_type(np.dtype(np.float32), setting)
            assert got == want
    want = np.einsum(spec, *(a.astype(np.float64) for a in args))
    np.testing.assert_allclose(np.asarray(jnp.einsum(spec, *args, precision=value)), want, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(ember.jit(f)(*args)), want, rtol=1e-5, atol=1e-6)


def test_the_precision_rides_on_the_equation_and_through_grad_and_vmap() -> None:
    x, w = _r(3, 4), _r(4, 5, seed=1)
    prog = ember.make_jaxpr(lambda a, b: jnp.einsum("ij,jk->ik", a, b, precision="tensorfloat32"))(x, w)
    (e,) = [e for e in prog.eqns if e.prim.name == "dot_general"]
    assert e.params["precision"] == Precision.HIGH
    plain = ember.make_jaxpr(lambda a, b: jnp.einsum("ij,jk->ik", a, b))(x, w)
    assert "precision" not in [e for e in plain.eqns if e.prim.name == "dot_general"][0].params
    loss = lambda a, b: jnp.sum(jnp.einsum("ij,jk->ik", a, b, precision="bfloat16") ** 2)  # noqa: E731
    gemms = _gemms(ember.grad(loss, argnums=(0, 1)), (x, w))
    assert len(gemms) == 3 and all(k.info["gemm"]["precision"] == Precision.DEFAULT for k in gemms)
    ga, gb = ember.grad(loss, argnums=(0, 1))(x, w)
    c = x.astype(np.float64) @ w
    np.testing.assert_allclose(np.asarray(ga), 2 * c @ w.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(gb), 2 * x.T.astype(np.float64) @ c, rtol=1e-5, atol=1e-6)
    xs = _r(6, 3, 4, seed=2)
    batched = ember.vmap(lambda a: jnp.einsum("ij,jk->ik", a, w, precision="high"))
    (k,) = _gemms(batched, (xs,))
    assert k.info["gemm"]["precision"] == Precision.HIGH
    np.testing.assert_allclose(np.asarray(batched(xs)), np.einsum("bij,jk->bik", xs.astype(np.float64), w),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", ["fast-ish", 3, ("high", "high", "high"), ("high", "nope"), 1.5])
def test_a_bad_precision_is_an_error_naming_the_argument(bad) -> None:
    x, w = _r(3, 4), _r(4, 5, seed=1)
    with pytest.raises(ValueError, match="precision argument must be"):
        jnp.einsum("ij,jk->ik", x, w, precision=bad)
    with pytest.raises(ValueError, match="precision argument must be"):
        jnp.einsum("ii", _r(3, 3), precision=bad)  # (no product: still validated)
    with pytest.raises(ValueError, match="precision argument must be"):
        jnp.linalg.multi_dot([x, w, _r(5, 2)], precision=bad)


def test_multi_dots_precision_reaches_every_gemm_step() -> None:
    mats = [_r(3, 4), _r(4, 5, seed=1), _r(5, 2, seed=2)]
    f = lambda a, b, c: jnp.linalg.multi_dot([a, b, c], precision=P.HIGH)  # noqa: E731
    gemms = _gemms(f, mats)
    assert len(gemms) == 2 and all(k.info["gemm"]["precision"] == Precision.HIGH for k in gemms)
    assert all(k.info["gemm"]["precision"] is None for k in _gemms(lambda a, b, c: jnp.linalg.multi_dot(
        [a, b, c]), mats))
    want = np.linalg.multi_dot([m.astype(np.float64) for m in mats])
    np.testing.assert_allclose(np.asarray(f(*mats)), want, rtol=1e-5, atol=1e-6)
    v = _r(3, seed=3)
    np.testing.assert_allclose(np.asarray(jnp.linalg.multi_dot([v, mats[0], mats[1]], precision="highest")),
                               np.linalg.multi_dot([v.astype(np.float64), mats[0], mats[1]]), rtol=1e-5)
