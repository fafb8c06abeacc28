"""``cond`` and ``while_loop`` inside a device ``scan`` body on WebGPU: a ``cond`` becomes a select of
its branches in the preencoded body (no read-back per step), a ``while`` makes the scan step from
the host over device buffers; compared with the CPU backend at several trip counts (CUDA: the
select form of a body compiles through NVRTC)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.gpu import cuda_runtime, nested, symbolic, webgpu
from ember._src.gpu.device_array import DeviceArray

_WHY = webgpu.unavailable_reason()
needs_webgpu = pytest.mark.skipif(_WHY is not None, reason=f"no WebGPU adapter: {_WHY}")
_NO_NVRTC = cuda_runtime.nvrtc_unavailable_reason()
needs_nvrtc = pytest.mark.skipif(_NO_NVRTC is not None, reason=f"NVRTC unavailable: {_NO_NVRTC}")


def _both(f, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
    want = ember.tree.leaves(ember.jit(f, backend="native")(*args))
    got = ember.tree.leaves(ember.jit(f, backend="webgpu", **kw)(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=3e-5, atol=3e-5)
    return got


def _f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _cond_scan(c, xs):  # noqa: ANN001, ANN202
    """A cond on the data of each step (both branches read the step's x); the branch not taken
    computes NaN (the square root of a negative sum), which the select discards."""
    def body(c, x):
        c2 = lax.cond(jnp.sum(x) > 0, lambda a: jnp.tanh(a) + jnp.sqrt(jnp.sum(x)),
                      lambda a: a * 0.5 - jnp.log(x + 1.5), c)
        return c2, (jnp.sum(c2), jnp.log(x))  # log(x) < 0: NaN, as on the CPU
    return lax.scan(body, c, xs)


def _switch_scan(c, xs):  # noqa: ANN001, ANN202
    """A three-way switch whose index runs out of range (clamped) as the steps go."""
    def body(c, x):
        i = (jnp.sum(c) * 3.0).astype(jnp.int32)
        c2 = lax.switch(i, [lambda a: a + x, lambda a: jnp.exp(a) * 0.5, lambda a: -a * 0.9], c)
        return c2, i
    return lax.scan(body, c, xs)


def _while_scan(c, xs):  # noqa: ANN001, ANN202
    """A while whose trip count depends on the step's data (1 to 4 inner steps)."""
    def body(c, x):
        def cf(s):  # noqa: ANN001, ANN202
            return s[1] < 1 + (jnp.sum(x) > 0).astype(jnp.int32) + (jnp.max(x) > 0.5).astype(jnp.int32) * 2
        c2, k = lax.while_loop(cf, lambda s: (s[0] * 0.9 + x, s[1] + 1), (c, jnp.int32(0)))
        return c2, (jnp.sum(c2), k)
    return lax.scan(body, c, xs)


@needs_webgpu
@pytest.mark.parametrize("f", [_cond_scan, _switch_scan], ids=["cond", "switch"])
def test_a_cond_in_a_scan_body_is_a_select_in_the_preencoded_loop(f) -> None:  # noqa: ANN001
    c = _f32(4)
    for n in (1, 4, 9):
        _both(f, c, _f32(n, 4, seed=n))
    text = ember.jit(f, backend="webgpu").lower(c, _f32(4, 4)).compile().as_text()
    assert "// scan: 4 steps preencoded in one submission" in text and "host-driven" not in text


@needs_webgpu
def test_a_cond_in_a_scan_body_reads_nothing_back_per_step() -> None:
    c, xs = (ember.device_put(a, "webgpu:0") for a in (_f32(4), _f32(6, 4, seed=2)))
    g = ember.jit(_cond_scan)
    g(c, xs)
    before = dict(webgpu.TRANSFERS)
    out = g(c, xs)
    after = dict(webgpu.TRANSFERS)
    assert after["device_to_host"] == before["device_to_host"]
    assert all(isinstance(o, DeviceArray) for o in ember.tree.leaves(out))


@needs_webgpu
def test_grad_through_a_cond_in_a_scan_body() -> None:
    def loss(w, xs):  # noqa: ANN001, ANN202
        def body(c, x):
            c = lax.cond(jnp.sum(x) > 0, lambda a: jnp.sin(a * w), lambda a: a * w * w + x, c)
            return c, None
        return jnp.sum(lax.scan(body, jnp.ones(3, jnp.float32), xs)[0])
    _both(ember.grad(loss), np.float32(0.8), _f32(5, 3, seed=3))


@needs_webgpu
def test_a_while_in_a_scan_body_steps_from_the_host() -> None:
    c = _f32(4)
    for n in (0, 1, 3, 7):
        _both(_while_scan, c, _f32(n, 4, seed=n))
    text = ember.jit(_while_scan, backend="webgpu").lower(c, _f32(3, 4)).compile().as_text()
    assert "// scan: 3 steps stepped from the host" in text and "// while: host-driven" in text
    # device inputs: the carries and ys stay on the device; only the while's booleans are read
    dc, dxs = ember.device_put(c, "webgpu:0"), ember.device_put(_f32(3, 4, seed=5), "webgpu:0")
    g = ember.jit(_while_scan)
    g(dc, dxs)
    before = dict(webgpu.TRANSFERS)
    out = g(dc, dxs)
    after = dict(webgpu.TRANSFERS)
    trips = int(np.asarray(out[1][1]).sum())  # inner steps over the 3 outer steps
    assert after["device_to_host"] - before["device_to_host"] == trips + 3  # one boolean per test
    assert after["host_to_device"] - before["host_to_device"] == 3  # the literal 0 counter per step
    assert all(isinstance(o, DeviceArray) for o in ember.tree.leaves(out))


@needs_webgpu
def test_nested_control_with_a_named_axis_compiles_once() -> None:
    for f in (_cond_scan, _while_scan):
        g = ember.jit(f, backend="webgpu", dynamic_axes=(("n",), (None, "n")))
        before = dict(symbolic.STATS)
        for n in (3, 6):
            args = (_f32(n, seed=n), _f32(4, n, seed=n + 1))
            want = ember.tree.leaves(ember.jit(f)(*args))
            for got, w in zip(ember.tree.leaves(g(*args)), want, strict=True):
                np.testing.assert_allclose(np.asarray(got), np.asarray(w), rtol=3e-5, atol=3e-5)
        assert symbolic.STATS["symbolic"] == before["symbolic"] + 1
        assert symbolic.STATS["per_binding"] == before["per_binding"]
        assert g.traces == 1


@needs_webgpu
def test_an_effectful_cond_in_a_scan_body_is_not_selected() -> None:
    def f(x):  # noqa: ANN001, ANN202
        return lax.fori_loop(0, 2, lambda i, c: lax.cond(c[0] > 0, lambda a: jnp.sort(a), lambda a: a, c), x)
    with pytest.raises(NotImplementedError, match="primitive 'sort': in the branch 1 of a 'cond'"):
        ember.jit(f, backend="webgpu")(np.ones(3, np.float32))
    body = ember.make_program(lambda c: lax.cond(c[0] > 0, lambda a: ember.debug.print("{}", a) or a,
                                                 lambda a: a, c))(np.ones(3, np.float32))
    assert not nested.selectable_cond(body.eqns[-1])


@needs_webgpu
def test_a_while_in_a_cond_branch_in_a_scan_body_is_a_clear_error() -> None:
    def f(x):  # noqa: ANN001, ANN202
        def branch(a):  # noqa: ANN001, ANN202
            return lax.while_loop(lambda d: jnp.sum(d) < 10.0, lambda d: d * 2.0 + 1.0, a)
        return lax.fori_loop(0, 2, lambda i, c: lax.cond(c[0] > 0, branch, lambda a: a - 1.0, c), x)
    x = np.ones(3, np.float32)
    with pytest.raises(NotImplementedError, match="'while'.*in the branch 1 of a 'cond' in a scan body"):
        ember.jit(f, backend="webgpu")(x)
    _both(f, x, host_fallback=True)


@needs_nvrtc
@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_the_select_form_of_a_scan_body_compiles_for_cuda(arch: str) -> None:
    (e,) = ember.make_program(_switch_scan)(_f32(4), _f32(3, 4)).eqns
    body = nested.unrolled_body(e.params["body"])
    assert "cond" not in [x.prim.name for x in body.eqns] and "select_n" in [x.prim.name for x in body.eqns]
    exe = cuda_runtime.CUDAExecutable(body)  # (scan on CUDA is not implemented: its body alone)
    text = exe.ptx(arch).decode()
    names = re.findall(r"__launch_bounds__\(\d+\) (\w+)\(", exe.source)
    assert names and all(f".entry {n}(" in text for n in names)
