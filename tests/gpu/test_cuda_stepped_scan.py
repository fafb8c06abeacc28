"""A ``scan`` whose body holds a ``while_loop``: stepped from the host on CUDA (as on WebGPU).

Values are compared with a NumPy loop written out by hand: on WebGPU (lavapipe runs it here) and on
a CUDA device where there is one. Without a GPU the CUDA side is checked through the recording
driver: a driver whose reads of the ``while``'s boolean answer from a script gives the launch
sequence each answer implies (the ``xs`` slices copied out, per step the body's device segment
and the ``while``'s cond and body, the ``ys`` copied into the stacked output at their offsets);
the kernels of every segment compile through NVRTC."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.gpu import cuda_runtime, cuda_stepped, webgpu
from ember._src.gpu.device_array import DeviceArray
from tests.gpu.cuda_marks import needs_device, needs_nvrtc
from tests.gpu.fake_cuda import RecordingDriver, install

_WHY = webgpu.unavailable_reason()
needs_webgpu = pytest.mark.skipif(_WHY is not None, reason=f"no WebGPU adapter: {_WHY}")


def _f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def doubling(c, xs, reverse: bool = False):  # noqa: ANN001, ANN201
    """Per step: ``v = c + x``, doubled plus one until its sum reaches 10; the step's y is the
    carry it started from and the number of doublings."""
    def body(c, x):
        v, k = lax.while_loop(lambda s: jnp.sum(s[0]) < 10.0, lambda s: (s[0] * 2.0 + 1.0, s[1] + 1),
                              (c + x, jnp.int32(0)))
        return v * 0.25, (c, k)
    return lax.scan(body, c, xs, reverse=reverse)


def doubling_numpy(c: np.ndarray, xs: np.ndarray, reverse: bool = False) -> tuple:
    """:func:`doubling` as a NumPy loop (float32 throughout)."""
    ys, ks = [None] * len(xs), [0] * len(xs)
    for i in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
        v, k = c + xs[i], 0
        while v.sum(dtype=np.float32) < np.float32(10.0):
            v, k = v * np.float32(2.0) + np.float32(1.0), k + 1
        ys[i], ks[i], c = c, k, v * np.float32(0.25)
    return c, (np.stack(ys) if ys else np.zeros((0, *c.shape), np.float32), np.array(ks, np.int32))


CASES = [(n, rev) for n in (0, 1, 5) for rev in (False, True)]


def _check(got, want) -> None:
    got, want = ember.tree.leaves(got), ember.tree.leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        if np.asarray(w).dtype == np.int32:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


def test_the_numpy_reference_by_hand() -> None:
    """c = (1, 1), x = (2, 3): v = (3, 4), sum 7 -> (7, 9), sum 16: one doubling; the carry is
    v / 4 = (1.75, 2.25)."""
    c, (ys, ks) = doubling_numpy(np.ones(2, np.float32), np.array([[2, 3]], np.float32))
    np.testing.assert_allclose(c, [1.75, 2.25])
    np.testing.assert_array_equal(ks, [1])
    np.testing.assert_array_equal(ys, [[1, 1]])


@pytest.mark.parametrize("n,reverse", CASES)
def test_the_cpu_gives_numpys_values(n: int, reverse: bool) -> None:
    c, xs = _f32(4, seed=n), _f32(n, 4, seed=n + 10)
    _check(ember.jit(lambda c, xs: doubling(c, xs, reverse))(c, xs), doubling_numpy(c, xs, reverse))


@needs_webgpu
@pytest.mark.parametrize("n,reverse", CASES)
def test_webgpu_gives_numpys_values(n: int, reverse: bool) -> None:
    c, xs = _f32(4, seed=n), _f32(n, 4, seed=n + 10)
    f = ember.jit(lambda c, xs: doubling(c, xs, reverse), backend="webgpu")
    _check(f(c, xs), doubling_numpy(c, xs, reverse))
    # the trip counts differ between the steps: the while really ran per step
    if n == 5:
        assert len(set(np.asarray(f(c, xs)[1][1]).tolist())) > 1


@needs_device
@pytest.mark.parametrize("n,reverse", CASES)
def test_cuda_gives_numpys_values(n: int, reverse: bool) -> None:
    c, xs = _f32(4, seed=n), _f32(n, 4, seed=n + 10)
    out = ember.jit(lambda c, xs: doubling(c, xs, reverse), backend="cuda")(c, xs)
    _check(out, doubling_numpy(c, xs, reverse))


def _waiting(c, xs):  # noqa: ANN001, ANN202
    body = lambda c, x: (lax.while_loop(lambda v: jnp.sum(v) < 10.0, lambda v: v * 2.0 + 1.0, c + x), c)  # noqa: E731
    return lax.scan(body, c, xs)


class ScriptedDriver(RecordingDriver):
    """The recording driver whose device-to-host reads (here: the while's booleans) write the
    next of ``answers`` into every byte read."""

    def __init__(self, answers: list[int]) -> None:
        super().__init__()
        self.answers = list(answers)

    def cuMemcpyDtoH(self, dst, src, n):  # noqa: ANN001, ANN201, N802
        ctypes.memset(dst, int(self.answers.pop(0)), n)
        return super().cuMemcpyDtoH(dst, src, n)


def _executable(f, args):  # noqa: ANN001, ANN202
    return cuda_runtime.cuda_backend(ember.jit(f, backend="cuda").lower(*args).program)


@needs_nvrtc
def test_the_launch_sequence_follows_the_while(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two steps of three floats; the cond answers true, false (step 0: one trip), false (step 1:
    none). Without graphs: the two xs slices copied out (offsets 0 and 12), then per step the
    body's add (map0), the cond (reduce0, map1) and its boolean read, the while's body (map0)
    once in step 0; then the ys -- the carry each step started from, the input first -- copied
    into the stacked output at offsets 0 and 12. Nothing else is read back."""
    drv = ScriptedDriver([1, 0, 0])
    install(drv, monkeypatch)
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "0")
    exe = _executable(_waiting, (_f32(3), _f32(2, 3)))
    ((kind, _, scan),) = exe.segments
    assert kind == "loop" and isinstance(scan, cuda_stepped.CUDASteppedScan)
    c, xs = cuda_runtime._alloc(12), cuda_runtime._alloc(24)
    carry, ys = exe.run_device([c, xs])
    seq = [(k[0], k[1]) if k[0] == "launch" else k for k in drv.calls
           if k[0] in ("launch", "dtoh", "dtod", "graph_launch")]
    copies_in, seq = seq[:2], seq[2:]
    want_in = [("dtod", int(xs.ptr), 12), ("dtod", int(xs.ptr) + 12, 12)]
    assert [(k[0], k[2], k[3]) for k in copies_in] == want_in
    cond = [("launch", "reduce0"), ("launch", "map1"), "read"]
    names = [k if k[0] == "launch" else "read" if k[0] == "dtoh" else k[0] for k in seq]
    assert names == [("launch", "map0"), *cond, ("launch", "map0"), *cond,  # step 0: one trip
                     ("launch", "map0"), *cond,  # step 1: none
                     "dtod", "dtod"]
    assert all(k[2] == 1 for k in seq if k[0] == "dtoh")  # one boolean each
    out0, out1 = seq[-2:]
    assert (out0[1], out0[2], out0[3]) == (int(ys.ptr), int(c.ptr), 12)  # y[0]: the initial carry
    assert (out1[1], out1[3]) == (int(ys.ptr) + 12, 12)
    assert drv.answers == []
    del carry, ys, c, xs, exe
    gc.collect()


@needs_nvrtc
def test_with_graphs_each_segment_is_one_graph_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """With graphs every run of a device segment (the add, the cond, the while's body) is one
    graph launch, captured once per program and updated after (new buffers each step): for the
    script above the adds run twice, the cond three times and the body once -- 6 launches, 3
    instantiations, each boolean read after its cond's launch, no kernel launched directly."""
    drv = ScriptedDriver([1, 0, 0])
    install(drv, monkeypatch)
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "1")
    exe = _executable(_waiting, (_f32(3), _f32(2, 3)))
    c, xs = cuda_runtime._alloc(12), cuda_runtime._alloc(24)
    outs = exe.run_device([c, xs])
    kinds = [k[0] for k in drv.calls]
    assert kinds.count("instantiate") == 3 and "launch" not in kinds
    step = ["graph_launch", "graph_launch", "dtoh"]  # the add or the while's body, then the cond
    assert [k for k in kinds if k in ("graph_launch", "dtoh")] == step * 3
    assert kinds[:2] == ["dtod", "dtod"] and kinds[-2:] == ["dtod", "dtod"]
    del outs, c, xs, exe
    gc.collect()


@needs_nvrtc
def test_the_text_and_every_segments_kernels_compile() -> None:
    args = (_f32(4), _f32(3, 4))
    text = ember.jit(doubling, backend="cuda").lower(*args).compile().as_text()
    assert text.startswith("// scan: 3 steps stepped from the host") and "// while: host-driven" in text
    exe = _executable(doubling, args)
    ((_, _, scan),) = exe.segments
    programs = []
    for _, _, seg in scan.body.segments:
        programs += [seg.cond, seg.body] if hasattr(seg, "cond") else [seg]
    assert len(programs) == 4  # the add, the while's cond and body, the scaling
    for p in programs:
        for arch in ("compute_80", "compute_90"):
            assert b".entry" in p.ptx(arch)


def test_what_a_while_in_a_scan_body_cannot_run_is_named() -> None:
    """A while whose body sorts: the error names the sort and where it is; with
    host_fallback=True the scan runs on the host and gives NumPy's values."""
    def sorting(c, xs):  # noqa: ANN001, ANN202
        body = lambda c, x: (lax.while_loop(lambda v: jnp.sum(v) < 10.0, lambda v: jnp.sort(v) * 2.0 + 1.0,  # noqa: E731
                                            c + x), c)
        return lax.scan(body, c, xs)

    args = (_f32(3), _f32(4, 3, seed=1))
    with pytest.raises(NotImplementedError, match=r"primitive 'sort': in the body of a 'while'"):
        ember.jit(sorting, backend="cuda").lower(*args)
    text = ember.jit(sorting, backend="cuda", host_fallback=True).lower(*args).compile().as_text()
    assert "// host segment: scan" in text


@needs_webgpu
def test_on_webgpu_only_the_booleans_come_back() -> None:
    """Device inputs: the carries and ys stay on the device; per call one boolean per test of
    the cond is read back, and the literal 0 counter goes up once per step."""
    c, xs = ember.device_put(_f32(4), "webgpu:0"), ember.device_put(_f32(5, 4, seed=3), "webgpu:0")
    g = ember.jit(doubling)
    g(c, xs)
    before = dict(webgpu.TRANSFERS)
    out = g(c, xs)
    after = dict(webgpu.TRANSFERS)
    trips = int(np.asarray(out[1][1]).sum())
    assert after["device_to_host"] - before["device_to_host"] == trips + 5
    assert all(isinstance(o, DeviceArray) for o in ember.tree.leaves(out))
    _check(out, doubling_numpy(_f32(4), _f32(5, 4, seed=3)))


@needs_nvrtc
def test_a_named_axis_builds_once_and_copies_the_bound_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a named axis ``n`` (the carry's length) the stepped scan is built once; a call at
    ``n = 5`` copies 2 steps of 20 bytes out of ``xs`` and 2 ys of 20 bytes into the stacked
    output, and reads one boolean per step where the cond answers false at once."""
    drv = ScriptedDriver([0, 0])
    install(drv, monkeypatch)
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "0")
    f = ember.jit(_waiting, backend="cuda", dynamic_axes=(("n",), (None, "n")))
    low = f.lower(_f32(3), _f32(2, 3))
    exe = low.specialize(n=3).run.exe
    assert low.specialize(n=5).run.exe is exe
    ((_, _, scan),) = exe.segments
    assert isinstance(scan, cuda_stepped.CUDASteppedScan) and scan.axes == ("n",)
    c, xs = cuda_runtime._alloc(20), cuda_runtime._alloc(40)
    carry, ys = exe.run_device([c, xs], {"n": 5})
    copies = [k for k in drv.calls if k[0] == "dtod"]
    assert [(k[2], k[3]) for k in copies[:2]] == [(int(xs.ptr), 20), (int(xs.ptr) + 20, 20)]
    assert [(k[1], k[3]) for k in copies[2:]] == [(int(ys.ptr), 20), (int(ys.ptr) + 20, 20)]
    assert [k[2] for k in drv.calls if k[0] == "dtoh"] == [1, 1] and drv.answers == []
    del carry, ys, c, xs, exe
    gc.collect()
