"""The WebGPU backend runs for real (on Mesa's software Vulkan driver where there is no GPU):
named programs and random programs compared with the CPU native backend at per-op ulp tolerances."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.gpu import webgpu
from tests.gpu.cases import CASES

_WHY = webgpu.unavailable_reason()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"no WebGPU adapter: {_WHY}")

EPS = float(np.finfo(np.float32).eps)


def _close(got: np.ndarray, want: np.ndarray, ulps: float, floor: float = 1e-3) -> None:
    """``got`` within ``ulps`` float32 ulps of ``want``, measured against ``|want|`` plus ``floor`` times
    the largest ``|want|`` (sums and products cancel: their error scales with the operands)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)  # NaN exactly where the CPU has NaN
    got, want = got[~nan], want[~nan]
    scale = np.abs(want) + np.max(np.abs(want), initial=1.0) * floor
    err = np.abs(got.astype(np.float64) - want.astype(np.float64)) / (scale * EPS)
    assert err.max(initial=0.0) <= ulps, f"max error {err.max():.1f} ulp > {ulps}"


@pytest.mark.parametrize("name,f,make", CASES, ids=[c[0] for c in CASES])
def test_named_programs_match_the_cpu(name: str, f, make) -> None:
    args = make(np.random.default_rng(0))
    want = ember.tree.leaves(ember.jit(f, backend="native")(*args))
    got = ember.tree.leaves(ember.jit(f, backend="webgpu")(*args))
    for g, w in zip(got, want):
        _close(g, w, ulps=64, floor=0.02)


# the random programs' ops and their tolerance in float32 ulps (the Vulkan precision rules allow
# a few ulps for exp/log/tanh; sin is measured in the clipped range)
_UNARY = {"exp": (lambda x: jnp.exp(x), 8), "tanh": (jnp.tanh, 16),
          "log1p": (lambda x: jnp.log(1.0 + x * x), 8),
          "sin": (jnp.sin, 16), "neg": (lambda x: -x, 0), "sq": (lambda x: x * x, 1),
          "sqrt": (lambda x: jnp.sqrt(jnp.abs(x)), 4), "relu": (lambda x: jnp.maximum(x, 0.0), 0)}
_BINARY = {"add": (lambda a, b: a + b, 1), "mul": (lambda a, b: a * b, 1),
           "div": (lambda a, b: a / (1.0 + b * b), 4),
           "max": (jnp.maximum, 0), "sel": (lambda a, b: jnp.where(a > b, a, b * 0.5), 1)}


def _random_program(seed: int):
    rng = np.random.default_rng(seed)
    steps = [(rng.choice(sorted(_UNARY)), rng.choice(sorted(_BINARY)), int(rng.integers(0, 3)))
             for _ in range(5)]
    reduce_axis = int(rng.integers(-1, 2))  # -1: none

    def f(x, y, b):
        vals = [x, y, b[None, :]]
        for u, bn, k in steps:
            v = _BINARY[bn][0](_UNARY[u][0](vals[-1]), vals[k])
            vals.append(jnp.clip(v, -3.0, 3.0))
        return vals[-1] if reduce_axis < 0 else jnp.sum(vals[-1], axis=reduce_axis)

    # error grows through the chain: the ops' ulps, times 4 for the propagation, plus rounding
    tol = sum(_UNARY[u][1] + _BINARY[bn][1] for u, bn, _ in steps) * 4 + 8
    return f, tol, steps


@pytest.mark.parametrize("seed", range(12))
def test_random_programs_match_the_cpu(seed: int) -> None:
    f, tol, steps = _random_program(seed)
    rng = np.random.default_rng(100 + seed)
    args = (rng.uniform(-2, 2, (9, 31)).astype(np.float32), rng.uniform(-2, 2, (9, 31)).astype(np.float32),
            rng.uniform(-2, 2, 31).astype(np.float32))
    want = np.asarray(ember.jit(f, backend="native")(*args))
    got = np.asarray(ember.jit(f, backend="webgpu")(*args))
    _close(got, want, ulps=tol)


def test_softmax_against_numpy() -> None:
    x = np.random.default_rng(1).standard_normal((64, 513)).astype(np.float32)
    got = np.asarray(ember.jit(lambda a: ember.nn.softmax(a, axis=-1), backend="webgpu")(x))
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=2e-6, atol=1e-8)


def test_whole_array_reduction_is_two_passes() -> None:
    """A sum of 100,000 elements to one value: the first pass writes partial sums per part, the
    second reduces them (WebGPU has no global barrier)."""
    x = np.random.default_rng(2).standard_normal(100_000).astype(np.float32)
    jf = ember.jit(jnp.sum, backend="webgpu")
    kinds = [(k.kind, k.info["parts"]) for k in jf.lower(x).executable.schedule.kernels]
    assert kinds == [("reduce", 25), ("reduce", 1)]
    np.testing.assert_allclose(float(jf(x)), x.astype(np.float64).sum(), rtol=1e-5)


def test_repeated_calls_reuse_pool_and_pipelines() -> None:
    f = ember.jit(lambda a, b: jnp.tanh(a) @ b, backend="webgpu")
    a, b = np.ones((8, 8), np.float32), np.eye(8, dtype=np.float32)
    f(a, b)
    before = webgpu.memory_stats()
    for k in range(3):
        np.testing.assert_allclose(np.asarray(f(a * k, b)), np.tanh(a * k), rtol=1e-6)
    after = webgpu.memory_stats()
    assert after["num_allocs"] == before["num_allocs"]  # every buffer came from the pool
    assert after["bytes_in_use"] == before["bytes_in_use"]  # and went back to it


def test_program_returning_an_input_and_a_constant() -> None:
    f = ember.jit(lambda x: (x, jnp.float32(2.5), x + 1), backend="webgpu")
    x = np.arange(4, dtype=np.float32)
    a, c, d = f(x)
    np.testing.assert_array_equal(np.asarray(a), x)
    assert float(c) == 2.5
    np.testing.assert_array_equal(np.asarray(d), x + 1)


def test_float64_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"float64.*x32"):
        ember.jit(lambda x: x * 2, backend="webgpu")(np.ones(3))


def test_unsupported_primitive_names_itself_and_the_device() -> None:
    with pytest.raises(NotImplementedError, match=r"webgpu.*'sort'"):
        ember.jit(jnp.sort, backend="webgpu")(np.ones(3, np.float32))


def test_as_text_is_the_wgsl() -> None:
    x = np.ones((4, 4), np.float32)
    src = ember.jit(lambda a: jnp.exp(a) @ a, backend="webgpu").lower(x).compile().as_text()
    assert "@compute" in src and "var<workgroup> ta" in src and src.count("fn main") == 2


def test_erf_erfc_against_scipy() -> None:
    """WGSL has no erf: a series near 0 and Abramowitz-Stegun 7.1.26 elsewhere (|error| < 1.5e-7)."""
    from scipy import special

    import ember.scipy.special as sp

    x = np.linspace(-5, 5, 20001).astype(np.float32)
    f = ember.jit(lambda v: (sp.erf(v), sp.erfc(v), sp.erf(v * 1e-3)), backend="webgpu")
    e, c, small = (np.asarray(a, np.float64) for a in f(x))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(e, special.erf(x64), rtol=0, atol=5e-7)
    np.testing.assert_allclose(c, special.erfc(x64), rtol=0, atol=5e-7)
    ref = special.erf(np.float32(1e-3) * x)  # float32 product, as the kernel computes it
    np.testing.assert_allclose(small, ref, rtol=4 * EPS, atol=1e-30)  # relative accuracy near 0


def test_missing_wgpu_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    saved = dict(webgpu._STATE)
    monkeypatch.setitem(sys.modules, "wgpu", None)  # import wgpu now raises ImportError
    webgpu._STATE.clear()
    try:
        why = webgpu.unavailable_reason()
        assert why is not None and "pip install" in why and "mesa-vulkan-drivers" in why
        with pytest.raises(webgpu.DeviceUnavailable, match="wgpu"):
            ember.jit(lambda v: v + 1, backend="webgpu")(np.ones(2, np.float32))
        np.testing.assert_array_equal(np.asarray(ember.jit(lambda v: v + 1)(np.ones(2, np.float32))), [2, 2])
    finally:
        webgpu._STATE.clear()
        webgpu._STATE.update(saved)


def test_named_dynamic_axes_compile_once() -> None:
    """A symbolic program runs on the device, its kernels compiled once for every size of the axis
    (more in test_dynamic_axes_gpu.py)."""
    g = ember.jit(lambda x: jnp.sum(jnp.tanh(x), axis=0), backend="webgpu", dynamic_axes=(("b", None),))
    for n in (3, 5):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        want = np.tanh(x.astype(np.float64)).sum(0)
        np.testing.assert_allclose(np.asarray(g(x)), want, rtol=1e-5, atol=1e-6)
        if n == 3:
            compiled = len(webgpu._STATE["pipelines"])
    assert len(webgpu._STATE["pipelines"]) == compiled


def _with_host_parts(x, w):  # noqa: ANN001, ANN202
    h = jnp.tanh(x @ w)
    c = jnp.cumsum(jnp.sort(h, axis=1), axis=1)

    def body(carry, row):  # noqa: ANN001, ANN202
        return carry * 0.5 + row, carry.sum()

    carry, ys = ember.lax.scan(body, jnp.zeros(w.shape[1], np.float32), c)
    return jnp.exp(carry) + 1.0, ys


def test_host_fallback_runs_the_other_primitives_on_the_host() -> None:
    """sort and cumsum have no device kernel: an error naming the first, or with
    ``host_fallback=True`` host segments between device segments (the scan is a device loop),
    matching the CPU backend."""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    with pytest.raises(NotImplementedError, match=r"'sort'.*host_fallback=True"):
        ember.jit(_with_host_parts, backend="webgpu")(x, w)
    jf = ember.jit(_with_host_parts, backend="webgpu", host_fallback=True)
    for g, want in zip(jf(x, w), ember.jit(_with_host_parts, backend="native")(x, w)):
        _close(np.asarray(g), np.asarray(want), ulps=64, floor=0.02)
    text = jf.lower(x, w).compile().as_text()
    assert "// host segment: sort, cumsum\n" in text and "// host segment: scan" not in text
    assert "// scan: 6 steps preencoded in one submission" in text
    assert text.count("@compute") >= 3  # the product, the tanh, the scan's initial carry, exp + 1
