"""Nested loops on WebGPU: a ``fori_loop``/``scan`` with a static trip count inside a ``scan`` body is
unrolled into the body, and the whole nest runs preencoded; compared with the CPU backend."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.gpu import nested, webgpu
from ember._src.gpu.device_array import DeviceArray

_WHY = webgpu.unavailable_reason()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"no WebGPU adapter: {_WHY}")


def _both(f, *args, **kw):
    want = ember.tree.leaves(ember.jit(f, backend="native")(*args))
    got = ember.tree.leaves(ember.jit(f, backend="webgpu", **kw)(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=3e-5, atol=3e-5)


def _f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def test_fori_loop_in_a_scan_body_runs_preencoded() -> None:
    def f(x0, xs, w):
        def body(c, x):
            c = lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c @ w) * 0.5 + x * i, c)
            return c, jnp.sum(c * c)
        return lax.scan(body, x0, xs)
    args = (_f32(4), _f32(5, 4, seed=1), _f32(4, 4, seed=2))
    _both(f, *args)
    text = ember.jit(f, backend="webgpu").lower(*args).compile().as_text()
    assert "// scan: 5 steps preencoded in one submission" in text and "host" not in text
    dev = [ember.device_put(a, "webgpu:0") for a in args]
    g = ember.jit(f)
    g(*dev)
    before = dict(webgpu.TRANSFERS)
    c, ys = g(*dev)
    assert isinstance(c, DeviceArray) and webgpu.TRANSFERS == before  # no host step in the nest


@pytest.mark.parametrize("reverse", [False, True])
def test_a_scan_with_xs_and_ys_in_a_scan_body(reverse: bool) -> None:
    def f(x0, xss):
        def outer(c, xs):
            def inner(d, x):
                d = jnp.sin(d + x) * c
                return d, d * 2.0
            d, ys = lax.scan(inner, c, xs, reverse=reverse)
            return d + 1.0, ys
        return lax.scan(outer, x0, xss)
    _both(f, _f32(3), _f32(4, 5, 3, seed=3))


def test_three_levels_and_grad() -> None:
    def loss(w, x):
        def mid(c, _):
            step = lambda j, d: jnp.tanh(d * w + 0.1)  # noqa: E731
            c = lax.fori_loop(0, 2, lambda i, c: lax.fori_loop(0, 2, step, c), c)
            return c, c
        c, ys = lax.scan(mid, x, None, length=3)
        return jnp.sum(c) + jnp.sum(ys * ys)
    _both(loss, _f32(6), _f32(6, seed=5))
    _both(ember.grad(loss), _f32(6), _f32(6, seed=5))


def test_a_nest_too_long_to_unroll_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setattr(nested, "MAX_EQNS", 20)

    def f(x):
        return lax.fori_loop(0, 2, lambda i, c: lax.fori_loop(0, 50, lambda j, d: jnp.cos(d), c), x)
    x = _f32(3)
    with pytest.raises(NotImplementedError, match="unroll to more than 20 equations"):
        ember.jit(f, backend="webgpu")(x)
    _both(f, x, host_fallback=True)


def test_a_while_without_kernels_in_a_scan_body_is_a_clear_error() -> None:
    """(A ``while`` in a scan body runs stepped from the host: test_webgpu_nested_control.py.)"""
    def f(x):
        return lax.fori_loop(0, 2, lambda i, c: lax.while_loop(lambda d: jnp.sum(d) < 10.0,
                                                                lambda d: jnp.sort(d) * 2.0, c), x)
    x = np.ones(3, np.float32)
    with pytest.raises(NotImplementedError, match="primitive 'sort': in the body of a 'while'"):
        ember.jit(f, backend="webgpu")(x)
    _both(f, x, host_fallback=True)
