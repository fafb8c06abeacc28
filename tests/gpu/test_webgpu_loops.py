"""``scan`` / ``fori_loop`` with a static trip count on WebGPU (preencoded dispatches over ping-pong
carry buffers, one submission) and host-driven ``while_loop``, compared with the CPU backend."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.gpu import webgpu
from ember._src.gpu.device_array import DeviceArray
from tests.gpu.cases import scan_loss

_WHY = webgpu.unavailable_reason()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"no WebGPU adapter: {_WHY}")


def _both(f, *args):
    want = ember.tree.leaves(ember.jit(f, backend="native")(*args))
    got = ember.tree.leaves(ember.jit(f, backend="webgpu")(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=3e-5, atol=3e-5)


def _f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_with_xs_ys_consts_and_reductions(reverse: bool) -> None:
    w = _f32(3, 3, seed=1)

    def f(c, xs):
        def body(c, x):
            n = jnp.tanh(c @ w) + x
            return n, (n * 2.0, jnp.sum(n), 1.0)
        return lax.scan(body, c, xs, reverse=reverse)
    _both(f, _f32(2, 3), _f32(5, 2, 3, seed=2))


def test_fori_loop_carry_kinds() -> None:
    """A counter, a carry passed through unchanged, two carries swapping (copied, not ping-ponged)."""
    def f(x, y):
        def body(i, c):
            a, b, keep, s = c
            return b, a * 0.5 + jnp.sin(b) + i, keep, s + jnp.sum(a)
        return lax.fori_loop(0, 7, body, (x, y, x * 3, jnp.float32(0)))
    _both(f, _f32(4), _f32(4, seed=3))


def test_zero_and_one_step() -> None:
    for n in (0, 1):
        _both(lambda c, xs: lax.scan(lambda c, x: (c + x, c * x), c, xs), _f32(3), _f32(n, 3))


def test_a_loop_between_kernels_keeps_values_on_the_device() -> None:
    def f(x):
        y = jnp.exp(x) * 0.1
        y = lax.fori_loop(0, 4, lambda i, c: jnp.cos(c) + c * 0.5, y)
        return jnp.sum(y * y)
    x = _f32(64)
    _both(f, x)
    dx = ember.device_put(x, "webgpu:0")
    g = ember.jit(f)
    g(dx)
    before = dict(webgpu.TRANSFERS)
    out = g(dx)
    assert isinstance(out, DeviceArray) and webgpu.TRANSFERS == before
    text = ember.jit(f, backend="webgpu").lower(x).compile().as_text()
    assert "// scan: 4 steps preencoded in one submission" in text


def test_grad_through_a_scan() -> None:
    _both(ember.grad(scan_loss), _f32(3), _f32(6, 3, seed=4))


def test_while_loop_is_host_driven_with_the_carries_on_the_device() -> None:
    def f(x):
        def body(c):
            return c[0] + 1, c[1] * 2.0 + 1.0
        return lax.while_loop(lambda c: jnp.sum(c[1]) < 100.0, body, (0, x))
    x = np.ones(3, np.float32)
    _both(f, x)
    dx = ember.device_put(x, "webgpu:0")
    g = ember.jit(f)
    g(dx)
    before = dict(webgpu.TRANSFERS)
    n, c = g(dx)
    after = dict(webgpu.TRANSFERS)
    # sums 3, 9, 21, 45, 93, 189: five steps, six one-boolean reads; the literal 0 carry goes up once
    assert after["device_to_host"] - before["device_to_host"] == 6
    assert after["device_to_host_bytes"] - before["device_to_host_bytes"] == 24
    assert after["host_to_device"] - before["host_to_device"] == 1
    assert isinstance(c, DeviceArray) and int(n) == 5
    np.testing.assert_array_equal(np.asarray(c), np.full(3, 63.0))
    assert "// while: host-driven" in ember.jit(f, backend="webgpu").lower(x).compile().as_text()


def test_a_loop_with_a_primitive_without_a_kernel_is_a_clear_error() -> None:
    def f(x):
        return lax.fori_loop(0, 3, lambda i, c: jnp.sort(c) * 0.5, x)
    x = np.array([3.0, 1.0, 2.0], np.float32)
    with pytest.raises(NotImplementedError, match="no kernel for primitive 'sort': in the body of a 'scan'"):
        ember.jit(f, backend="webgpu")(x)
    got = ember.jit(f, backend="webgpu", host_fallback=True)(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ember.jit(f, backend="native")(x)))


def test_cond_and_switch_run_on_the_device() -> None:
    """``cond``: the index is read back (4 bytes) and the chosen branch runs on the device over the
    operands' buffers; ``switch`` clamps the index into range (JAX's rule); values as the CPU's."""
    def f(p, x, y):
        return lax.cond(jnp.sum(p) > 0, lambda a, b: jnp.tanh(a) * b, lambda a, b: a - b + 1.0, x, y)
    x, y = _f32(2, 3), _f32(2, 3, seed=4)
    for p in (np.ones(3, np.float32), -np.ones(3, np.float32)):
        _both(f, p, x, y)

    def s(i, v):
        return lax.switch(i, [lambda v: v + 1.0, lambda v: jnp.exp(v) * 3.0, lambda v: -v], v)
    for i in (-4, 0, 1, 2, 9):
        _both(s, np.int32(i), x)
    assert "// cond: host-driven" in ember.jit(s, backend="webgpu").lower(np.int32(0), x).compile().as_text()
    # device inputs: one 4-byte read of the index, nothing else crosses; the result stays there
    dp, dx, dy = (ember.device_put(a, "webgpu:0") for a in (np.ones(3, np.float32), x, y))
    g = ember.jit(f)
    g(dp, dx, dy)
    before = dict(webgpu.TRANSFERS)
    out = g(dp, dx, dy)
    after = dict(webgpu.TRANSFERS)
    assert after["device_to_host"] - before["device_to_host"] == 1
    assert after["device_to_host_bytes"] - before["device_to_host_bytes"] == 4
    assert after["host_to_device"] == before["host_to_device"]
    assert isinstance(out, DeviceArray)
    np.testing.assert_allclose(np.asarray(out), np.tanh(x) * y, rtol=1e-5, atol=1e-6)


def test_grad_and_vmap_of_a_cond_on_the_device() -> None:
    def loss(w, x):
        return jnp.sum(lax.cond(jnp.sum(x) > 0, lambda a: jnp.sin(a * w), lambda a: a * w * w, x))
    w = np.float32(0.7)
    for x in (_f32(4) + 2.0, _f32(4) - 2.0):
        _both(ember.grad(loss), w, x)
    _both(ember.vmap(lambda x: lax.cond(x[0] > 0, lambda a: a * 2.0, lambda a: a - 1.0, x)), _f32(5, 3))


def test_a_cond_branch_without_a_kernel_is_a_clear_error() -> None:
    def f(x):
        return lax.cond(x[0] > 0, lambda a: jnp.sort(a), lambda a: a, x)
    x = np.array([3.0, 1.0, 2.0], np.float32)
    # (cond's branches are (false, true), as in JAX: the sorting one is branch 1)
    with pytest.raises(NotImplementedError, match="primitive 'sort': in the branch 1 of a 'cond'"):
        ember.jit(f, backend="webgpu")(x)
    got = ember.jit(f, backend="webgpu", host_fallback=True)(x)
    np.testing.assert_array_equal(np.asarray(got), [1, 2, 3])
