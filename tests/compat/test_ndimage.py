"""ember.scipy.ndimage.map_coordinates against scipy.ndimage and JAX."""

import numpy as np
import pytest
import scipy.ndimage as nd

import ember
from ember.scipy.ndimage import map_coordinates

RNG = np.random.default_rng(6)
IMG = RNG.normal(size=(5, 6))
INSIDE = [RNG.uniform(0, 4, size=(3, 4)), RNG.uniform(0, 5, size=(3, 4))]
OUTSIDE = [RNG.uniform(-3, 7, size=(20,)), RNG.uniform(-3, 8, size=(20,))]


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("mode,scipy_mode", [("nearest", "nearest"), ("wrap", "grid-wrap"),
                                             ("mirror", "mirror"), ("reflect", "reflect")])
def test_modes_against_scipy(order, mode, scipy_mode):
    for pts in (INSIDE, OUTSIDE):
        want = nd.map_coordinates(IMG, pts, order=order, mode=scipy_mode)
        np.testing.assert_allclose(map_coordinates(IMG, pts, order, mode), want, atol=1e-12)


def test_constant_inside_and_far_outside():
    for order in (0, 1):
        np.testing.assert_allclose(map_coordinates(IMG, INSIDE, order, cval=0.0),
                                   nd.map_coordinates(IMG, INSIDE, order=order, mode="constant"), atol=1e-12)
    far = [np.array([-5.0, 20.0]), np.array([2.0, 2.0])]
    np.testing.assert_allclose(map_coordinates(IMG, far, 1, cval=7.0), [7.0, 7.0])


def test_jit_grad_and_jax():
    f = ember.jit(lambda img, a, b: map_coordinates(img, [a, b], 1, "nearest"))
    np.testing.assert_allclose(f(IMG, *INSIDE), nd.map_coordinates(IMG, INSIDE, order=1, mode="nearest"),
                               atol=1e-12)
    g = ember.grad(lambda c: map_coordinates(IMG, [c, np.array(2.0)], 1).sum())(np.array(1.25))
    np.testing.assert_allclose(g, IMG[2, 2] - IMG[1, 2], rtol=1e-12)  # slope of the linear interpolant
    jnd = pytest.importorskip("jax.scipy.ndimage", reason="JAX comparison")
    img32 = IMG.astype(np.float32)
    pts = [p.astype(np.float32) for p in OUTSIDE]
    for mode in ("constant", "nearest", "wrap", "mirror", "reflect"):
        np.testing.assert_allclose(map_coordinates(img32, pts, 1, mode),
                                   np.asarray(jnd.map_coordinates(img32, pts, 1, mode)), rtol=1e-5, atol=1e-5)
