"""The CUDA backend: every test program's CUDA C (``lower(...).compile().as_text()``) compiles
through NVRTC to PTX for sm_80 and sm_90 (no device needed); execution runs where a CUDA device is."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.dtypes import bfloat16
from ember._src.gpu import cuda_runtime
from ember.errors import CompileError
from tests.gpu.cases import CASES

_NO_NVRTC = cuda_runtime.nvrtc_unavailable_reason()
needs_nvrtc = pytest.mark.skipif(_NO_NVRTC is not None, reason=f"NVRTC unavailable: {_NO_NVRTC}")

# float64, float16 and bfloat16 programs (CUDA only: WGSL has none of them)
_WIDE = [
    ("float64_chain", lambda x: jnp.tanh(x) * jnp.exp(-x) + jnp.sum(x), lambda r: (r.standard_normal(50),)),
    ("float16_matmul", lambda a, b: jnp.maximum(a @ b, 0),
     lambda r: (r.standard_normal((8, 4)).astype(np.float16), r.standard_normal((4, 3)).astype(np.float16))),
    ("bfloat16_softmax", lambda x: ember.nn.softmax(x, axis=-1),
     lambda r: (r.standard_normal((4, 7)).astype(bfloat16),)),
]
ALL = CASES + _WIDE


def _source(f, args) -> str:
    src = ember.jit(f, backend="cuda").lower(*args).compile().as_text()
    assert isinstance(src, str) and '__global__' in src
    return src


@needs_nvrtc
@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
@pytest.mark.parametrize("name,f,make", ALL, ids=[c[0] for c in ALL])
def test_source_compiles_to_ptx(name: str, f, make, arch: str) -> None:
    src = _source(f, make(np.random.default_rng(0)))
    ptx = cuda_runtime.compile_ptx(src, arch)
    text = ptx.decode()
    assert f".target sm_{arch[-2:]}" in text
    # every kernel of the source is an entry point of the PTX
    names = re.findall(r"__launch_bounds__\(\d+\) (\w+)\(", src)
    assert names and all(f".entry {n}(" in text for n in names)


def test_as_text_names_the_kernels_and_needs_no_device() -> None:
    a = np.ones((5, 6), np.float32)
    src = _source(lambda x: jnp.sum(jnp.exp(x), axis=1), (a,))
    assert "__shared__ float sh[256]" in src and "expf(" in src


@needs_nvrtc
def test_compile_error_has_the_source_path_and_log() -> None:
    with pytest.raises(CompileError, match=r"source: .*\.cu.*\n.*error"):
        cuda_runtime.compile_ptx('extern "C" __global__ void k() { undefined_name(); }', "compute_90")


def test_unsupported_dtype_names_it() -> None:
    with pytest.raises(TypeError, match=r"cuda.*int64"):
        _source(lambda x: x + 1, (np.arange(3, dtype=np.int64),))


_NO_DEVICE = cuda_runtime.unavailable_reason()


@pytest.mark.skipif(_NO_DEVICE is not None, reason=f"no CUDA device: {_NO_DEVICE}")
@pytest.mark.parametrize("name,f,make", CASES, ids=[c[0] for c in CASES])
def test_runs_on_the_device(name: str, f, make) -> None:
    args = make(np.random.default_rng(0))
    want = ember.tree.leaves(ember.jit(f, backend="native")(*args))
    got = ember.tree.leaves(ember.jit(f, backend="cuda")(*args))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=2e-5)


def test_without_a_device_a_call_says_what_is_missing() -> None:
    if _NO_DEVICE is None:
        pytest.skip("a CUDA device is present")
    with pytest.raises(cuda_runtime.DeviceUnavailable, match="cuda"):
        ember.jit(lambda x: x + 1, backend="cuda")(np.ones(3, np.float32))


@pytest.mark.skipif(_NO_DEVICE is not None, reason=f"no CUDA device: {_NO_DEVICE}")
def test_device_arrays_stay_on_the_cuda_device() -> None:
    """The WebGPU residency rules on CUDA: chained jit calls on device arrays copy nothing."""
    from ember._src.gpu.device_array import DeviceArray

    x = np.random.default_rng(0).uniform(-2, 2, (64, 32)).astype(np.float32)
    w = np.random.default_rng(1).uniform(-1, 1, (32, 8)).astype(np.float32)
    dx, dw = ember.device_put((x, w), "cuda:0")
    assert isinstance(dx, DeviceArray) and str(dx.device) == "cuda:0"
    f = ember.jit(lambda x, w: jnp.tanh(x @ w))
    g = ember.jit(lambda y: jnp.sum(y * y, axis=0))
    g(f(dx, dw))
    before = dict(cuda_runtime.TRANSFERS)
    z = g(f(dx, dw))
    assert cuda_runtime.TRANSFERS == before and isinstance(z, DeviceArray)
    want = (np.tanh(x.astype(np.float64) @ w) ** 2).sum(0)
    np.testing.assert_allclose(np.asarray(z), want, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(dx + 1.0), x + 1, rtol=1e-6)
    stats = ember.memory_stats("cuda:0")
    assert stats["bytes_in_use"] > 0 and stats["peak_bytes_in_use"] >= stats["bytes_in_use"]


def test_cuda_executables_run_with_device_buffers() -> None:
    """Compile-checked structure without a device: the CUDA executable has the residency entry
    point, and device_put onto an absent device says what is missing."""
    exe = ember.jit(lambda x: x * 2, backend="cuda").lower(np.ones(3, np.float32)).executable
    assert callable(exe.run_device)
    if _NO_DEVICE is not None:
        with pytest.raises(RuntimeError, match="cuda:0 is unavailable"):
            ember.device_put(np.ones(3, np.float32), "cuda:0")


@needs_nvrtc
def test_a_while_loop_is_host_driven_and_its_programs_compile() -> None:
    """Compile-checked without a device: cond and body are CUDA programs of their own (PTX for
    sm_80 and sm_90); with a device, the loop runs with the carries on it."""
    def f(x):
        return ember.lax.while_loop(lambda c: jnp.sum(c) < 100.0, lambda c: c * 2.0 + 1.0, x)
    x = np.ones(3, np.float32)
    exe = ember.jit(f, backend="cuda").lower(x).executable
    text = ember.jit(f, backend="cuda").lower(x).compile().as_text()
    assert "// while: host-driven" in text and text.count("__global__") >= 3
    (loop,) = [e for k, _, e in exe.segments if k == "loop"]
    for arch in ("compute_80", "compute_90"):
        assert b".entry" in loop.cond.ptx(arch) and b".entry" in loop.body.ptx(arch)
    if _NO_DEVICE is None:
        np.testing.assert_allclose(np.asarray(ember.jit(f, backend="cuda")(x)), np.full(3, 63.0))


@needs_nvrtc
def test_a_cond_is_host_driven_and_its_branches_compile() -> None:
    """Compile-checked without a device: each branch of a cond is a CUDA program of its own (PTX
    for sm_80 and sm_90); with a device, the branch chosen by the index runs on it."""
    def f(x):
        return ember.lax.cond(jnp.sum(x) > 0, lambda a: a * 2.0 + 1.0, lambda a: jnp.exp(a), x)
    x = np.ones(3, np.float32)
    text = ember.jit(f, backend="cuda").lower(x).compile().as_text()
    assert "// cond: host-driven" in text
    exe = ember.jit(f, backend="cuda").lower(x).executable
    (cond,) = [e for k, _, e in exe.segments if k == "loop"]
    for arch in ("compute_80", "compute_90"):
        assert all(b".entry" in b.ptx(arch) for b in cond.branches)
    if _NO_DEVICE is None:
        np.testing.assert_allclose(np.asarray(ember.jit(f, backend="cuda")(x)), np.full(3, 3.0))
        np.testing.assert_allclose(np.asarray(ember.jit(f, backend="cuda")(-x)), np.exp(-x), rtol=1e-6)
