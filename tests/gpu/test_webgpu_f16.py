"""float16 on WebGPU (the adapter feature ``shader-f16``; Mesa's lavapipe offers it), compared
with NumPy's float16: values stored as f16, computed in f32 and rounded to float16 per value."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.gpu import webgpu

_WHY = webgpu.unavailable_reason()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"no WebGPU adapter: {_WHY}")
F16 = np.float16


@pytest.fixture(autouse=True)
def _needs_f16() -> None:
    if not webgpu._STATE.get("f16"):
        pytest.skip("the WebGPU adapter does not offer 'shader-f16'")


def _ulps(got, want, ulps: float, floor: float = 0.0) -> None:
    """``got`` (float16) within ``ulps`` float16 ulps of ``want``; ``floor`` times the largest
    ``|want|`` is added to the scale (for sums, whose error scales with the operands)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == np.float16 and got.shape == want.shape
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got), nan)
    got, want = got[~nan].astype(np.float64), want[~nan].astype(np.float64)
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf])
    got, want = got[~inf], want[~inf]
    scale = np.spacing(np.abs(want).astype(F16)).astype(np.float64)
    scale = scale + floor * np.max(np.abs(want), initial=0.0)
    err = np.abs(got - want) / scale
    assert err.max(initial=0.0) <= ulps, f"max error {err.max():.2f} float16 ulp > {ulps}"


def _f(fn, **kw):
    return ember.jit(fn, backend="webgpu", **kw)


@pytest.mark.parametrize("n", [1, 3, 1023])
def test_round_trip_and_arithmetic_at_odd_lengths(n: int) -> None:
    r = np.random.default_rng(n)
    x, y = r.standard_normal(n).astype(F16), r.standard_normal(n).astype(F16)
    dx = ember.device_put(x, "webgpu:0")
    assert dx.dtype == np.float16 and dx.shape == (n,)
    np.testing.assert_array_equal(np.asarray(dx), x)
    got = _f(lambda a, b: (a * b + a) / (1 + b * b) - b)(dx, y)
    assert got.device == webgpu.DEVICE
    want = (x * y + x) / (F16(1) + y * y) - y  # NumPy rounds every operation to float16
    np.testing.assert_array_equal(np.asarray(got), want)  # f32 math of f16 values, rounded: exact
    np.testing.assert_array_equal(np.asarray(dx + dx), x + x)  # eager, on the device


def test_casts_both_ways() -> None:
    v = np.array([0.0, -0.0, 1 / 3, 65504.0, 65519.0, 65520.0, 1e5, -1e6, np.inf, -np.inf, np.nan,
                  6e-8, 3e-5, -2.5, 1e-9], np.float32)
    got = np.asarray(_f(lambda a: a.astype(jnp.float16))(v))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, v.astype(F16))  # overflow to inf, subnormals, NaN as NumPy
    h = np.array([0.5, -1.75, 65504, -3e-5, 1000.5, np.inf], F16)
    np.testing.assert_array_equal(np.asarray(_f(lambda a: a.astype(jnp.float32))(h)), h.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(_f(lambda a: a[:5].astype(jnp.int32))(h)),
                                  h[:5].astype(np.int32))
    i = np.array([0, 7, -2049, 70000, 2047], np.int32)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(np.asarray(_f(lambda a: a.astype(jnp.float16))(i)), i.astype(F16))
    b = np.array([True, False, True])
    np.testing.assert_array_equal(np.asarray(_f(lambda a: a.astype(jnp.float16) * 3)(b)),
                                  b.astype(F16) * F16(3))


def test_elementwise_math_within_one_ulp() -> None:
    x = np.random.default_rng(1).uniform(-4, 4, 999).astype(F16)
    fns = {"exp": (jnp.exp, np.exp), "tanh": (jnp.tanh, np.tanh), "sin": (jnp.sin, np.sin),
           "sqrt": (lambda a: jnp.sqrt(jnp.abs(a)), lambda a: np.sqrt(np.abs(a))),
           "log1p": (lambda a: jnp.log1p(a * a), lambda a: np.log1p(a * a)),
           "logistic": (ember.nn.sigmoid, lambda a: (F16(1) / (F16(1) + np.exp(-a))))}
    for name, (f, ref) in fns.items():
        ulps = 2 if name == "logistic" else 1  # (NumPy's chain rounds three times)
        _ulps(_f(f)(x), ref(x), ulps)


def test_reductions_accumulate_in_float32() -> None:
    r = np.random.default_rng(2)
    x = r.standard_normal((70, 33)).astype(F16)  # one workgroup a row
    big = r.uniform(0, 1, 5001).astype(F16)  # two passes: float32 partial sums
    exact = big.astype(np.float64).sum()
    _ulps(_f(lambda a: a.sum(axis=1))(x), x.astype(np.float64).sum(axis=1), 1, floor=1e-3)
    _ulps(_f(lambda a: a.sum())(big), np.array(exact), 1)
    np.testing.assert_array_equal(np.asarray(_f(lambda a: a.max(axis=0))(x)), x.max(axis=0))
    np.testing.assert_array_equal(np.asarray(_f(lambda a: a.min())(big)), big.min())
    np.testing.assert_array_equal(np.asarray(_f(lambda a: jnp.argmax(a, axis=1))(x)), np.argmax(x, axis=1))
    _ulps(_f(lambda a: jnp.mean(a, axis=0))(x), x.astype(np.float64).mean(axis=0), 1, floor=1e-3)


def test_matmul_accumulates_in_float32() -> None:
    r = np.random.default_rng(3)
    a, b = r.standard_normal((5, 37)).astype(F16), r.standard_normal((37, 9)).astype(F16)
    want = a.astype(np.float64) @ b.astype(np.float64)
    _ulps(_f(lambda a, b: a @ b)(a, b), want, 1, floor=1e-3)
    ab = r.standard_normal((2, 3, 4)).astype(F16)
    _ulps(_f(lambda a: jnp.einsum("bij,bkj->bik", a, a))(ab),
          np.einsum("bij,bkj->bik", ab.astype(np.float64), ab.astype(np.float64)), 1, floor=1e-3)


def test_softmax_and_grad() -> None:
    r = np.random.default_rng(4)
    x = (r.standard_normal((6, 129)) * 3).astype(F16)
    e = np.exp(x - x.max(axis=-1, keepdims=True)).astype(np.float64)  # x - max and exp in float16
    _ulps(_f(lambda a: ember.nn.softmax(a, axis=-1))(x), e / e.sum(axis=-1, keepdims=True), 2)
    w = r.standard_normal(129).astype(F16)
    g = _f(ember.grad(lambda a: jnp.sum(jnp.tanh(a) * w)))(x)
    t = np.tanh(x.astype(np.float64))
    _ulps(g, (1 - t * t) * w, 4, floor=1e-3)


def test_host_fallback_segment_boundary_keeps_float16() -> None:
    x = np.random.default_rng(5).standard_normal(7).astype(F16)
    f = _f(lambda a: jnp.sort(a * 3) + 1, host_fallback=True)  # sort runs on the host
    got = f(ember.device_put(x, "webgpu:0"))
    assert got.dtype == np.float16
    np.testing.assert_array_equal(np.asarray(got), np.sort(x * F16(3)) + F16(1))


def test_scan_over_float16_steps() -> None:
    xs = np.random.default_rng(6).standard_normal((5, 4)).astype(F16)

    def body(c, x):
        c = c * F16(0.5) + x
        return c, c * 2

    c, ys = _f(lambda xs: ember.lax.scan(body, jnp.zeros(4, jnp.float16), xs))(xs)
    wc, wys = np.zeros(4, F16), []
    for row in xs:
        wc = wc * F16(0.5) + row
        wys.append(wc * F16(2))
    np.testing.assert_array_equal(np.asarray(c), wc)
    np.testing.assert_array_equal(np.asarray(ys), np.stack(wys))


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_over_float16_steps_of_an_odd_element_count(reverse: bool) -> None:
    """Steps of 3x3 and 1 elements (not whole 4-byte words): padded by one element around the
    loop, the values NumPy's float16 arithmetic, step by step."""
    xs = np.random.default_rng(8).standard_normal((6, 3, 3)).astype(F16)

    def body(c, x):
        c = c * F16(0.5) + x
        return c, (c * 2, jnp.sum(c[0]), c[:, 1])

    g = _f(lambda xs: ember.lax.scan(body, jnp.zeros((3, 3), jnp.float16), xs, reverse=reverse))
    c, (ys, s, col) = g(xs)
    wc, wys = np.zeros((3, 3), F16), [None] * 6
    for i in (range(5, -1, -1) if reverse else range(6)):
        wc = wc * F16(0.5) + xs[i]
        wys[i] = wc * F16(2)
    np.testing.assert_array_equal(np.asarray(c), wc)
    np.testing.assert_array_equal(np.asarray(ys), np.stack(wys))
    np.testing.assert_array_equal(np.asarray(col), np.stack(wys)[:, :, 1] / F16(2))
    _ulps(s, np.stack(wys)[:, 0].astype(np.float32).sum(axis=1).astype(F16) / F16(2), 1.0,
          floor=4 * float(np.finfo(F16).eps))
    assert "preencoded in one submission" in g.lower(xs).compile().as_text()


def test_an_adapter_without_shader_f16_is_a_type_error(monkeypatch) -> None:
    monkeypatch.setitem(webgpu._STATE, "f16", False)  # as an adapter without the feature
    x = np.ones(3, F16)
    with pytest.raises(TypeError, match=r"float16 .*'shader-f16'"):
        _f(lambda a: a + 1)(x)
    with pytest.raises(TypeError, match=r"float16 .*'shader-f16'"):
        ember.device_put(x, "webgpu:0")
    np.testing.assert_array_equal(np.asarray(_f(lambda a: a + 1)(np.ones(3, np.float32))), 2)


def test_bfloat16_is_a_clear_error() -> None:
    from ember._src.dtypes import bfloat16
    with pytest.raises(TypeError, match="bfloat16"):
        _f(lambda a: a * 2)(np.ones(3, bfloat16))


def test_float16_under_named_dynamic_axes_compiles_once() -> None:
    """float16 buffers sized per call (2-byte elements, odd lengths) in a program compiled once for
    every binding of its axis: a row sum (float32 partials) and an elementwise map."""
    from ember._src.gpu import symbolic
    g = _f(lambda x, w: (jnp.sum(x * w, axis=1), x - w), dynamic_axes=(("n", None), (None,)))
    r = np.random.default_rng(7)
    w = r.standard_normal(5).astype(F16)
    before = dict(symbolic.STATS)
    for n in (3, 1, 1024):
        x = r.standard_normal((n, 5)).astype(F16)
        s, d = g(x, w)
        np.testing.assert_array_equal(np.asarray(d), x - w)
        want = (x * w).astype(np.float32).sum(axis=1).astype(F16)
        _ulps(s, want, 1.0, floor=4 * float(np.finfo(F16).eps))
    assert symbolic.STATS["symbolic"] - before["symbolic"] == 1
    assert symbolic.STATS["per_binding"] == before["per_binding"]
