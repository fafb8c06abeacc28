"""Derivatives of eig's eigenvectors (distinct eigenvalues) against finite differences of LAPACK's
normalized output (unit norm, real largest component): real matrices with real or complex-pair
spectra, complex matrices, batches, both modes, and vmap of the JVP."""

import numpy as np
import pytest

import ember
from ember import linalg as la
from ember.test_util import check_grads

rng = np.random.default_rng(29)


def _real_spectrum(n):
    s = rng.standard_normal((n, n)) + n * np.eye(n)
    return s @ np.diag(np.arange(1.0, n + 1) * 1.5 - 2.0) @ np.linalg.inv(s)


@pytest.mark.parametrize("kind", ["real_eigs", "complex_pairs", "complex", "batched"])
def test_eigenvector_derivatives_match_finite_differences(kind):
    if kind == "real_eigs":
        a = _real_spectrum(4)
    elif kind == "complex_pairs":
        a = rng.standard_normal((4, 4))
    elif kind == "complex":
        a = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    else:
        a = rng.standard_normal((2, 3, 3))
    # eigenvalues must be distinct for the eigenvectors to be differentiable
    w = np.linalg.eigvals(a)
    gaps = np.abs(w[..., :, None] - w[..., None, :]) + np.eye(w.shape[-1])
    assert gaps.min() > 1e-2
    check_grads(lambda x: la.eig(x)[1], (a,), order=1, modes=("fwd", "rev"))
    check_grads(lambda x: la.eig(x), (a,), order=1, modes=("fwd",))


def test_eigenvector_tangent_keeps_normalization():
    a = rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4))
    da = rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4))
    (_, v), (_, dv) = ember.jvp(la.eig, (a,), (da,))
    v, dv = np.asarray(v), np.asarray(dv)
    np.testing.assert_allclose(np.real(np.sum(np.conj(v) * dv, axis=0)), 0, atol=1e-10)  # unit norm kept
    k = np.argmax(np.abs(v), axis=0)
    np.testing.assert_allclose(np.imag(dv[k, np.arange(4)]), 0, atol=1e-10)  # largest entry stays real
    # and the perturbed eigen-equation holds to first order: dA v + A dv = dv w + v dw
    (w, _), (dw, _) = ember.jvp(la.eig, (a,), (da,))
    lhs = da @ v + a @ dv
    rhs = dv * np.asarray(w)[None] + v * np.asarray(dw)[None]
    np.testing.assert_allclose(lhs, rhs, atol=1e-9)


def test_eigenvector_jvp_vmap_and_jit():
    b = rng.standard_normal((3, 3, 3))
    t = rng.standard_normal((3, 3, 3))

    def tangent(x, dx):
        return ember.jvp(lambda y: la.eig(y)[1], (x,), (dx,))[1]

    batched = np.asarray(ember.vmap(tangent)(b, t))
    for i in range(3):
        np.testing.assert_allclose(batched[i], np.asarray(tangent(b[i], t[i])), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(ember.jit(tangent)(b[0], t[0])), batched[0], rtol=1e-10, atol=1e-10)
