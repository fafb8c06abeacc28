"""ember.image.resize / scale_and_translate against hand-derived values and jax.image."""

import numpy as np
import pytest

import ember
from ember import image

RNG = np.random.default_rng(8)


def test_linear_upsample_and_constant_downsample():
    # output pixel o samples input position (o + 0.5) / 2 - 0.5: -0.25, 0.25, 0.75, 1.25 (edges clamp)
    up = image.resize(np.array([0.0, 1.0]), (4,), "linear")
    np.testing.assert_allclose(up, [0, 0.25, 0.75, 1], atol=1e-7)
    flat = np.full((8, 6), 3.0)
    for method in ("linear", "cubic", "lanczos3", "lanczos5"):
        np.testing.assert_allclose(image.resize(flat, (3, 5), method), np.full((3, 5), 3.0), rtol=1e-6)
    np.testing.assert_array_equal(image.resize(np.arange(4.0), (8,), "nearest"), np.repeat(np.arange(4.0), 2))
    # antialiased halving with a triangle kernel twice as wide: weights (0.75, 0.75, 0.25) / 1.75 at 0.5
    np.testing.assert_allclose(image.resize(np.arange(1.0, 5.0), (2,), "linear")[0], 3.0 / 1.75, rtol=1e-6)
    with pytest.raises(ValueError, match="method"):
        image.resize(flat, (3, 5), "bogus")


@pytest.mark.parametrize("method", ["nearest", "linear", "cubic", "lanczos3", "lanczos5"])
@pytest.mark.parametrize("shape", [(14, 5, 3), (4, 18, 3)])
@pytest.mark.parametrize("antialias", [True, False])
def test_resize_matches_jax(method, shape, antialias):
    jax = pytest.importorskip("jax", reason="JAX comparison")
    img = RNG.normal(size=(7, 9, 3)).astype(np.float32)
    want = np.asarray(jax.image.resize(img, shape, method, antialias=antialias))
    np.testing.assert_allclose(image.resize(img, shape, method, antialias=antialias), want, atol=1e-5)


def test_scale_and_translate_jit_grad_and_jax():
    img = RNG.normal(size=(6, 6)).astype(np.float32)
    f = ember.jit(lambda x: image.scale_and_translate(x, (9, 4), (0, 1), np.array([1.5, 0.7], np.float32),
                                                      np.array([0.3, -0.2], np.float32), "cubic"))
    out = np.asarray(f(img))
    g = ember.grad(lambda x: image.resize(x, (12, 12), "linear").sum())(img)
    assert g.shape == img.shape and np.all(np.asarray(g) > 0)
    jax = pytest.importorskip("jax", reason="JAX comparison")
    want = jax.image.scale_and_translate(img, (9, 4), (0, 1), np.array([1.5, 0.7], np.float32),
                                         np.array([0.3, -0.2], np.float32), "cubic")
    np.testing.assert_allclose(out, np.asarray(want), atol=1e-5)
