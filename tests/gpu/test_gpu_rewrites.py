"""The GPU backends run the shared rewrites (:mod:`ember._src.rewrites`: CSE, simplification,
constant folding, dead code) before scheduling: a subexpression written twice is one kernel,
transposes of transposes and ``* 1``/``+ 0`` cost nothing, and the values stay the CPU backend's
(WebGPU executed, CUDA compiled through NVRTC)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.gpu import cuda_runtime, kernels, symbolic, webgpu

_WHY = webgpu.unavailable_reason()
needs_webgpu = pytest.mark.skipif(_WHY is not None, reason=f"no WebGPU adapter: {_WHY}")
_NO_NVRTC = cuda_runtime.nvrtc_unavailable_reason()
needs_nvrtc = pytest.mark.skipif(_NO_NVRTC is not None, reason=f"NVRTC unavailable: {_NO_NVRTC}")


def _redundant(x, y):  # noqa: ANN001, ANN202
    a = jnp.sum(jnp.exp(x) * y, axis=1)
    b = jnp.sum(jnp.exp(x) * y, axis=1)  # the same reduction again
    t = x.T.T * 1.0 + 0.0  # x itself
    return a + b, jnp.tanh(t) + jnp.tanh(x), jnp.max(t @ y.T, axis=0) - jnp.max(x @ y.T, axis=0) * 0.5


def _transposes(x):  # noqa: ANN001, ANN202
    return x.T.T * 1.0 + 0.0, jnp.transpose(x.T.T.T, (1, 0)) - x


def _args(n: int = 6) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(0)
    return r.uniform(-1, 1, (n, 9)).astype(np.float32), r.uniform(-1, 1, (n, 9)).astype(np.float32)


# (function, arguments, device kernels with the rewrites, without them)
PROGRAMS = [(_redundant, _args(), 7, 12), (_transposes, _args()[:1], 1, 2)]


def _kernels(f, args, backend: str, *, rewrites: bool = True) -> str:  # noqa: ANN001
    saved = kernels.SHARED_REWRITES
    kernels.SHARED_REWRITES = rewrites
    try:
        g = (lambda *xs: f(*xs))  # a function of its own: jit's caches are per function
        return ember.jit(g, backend=backend).lower(*args).compile().as_text()
    finally:
        kernels.SHARED_REWRITES = saved


def _check(f, args, backend: str = "webgpu", **jit_kw) -> None:  # noqa: ANN001
    want = ember.tree.leaves(ember.jit(f, backend="native")(*args))
    got = ember.tree.leaves(ember.jit(f, backend=backend, **jit_kw)(*args))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-5)


@needs_webgpu
@pytest.mark.parametrize("case", range(len(PROGRAMS)), ids=["redundant", "transposes"])
def test_webgpu_computes_a_repeated_subexpression_once(case: int) -> None:
    f, args, after, before = PROGRAMS[case]
    assert _kernels(f, args, "webgpu", rewrites=False).count("// kernel ") == before
    assert _kernels(f, args, "webgpu").count("// kernel ") == after
    _check(f, args)


@needs_webgpu
def test_an_output_that_simplifies_to_an_input_is_the_input() -> None:
    x = _args()[0]
    out = ember.jit(lambda x: x.T.T * 1.0 + 0.0, backend="webgpu")
    assert "// kernel " not in out.lower(x).compile().as_text()
    np.testing.assert_array_equal(np.asarray(out(x)), x)


@needs_webgpu
def test_grad_and_duplicated_work_in_a_loss() -> None:
    """The backward program of a loss that computes ``tanh(x @ w)`` twice (as a model evaluated
    twice in one loss would): fewer kernels than without the rewrites, the CPU's gradient."""
    x, _ = _args()
    w = np.random.default_rng(1).uniform(-1, 1, (9, 4)).astype(np.float32)

    def loss(w, x):  # noqa: ANN001, ANN202
        return jnp.sum(jnp.tanh(x @ w) ** 2) + jnp.mean(jnp.tanh(x @ w))

    g = ember.grad(loss)
    assert _kernels(g, (w, x), "webgpu").count("// kernel ") < \
        _kernels(g, (w, x), "webgpu", rewrites=False).count("// kernel ")
    _check(g, (w, x))


@needs_webgpu
def test_rewritten_program_with_a_named_axis_compiles_once() -> None:
    g = ember.jit(_redundant, backend="webgpu", dynamic_axes=(("n", None), ("n", None)))
    before = dict(symbolic.STATS)
    for n in (3, 11):
        args = _args(n)
        want = ember.tree.leaves(ember.jit(_redundant)(*args))
        for got, w in zip(ember.tree.leaves(g(*args)), want, strict=True):
            np.testing.assert_allclose(np.asarray(got), np.asarray(w), rtol=2e-5, atol=2e-5)
    assert symbolic.STATS["symbolic"] == before["symbolic"] + 1
    assert symbolic.STATS["per_binding"] == before["per_binding"]


@needs_nvrtc
@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_cuda_source_is_rewritten_and_compiles(arch: str) -> None:
    f, args, after, before = PROGRAMS[0]
    src = _kernels(f, args, "cuda")
    # (WebGPU's counts less the copies of ``y.T``, which the CUDA GEMM steps read in place: one
    # with the rewrites, where the two products are one, two without)
    assert src.count("__global__") == after - 1
    assert _kernels(f, args, "cuda", rewrites=False).count("__global__") == before - 2
    text = cuda_runtime.compile_ptx(src, arch).decode()
    names = re.findall(r"__launch_bounds__\(\d+\) (\w+)\(", src)
    assert names and all(f".entry {n}(" in text for n in names)
