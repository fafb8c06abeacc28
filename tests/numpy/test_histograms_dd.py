"""ember.numpy.histogramdd / histogram2d against NumPy: int, per-axis and explicit-edge bins,
ranges (values outside dropped, right edge included), weights, density, input forms, dtypes,
jit and errors."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember.errors import ShapeError

rng = np.random.default_rng(8)


def _check(got, want, rtol=1e-12):
    h, edges = got
    wh, wedges = want
    np.testing.assert_allclose(np.asarray(h), wh, rtol=rtol, atol=rtol)
    assert len(edges) == len(wedges)
    for e, we in zip(edges, wedges):
        np.testing.assert_allclose(np.asarray(e), we, rtol=rtol, atol=rtol)


KWARGS = [
    dict(),
    dict(bins=4),
    dict(bins=(3, 4, 5)),
    dict(bins=[np.linspace(-2, 2, 5), 3, np.array([-1.0, 0.0, 0.5, 3.0])]),
    dict(bins=3, range=[(-1, 1), None, (0, 2)]),
    dict(bins=4, density=True),
    dict(bins=(2, 3, 4), weights="w"),
    dict(bins=3, weights="w", density=True),
]


@pytest.mark.parametrize("kw", KWARGS, ids=[f"kw{i}" for i in range(len(KWARGS))])
def test_histogramdd_matches_numpy(kw):
    s = rng.standard_normal((200, 3))
    kw = dict(kw)
    if kw.get("weights") == "w":
        kw["weights"] = rng.random(200)
    _check(jnp.histogramdd(s, **kw), np.histogramdd(s, **kw))


def test_histogramdd_input_forms_and_edges():
    x, y = rng.standard_normal(50), rng.standard_normal(50)
    # a sequence of coordinate arrays, and a 1-D sample
    _check(jnp.histogramdd([x, y], bins=(3, 2)), np.histogramdd([x, y], bins=(3, 2)))
    _check(jnp.histogramdd(x, bins=5), np.histogramdd(x, bins=5))
    # values on the edges: the last bin includes its right edge, values outside are dropped
    pts = np.array([[0.0, 0.0], [1.0, 1.0], [0.5, 1.0], [1.5, 0.2], [-0.1, 0.5], [1.0, 0.0]])
    rg = [(0, 1), (0, 1)]
    _check(jnp.histogramdd(pts, bins=2, range=rg), np.histogramdd(pts, bins=2, range=rg))
    # a constant coordinate gets the range (v - 0.5, v + 0.5)
    c = np.stack([np.full(10, 3.0), rng.standard_normal(10)], 1)
    _check(jnp.histogramdd(c, bins=3), np.histogramdd(c, bins=3))


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_histogramdd_dtypes(dtype):
    s = (rng.standard_normal((100, 2)) * 5).astype(dtype)
    h, edges = jnp.histogramdd(s, bins=4)
    wh, wedges = np.histogramdd(s, bins=4)
    assert h.dtype == np.int32  # counts, as JAX
    np.testing.assert_array_equal(np.asarray(h), wh)
    for e, we in zip(edges, wedges):
        np.testing.assert_allclose(np.asarray(e), we, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("bins", [10, 5, [3, 4], np.linspace(-2, 2, 6), [np.linspace(-2, 2, 6), 4]],
                         ids=["default", "int", "pair", "edges", "mixed"])
def test_histogram2d_matches_numpy(bins):
    x, y = rng.standard_normal(80), rng.standard_normal(80)
    h, xe, ye = jnp.histogram2d(x, y, bins=bins)
    wh, wxe, wye = np.histogram2d(x, y, bins=bins)
    np.testing.assert_allclose(np.asarray(h), wh)
    np.testing.assert_allclose(np.asarray(xe), wxe, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(ye), wye, rtol=1e-12)
    w = rng.random(80)
    h, _, _ = jnp.histogram2d(x, y, bins=bins, weights=w, density=True)
    np.testing.assert_allclose(np.asarray(h), np.histogram2d(x, y, bins=bins, weights=w, density=True)[0],
                               rtol=1e-12)


def test_histogram2d_under_jit():
    x, y = rng.standard_normal(60), rng.standard_normal(60)

    @ember.jit
    def f(a, b):
        return jnp.histogram2d(a, b, bins=4, range=[(-1, 1), (-2, 2)])

    h, xe, ye = f(x, y)
    wh, wxe, wye = np.histogram2d(x, y, bins=4, range=[(-1, 1), (-2, 2)])
    np.testing.assert_array_equal(np.asarray(h), wh)
    np.testing.assert_allclose(np.asarray(xe), wxe, rtol=1e-12)


def test_histogramdd_errors():
    s = np.zeros((5, 2))
    with pytest.raises(ValueError, match="dimension of bins"):
        jnp.histogramdd(s, bins=(2, 3, 4))
    with pytest.raises(ValueError, match="range"):
        jnp.histogramdd(s, range=[(0, 1)])
    with pytest.raises(ShapeError, match="weights"):
        jnp.histogramdd(s, weights=np.ones(4))
    with pytest.raises(ShapeError):
        jnp.histogram2d(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="positive"):
        jnp.histogramdd(s, bins=0)


def test_histogramdd_vmap_over_samples():
    batch = rng.standard_normal((3, 40, 2))

    def counts(s):
        return jnp.histogramdd(s, bins=3, range=[(-1, 1), (-2, 2)])[0]

    got = np.asarray(ember.vmap(counts)(batch))
    for i in range(3):
        np.testing.assert_array_equal(got[i], np.histogramdd(batch[i], bins=3, range=[(-1, 1), (-2, 2)])[0])
    # data-dependent edges (no range) are per sample too
    h, edges = ember.vmap(lambda s: jnp.histogramdd(s, bins=4))(batch)
    for i in range(3):
        wh, we = np.histogramdd(batch[i], bins=4)
        np.testing.assert_array_equal(np.asarray(h)[i], wh)
        np.testing.assert_allclose(np.asarray(edges[0])[i], we[0], rtol=1e-12)
