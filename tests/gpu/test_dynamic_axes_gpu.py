"""Named dynamic axes on the GPU backends: a symbolic program is compiled once (its sizes are
kernel arguments, its grids and buffers sized per call) and runs at every binding on WebGPU
(executed on lavapipe where there is no GPU); the CUDA source of the same programs is compiled
through NVRTC to PTX."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src import shapes as sh
from ember._src.gpu import cuda_runtime, symbolic, webgpu
from ember._src.gpu.device_array import DeviceArray
from ember._src.gpu.render import dim_text
from tests.gpu.dyn_cases import DYN_CASES

_WHY = webgpu.unavailable_reason()
needs_webgpu = pytest.mark.skipif(_WHY is not None, reason=f"no WebGPU adapter: {_WHY}")
_NO_NVRTC = cuda_runtime.nvrtc_unavailable_reason()
needs_nvrtc = pytest.mark.skipif(_NO_NVRTC is not None, reason=f"NVRTC unavailable: {_NO_NVRTC}")
_IDS = [c[0] for c in DYN_CASES]


def _pipelines() -> int:
    return len(webgpu._STATE["pipelines"])


def test_size_expressions_render_as_integer_arithmetic() -> None:
    """The kernel text of a size evaluates (as Python, axes bound) to the size's value."""
    b, s = sh.axis("b"), sh.axis("s")
    exprs = [b, b * s, 3 * b - 2, b * s * 5 + s - 1, sh.floordiv(b + 7, 4), sh.mod(b * s + 3, 5),
             sh.dmax(b, s), (b + 15) // 16]
    for e in exprs:
        text = dim_text(e, lambda name: f"env['{name}']").replace("/", "//")
        for env in ({"b": 1, "s": 1}, {"b": 7, "s": 3}, {"b": 300, "s": 37}):
            assert eval(text, {"env": env}) == sh.evaluate(e, env), (str(e), text, env)  # noqa: S307
    assert dim_text(12, str) == "12"


@needs_webgpu
@pytest.mark.parametrize("name,f,dyn,sizes,make", DYN_CASES, ids=_IDS)
def test_webgpu_compiles_once_for_every_binding(name, f, dyn, sizes, make) -> None:
    g = ember.jit(f, backend="webgpu", dynamic_axes=dyn)
    cpu = ember.jit(f)
    before = dict(symbolic.STATS)
    after_first = None
    for n in sizes:
        args = make(n)
        got = g(*args)
        want = np.asarray(cpu(*args))
        assert got.shape == want.shape
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-5)
        if after_first is None:
            after_first = _pipelines()
    assert _pipelines() == after_first  # the later bindings compiled no pipeline
    assert symbolic.STATS["symbolic"] == before["symbolic"] + 1
    assert symbolic.STATS["per_binding"] == before["per_binding"]
    assert g.traces == 1


@needs_webgpu
def test_sizes_reach_the_kernels_through_a_uniform() -> None:
    g = ember.jit(lambda x: jnp.sum(x, axis=0) * 2.0, backend="webgpu", dynamic_axes=(("n", None),))
    c = g.lower(np.zeros((3, 4), np.float32))
    src3, src9 = c.compile(n=3).as_text(), c.compile(n=9).as_text()
    assert src3 == src9  # one source for every binding
    assert "var<uniform> sz: Sizes" in src3 and "sz.d0" in src3


@needs_webgpu
def test_grad_of_a_dynamic_program_compiles_once() -> None:
    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2) / x.shape[0]

    dg = ember.jit(ember.grad(loss), backend="webgpu", dynamic_axes=(None, ("n", None)))
    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    before = dict(symbolic.STATS)
    for n in (1, 6, 33):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        eps, fd = 1e-3, np.zeros_like(w, dtype=np.float64)  # central differences in float64
        for i in np.ndindex(w.shape):
            d = np.zeros_like(w, dtype=np.float64)
            d[i] = eps
            lo = np.sum(np.tanh(x @ (w - d)) ** 2) / n
            hi = np.sum(np.tanh(x @ (w + d)) ** 2) / n
            fd[i] = (hi - lo) / (2 * eps)
        np.testing.assert_allclose(np.asarray(dg(w, x)), fd, rtol=1e-3, atol=1e-4)
    assert symbolic.STATS["symbolic"] == before["symbolic"] + 1 and dg.traces == 1


@needs_webgpu
def test_device_arrays_under_dynamic_axes_stay_on_the_device() -> None:
    """Device inputs of different sizes run on the device with one compile; results stay there."""
    f = ember.jit(lambda x, w: jnp.tanh(x @ w) + jnp.sum(x, axis=0)[:3], dynamic_axes=(("n", None), None))
    wh = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    w = ember.device_put(wh, "webgpu:0")
    before = dict(symbolic.STATS)
    for n in (2, 7, 1):
        xh = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        x = ember.device_put(xh, "webgpu:0")
        moved = dict(webgpu.TRANSFERS)
        y = f(x, w)
        z = f(y @ np.ones((3, 4), np.float32), w)  # chained: no host copy in between
        assert isinstance(y, DeviceArray) and isinstance(z, DeviceArray)
        assert y.shape == (n, 3) and z.device == y.device == ember.devices("webgpu")[0]
        assert webgpu.TRANSFERS["device_to_host"] == moved["device_to_host"]
        want_y = np.tanh(xh @ wh) + xh.sum(0)[:3]
        y4 = want_y @ np.ones((3, 4), np.float32)
        np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(z), np.tanh(y4 @ wh) + y4.sum(0)[:3], rtol=1e-4, atol=1e-4)
    assert f._device_jits["webgpu"].traces == 1  # one symbolic signature (not one per shape)
    assert symbolic.STATS["symbolic"] == before["symbolic"] + 1


_LOOPS = [
    ("fori_preencoded", lambda x: ember.lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c) + jnp.sum(c) * 0.1, x),
     "// scan: 3 steps preencoded"),
    ("while_host_driven",
     lambda x: ember.lax.while_loop(lambda c: jnp.sum(c) < 100.0, lambda c: c * 2.0 + 1.0, x),
     "// while: host-driven"),
    ("cond_host_driven", lambda x: ember.lax.cond(jnp.sum(x) > 0, lambda v: v * 2.0, lambda v: jnp.exp(v), x),
     "// cond: host-driven"),
]


@needs_webgpu
@pytest.mark.parametrize("name,f,marker", _LOOPS, ids=[c[0] for c in _LOOPS])
def test_device_loops_with_symbolic_sizes_compile_once(name, f, marker) -> None:
    g = ember.jit(f, backend="webgpu", dynamic_axes=(("n",),))
    before = dict(symbolic.STATS)
    after_first = None
    for n, sign in ((1, 1.0), (4, -1.0), (300, 1.0)):
        x = sign * np.abs(np.random.default_rng(n).standard_normal(n).astype(np.float32))
        np.testing.assert_allclose(np.asarray(g(x)), np.asarray(ember.jit(f)(x)), rtol=1e-5, atol=1e-5)
        after_first = after_first or _pipelines()
    assert _pipelines() == after_first
    assert symbolic.STATS["symbolic"] == before["symbolic"] + 1
    assert symbolic.STATS["per_binding"] == before["per_binding"]
    assert marker in g.lower(x).compile(n=2).as_text()


@needs_webgpu
def test_a_scan_over_a_named_axis_compiles_per_binding() -> None:
    """The trip count of a scan over a named axis is only known per call: such a program is
    compiled once per binding (documented), and runs correctly."""
    def f(x):
        return ember.lax.scan(lambda c, r: (c * 0.5 + r, jnp.sum(c) + r), jnp.zeros(x.shape[1]), x)[1]

    for options in ({}, {"host_fallback": True}):
        g = ember.jit(f, backend="webgpu", dynamic_axes=(("n", None),), **options)
        before = dict(symbolic.STATS)
        for n in (1, 4, 4):
            x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
            np.testing.assert_allclose(np.asarray(g(x)), np.asarray(ember.jit(f)(x)), rtol=1e-5, atol=1e-5)
        assert symbolic.STATS["per_binding"] == before["per_binding"] + 2  # sizes 1 and 4
        assert symbolic.STATS["symbolic"] == before["symbolic"]
        # the binding's program runs the scan on the device (preencoded), not on the host
        assert "// scan: 4 steps preencoded" in g.lower(x).compile(n=4).as_text()


@needs_nvrtc
@pytest.mark.parametrize("name,f,dyn,sizes,make", DYN_CASES, ids=_IDS)
def test_cuda_source_is_one_for_every_binding_and_compiles(name, f, dyn, sizes, make) -> None:
    c = ember.jit(f, backend="cuda", dynamic_axes=dyn).lower(*make(sizes[1]))
    axes = c.executable.axes
    srcs = {c.compile(**{a: n + i for i, a in enumerate(axes)}).as_text() for n in sizes}
    assert len(srcs) == 1  # sizes are kernel parameters, not literals
    (src,) = srcs
    assert "const int sz0" in src
    for arch in ("compute_80", "compute_90"):
        text = cuda_runtime.compile_ptx(src, arch).decode()
        names = re.findall(r"__launch_bounds__\(\d+\) (\w+)\(", src)
        assert names and all(f".entry {k}(" in text for k in names)


@needs_nvrtc
def test_cuda_symbolic_while_programs_compile() -> None:
    """A host-driven while under a named axis: its cond and body are built once, the axis a kernel
    parameter, and compile to PTX."""
    f = _LOOPS[1][1]
    c = ember.jit(f, backend="cuda", dynamic_axes=(("n",),)).lower(np.ones(3, np.float32))
    run = c.specialize(n=3).run
    assert c.specialize(n=7).run.exe is run.exe  # one executable for every binding
    (loop,) = [e for k, _, e in run.exe.segments if k == "loop"]
    assert "const int sz0" in loop.cond.source
    for arch in ("compute_80", "compute_90"):
        assert b".entry" in loop.cond.ptx(arch) and b".entry" in loop.body.ptx(arch)


# a reduction of few rows over a symbolic length always has a second pass over its parts (a
# static program has one only where it splits): those programs are checked by the next test instead
_SPLIT = {"sum_dynamic_axis", "whole_sum_parts", "mean_dim_as_value", "transpose", "softmax_dynamic_axis",
          "softmax_static_rows"}
_SAME = [c for c in DYN_CASES if c[0] not in _SPLIT]


@pytest.mark.parametrize("name,f,dyn,sizes,make", _SAME, ids=[c[0] for c in _SAME])
def test_grids_and_buffer_sizes_match_the_static_schedule(name, f, dyn, sizes, make) -> None:
    """Per binding, the symbolic schedule's launch grids and buffer sizes are those of the static
    program resolved to that binding (the CUDA renderer: no device needed)."""
    from ember._src.gpu import kernels
    from ember._src.gpu.cuda import CUDARenderer
    from ember._src.program import resolve_program

    c = ember.jit(f, dynamic_axes=dyn).lower(*make(sizes[1]))
    prog, axes = c.program, c.executable.axes
    sym = kernels.schedule(prog, CUDARenderer(), axes)
    for n in sizes:
        env = {a: n + i for i, a in enumerate(axes)}
        static = kernels.schedule(resolve_program(prog, env), CUDARenderer())
        assert [k.name for k in sym.kernels] == [k.name for k in static.kernels]
        assert [k.launch(env) for k in sym.kernels] == [k.launch({}) for k in static.kernels]
        assert sym.sizes(env) == static.sizes({})


def test_a_symbolic_length_reduction_is_split_in_parts() -> None:
    """Few rows, a symbolic reduced length: ceil(n / PART) parts of PART elements, then a second
    pass over the parts (both counted per call)."""
    from ember._src.gpu import kernels
    from ember._src.gpu.cuda import CUDARenderer

    c = ember.jit(lambda x: jnp.sum(x), dynamic_axes=(("n",),)).lower(np.ones(10, np.float32))
    sch = kernels.schedule(c.program, CUDARenderer(), ("n",))
    first, second = sch.kernels
    for n, parts in ((1, 1), (4096, 1), (4097, 2), (70000, 18)):
        env = {"n": n}
        assert first.launch(env) == (parts, 1, 1) and second.launch(env) == (1, 1, 1)
        assert sch.sizes(env)[first.out.index] == parts and sch.sizes(env)[second.out.index] == 1
        assert sch.sizes(env)[sch.inputs[0]] == n
    assert "((4095 + sz0) / 4096)" in first.source  # the part count, an expression of the axis


@needs_webgpu
def test_a_long_symbolic_reduction_in_parts_runs() -> None:
    g = ember.jit(lambda x: jnp.sum(x, axis=1), backend="webgpu", dynamic_axes=((None, "n"),))
    for n in (1, 5000, 9000):
        x = np.random.default_rng(n).standard_normal((2, n)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(g(x)), x.astype(np.float64).sum(1), rtol=1e-4, atol=1e-4)
