"""Every CUDA program is one graph launch, and a call's memory comes from a stream-ordered pool:
checked without a GPU through the recording driver (``tests/gpu/fake_cuda.py``), which replays a
launched graph's kernel nodes with the arguments they hold, so the pointers each kernel runs with
are checked against the call's buffers; with a device, the values against the CPU backend."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.gpu import cuda_graphs, cuda_runtime
from ember._src.gpu.pool import DeviceOutOfMemory
from tests.gpu.cuda_marks import needs_device, needs_nvrtc
from tests.gpu.fake_cuda import RecordingDriver, install


def _f(x):
    """Three kernels: a row reduction, a whole-array reduction's two passes, a map reading both."""
    return jnp.tanh(x) * jnp.sum(jnp.exp(x), axis=1, keepdims=True) + jnp.max(x)


def _x(seed: int = 0, n: int = 6) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, 5)).astype(np.float32)


def _exe(drv: RecordingDriver, f=_f, args=None, **jit):
    lowered = ember.jit(f, backend="cuda", **jit).lower(*(args or (_x(),)))
    assert isinstance(lowered.executable, cuda_runtime.CUDAExecutable)
    exe = cuda_runtime.CUDAExecutable(lowered.program)  # (its own: its graphs are the fake driver's)
    for k in exe.schedule.kernels:
        drv.nargs[k.name] = len(k.buffers())  # (the fake reads this many pointers per launch)
    return exe


def _expected(exe, held_by_index: dict[int, int]) -> list[tuple[str, list[int]]]:
    return [(k.name, [held_by_index[b.index] for b in k.buffers()]) for k in exe.schedule.kernels]


def _pointers(exe, drv: RecordingDriver, _: int, x, out) -> dict[int, int]:
    """The buffer index -> pointer map of the last call: the input and output are known; the
    intermediates are what the kernels that write them ran with."""
    sch = exe.schedule
    ptrs = {sch.inputs[0]: int(x.ptr), sch.outputs[0][1]: int(out.ptr)}
    for (_, args), k in zip(drv.executed[-len(sch.kernels):], sch.kernels):
        ptrs.setdefault(k.out.index, args[-1])
    return ptrs


@needs_nvrtc
def test_a_program_is_captured_once_and_relaunched_or_updated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call captures the kernels (on a non-blocking stream) into one graph and launches
    it on the call stream; a call with the same buffers relaunches it; a call with another input
    buffer updates the kernel nodes that read it (no new capture), and the replayed kernels run
    with the new pointers."""
    drv = RecordingDriver()
    install(drv, monkeypatch)
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "1")
    exe = _exe(drv)
    ks = exe.schedule.kernels
    assert len(ks) >= 3
    x = cuda_runtime._alloc(6 * 5 * 4)
    stats = dict(cuda_graphs.STATS)
    (out,) = exe.run_device([x])
    assert [c[0] for c in drv.captured] == ["launch"] * len(ks)  # captured, not run
    assert [c[0] for c in drv.calls].count("instantiate") == 1
    assert [c[0] for c in drv.calls if c[0] in ("launch", "graph_launch")] == ["graph_launch"]
    first = _pointers(exe, drv, 0, x, out)
    assert drv.executed == _expected(exe, first)
    assert cuda_graphs.STATS["captures"] == stats["captures"] + 1
    # the same buffers again (the output's buffer freed first, so the pool hands it back)
    del out
    gc.collect()
    n = len(drv.calls)
    (out,) = exe.run_device([x])
    new = [c[0] for c in drv.calls[n:]]
    assert new.count("graph_launch") == 1 and "instantiate" not in new and "launch" not in new
    second = _pointers(exe, drv, 0, x, out)
    assert drv.executed[-len(ks):] == _expected(exe, second)
    # another input buffer: the nodes that read the input are updated in place
    y = cuda_runtime._alloc(6 * 5 * 4)
    n = len(drv.calls)
    (out2,) = exe.run_device([y])
    new = drv.calls[n:]
    readers = [k.name for k in ks if exe.schedule.inputs[0] in [b.index for b in k.buffers()]]
    before = dict(_expected(exe, second))
    after = _expected(exe, _pointers(exe, drv, 0, y, out2))
    changed = [name for name, p in after if before[name] != p]
    assert set(readers) <= set(changed)
    assert [c[1] for c in new if c[0] == "set_params"] == changed  # only those nodes, in order
    assert "instantiate" not in [c[0] for c in new] and [c[0] for c in new].count("graph_launch") == 1
    got = drv.executed[-len(ks):]
    assert got == after
    assert all(int(y.ptr) in args for name, args in got if name in readers)
    assert cuda_graphs.STATS["updates"] >= stats["updates"] + 1
    del x, y, out, out2, exe
    gc.collect()


@needs_nvrtc
@pytest.mark.parametrize("how", ["off", "capture fails"])
def test_without_a_graph_the_kernels_launch_on_the_call_stream(how: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``EMBER_CUDA_GRAPHS=0``, or a capture the driver refuses: every kernel is launched directly
    on the call stream (a stream of its own, not the legacy stream 0), in the schedule's order,
    and a refused capture is not tried again."""
    drv = RecordingDriver()
    install(drv, monkeypatch)
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "0" if how == "off" else "1")
    drv.fail_capture = how == "capture fails"
    exe = _exe(drv)
    x = cuda_runtime._alloc(6 * 5 * 4)
    for _ in range(2):
        n = len(drv.calls)
        (out,) = exe.run_device([x])
        launches = [c for c in drv.calls[n:] if c[0] in ("launch", "graph_launch", "instantiate")]
        assert [c[1] for c in launches] == [k.name for k in exe.schedule.kernels]
        assert all(c[3] == ("stream", "blocking") for c in launches)
        assert drv.executed[-len(launches):] == _expected(exe, _pointers(exe, drv, 0, x, out))
    assert exe.graphs.entries == ({((), None): None} if how == "capture fails" else {})
    del x, out, exe
    gc.collect()


@needs_nvrtc
def test_each_binding_of_a_named_axis_has_its_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a named dynamic axis one executable serves every binding; each binding is captured
    once (its grids differ), and a binding seen before relaunches its own graph."""
    drv = RecordingDriver()
    install(drv, monkeypatch)
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "1")
    c = ember.jit(_f, backend="cuda", dynamic_axes=(("n", None),)).lower(_x())
    shared = c.specialize(n=6).run.exe
    assert isinstance(shared, cuda_runtime.CUDAExecutable) and shared.schedule.axes == ("n",)
    exe = cuda_runtime.CUDAExecutable(shared.prog, shared.axes)  # (its own, for the fake driver)
    for k in exe.schedule.kernels:
        drv.nargs[k.name] = len(k.buffers())
    grids = {}
    for n in (6, 300, 6):
        x = cuda_runtime._alloc(n * 5 * 4)
        exe.run_device([x], {"n": n})
        grids[n] = [nd["grid"] for nd in drv.graphs[max(drv.graphs)]] if n not in grids else grids[n]
        del x
    assert [c[0] for c in drv.calls].count("instantiate") == 2
    assert set(exe.graphs.entries) == {((6,), None), ((300,), None)}
    assert [c[0] for c in drv.calls].count("graph_launch") == 3
    # a row reduction has one workgroup per row: the grids follow the binding
    assert grids[6] != grids[300] and any(g[0] == 300 for g in grids[300])
    del exe, c
    gc.collect()


def _pool(drv: RecordingDriver, monkeypatch: pytest.MonkeyPatch) -> cuda_runtime.CUDAPool:
    install(drv, monkeypatch)
    stream = cuda_runtime.call_stream(drv)
    pool = cuda_runtime.CUDAPool.open(drv, 0, stream)
    cuda_runtime._STATE["pool"] = pool
    return pool


def test_the_pool_is_stream_ordered_where_the_device_supports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED``: buffers come from a pool of ember's own
    (``cuMemPoolCreate`` on device 0, its release threshold set to keep freed memory) with
    ``cuMemAllocFromPoolAsync`` on the call stream, rounded up to 256 bytes, and go back with
    ``cuMemFreeAsync`` on that stream; ``memory_stats`` reports the driver pool's bytes."""
    drv = RecordingDriver(pools=True)
    pool = _pool(drv, monkeypatch)
    stream = cuda_runtime._STATE["stream"]
    assert pool.stream_ordered and drv.threshold == 2**64 - 1
    a = cuda_runtime._alloc(1000)
    assert drv.calls[-1] == ("alloc_async", int(a.ptr), 1024, stream) and a.size == 1024
    b = cuda_runtime._alloc(1025)
    assert b.size == 1280  # (256-byte steps, not a power-of-two class)
    stats = pool.stats()
    assert stats["bytes_in_use"] == 1024 + 1280 and stats["bytes_reserved"] == 1024 + 1280
    ptr = int(a.ptr)
    del a
    gc.collect()
    pool.drain()  # (a finalizer only queues the buffer; the next pool operation frees it)
    assert drv.calls[-1] == ("free_async", ptr, stream)
    drv.used -= 1024
    stats = pool.stats()
    assert stats["bytes_in_use"] == 1280 and stats["pool_bytes"] == 1024
    del b
    gc.collect()


def test_without_memory_pools_the_pool_is_synchronous(monkeypatch: pytest.MonkeyPatch) -> None:
    drv = RecordingDriver(pools=False)
    pool = _pool(drv, monkeypatch)
    assert not pool.stream_ordered
    a = cuda_runtime._alloc(1000)
    assert a.size == 1024 and drv.allocs == [1024] and not any(c[0] == "alloc_async" for c in drv.calls)
    del a
    gc.collect()


def test_stream_ordered_out_of_memory_frees_the_pool_then_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device refuses once: the stream is synchronized (its pending frees complete), the pool
    trimmed to nothing, and the request retried. Refused twice: DeviceOutOfMemory (a MemoryError)
    naming the device and the bytes, never a crash."""
    drv = RecordingDriver(pools=True)
    _pool(drv, monkeypatch)
    drv.refuse = 1
    n = len(drv.calls)
    a = cuda_runtime._alloc(4096)
    assert [c[0] for c in drv.calls[n:]] == ["sync", "trim", "alloc_async"] and a.size == 4096
    drv.refuse = 2
    with pytest.raises(DeviceOutOfMemory, match=r"cuda:0: out of memory allocating 8192 bytes "
                       r"\(4096 bytes in use"):
        cuda_runtime._alloc(8192)
    assert isinstance(DeviceOutOfMemory("x"), MemoryError)
    del a
    gc.collect()


@needs_nvrtc
def test_a_calls_intermediates_are_allocated_and_freed_on_its_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the stream-ordered pool: the call's intermediates are allocated on the call stream
    before its graph launch and freed on it right after (the output stays allocated), so the
    next call may reuse them once the kernels are done."""
    drv = RecordingDriver(pools=True)
    _pool(drv, monkeypatch)
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "1")
    exe = _exe(drv)
    x = cuda_runtime._alloc(6 * 5 * 4)
    n = len(drv.calls)
    (out,) = exe.run_device([x])
    new = drv.calls[n:]
    kinds = [c[0] for c in new]
    launch = kinds.index("graph_launch")
    allocs = [c[1] for c in new[:launch] if c[0] == "alloc_async"]
    frees = [c[1] for c in new[launch:] if c[0] == "free_async"]
    stream = cuda_runtime._STATE["stream"]
    assert all(c[-1] == stream for c in new if c[0] in ("alloc_async", "free_async"))
    n_buffers = len(exe.schedule.buffers) - 1  # every buffer but the input
    assert len(allocs) == n_buffers and sorted(frees) == sorted(set(allocs) - {int(out.ptr)})
    assert "alloc_async" not in kinds[launch:] and "free_async" not in kinds[:launch]
    del x, out, exe
    gc.collect()


@needs_device
@pytest.mark.parametrize("graphs", ["1", "0"])
def test_programs_run_as_graphs_on_the_device(graphs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a device: the values against the CPU backend over repeated calls (capture, relaunch,
    node updates for new input buffers), and the pool's figures."""
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", graphs)
    g = ember.jit(_f, backend="cuda")
    for seed in (0, 1, 1, 2):
        x = _x(seed)
        want = np.asarray(ember.jit(_f, backend="native")(x))
        np.testing.assert_allclose(np.asarray(g(ember.device_put(x, "cuda:0"))), want, rtol=2e-5, atol=2e-5)
    stats = ember.memory_stats("cuda:0")
    assert stats["peak_bytes_in_use"] > 0 and stats["bytes_reserved"] >= stats["bytes_in_use"]


def test_kernel_nodes_skip_what_the_driver_does_not_describe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library's kernel node the driver will not describe is left out; ember's are found by
    their function, whatever their position."""
    from tests.gpu.fake_cuda import Fn

    drv = RecordingDriver()
    f1, f2 = Fn(1001, "a"), Fn(1002, "b")
    drv.graphs[7] = [{"type": 0, "fn": f1}, {"type": 1}, {"type": 0, "fn": Fn(5, "library")},
                     {"type": 0, "fn": f2}]
    real = drv.cuGraphKernelNodeGetParams
    monkeypatch.setattr(drv, "cuGraphKernelNodeGetParams",
                        lambda node: (700, None) if node == (7, 2) else real(node))
    assert cuda_graphs.kernel_nodes(drv, 7) == {1001: (7, 0), 1002: (7, 3)}
