"""``scan`` / ``fori_loop`` with a static trip count on CUDA: the loop runs on the device over the
schedule WebGPU runs (``gpu/loop_schedule.py``). Without a device: every program's kernels
compile to PTX for sm_80 and sm_90 and ``as_text()`` names the device loop; with one: the values
against the CPU backend, with and without the CUDA graph."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.gpu import cuda_loops, cuda_runtime
from tests.gpu.cases import scan_loss
from tests.gpu.cuda_marks import needs_device, needs_nvrtc
from tests.gpu.fake_cuda import RecordingDriver, install


def _f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _fori(x, y):
    def body(i, c):
        a, b, keep, s = c
        return b, a * 0.5 + jnp.sin(b) + i, keep, s + jnp.sum(a)
    return lax.fori_loop(0, 7, body, (x, y, x * 3, jnp.float32(0)))


def _reverse_scan(c, xs):
    w = _f32(3, 3, seed=1)

    def body(c, x):
        n = jnp.tanh(c @ w) + x
        return n, (n * 2.0, jnp.sum(n), 1.0)
    return lax.scan(body, c, xs, reverse=True)


def _mlp_training(w1, w2, x, y):
    def loss(p):
        h = jnp.tanh(x @ p[0])
        return jnp.mean((h @ p[1] - y) ** 2)

    def step(i, p):
        g = ember.grad(loss)(p)
        return tuple(a - 0.1 * b for a, b in zip(p, g))
    return lax.fori_loop(0, 5, step, (w1, w2))


PROGRAMS = [
    ("fori_loop", _fori, lambda: (_f32(4), _f32(4, seed=3)), 1),
    ("reverse_scan", _reverse_scan, lambda: (_f32(2, 3), _f32(5, 2, 3, seed=2)), 1),
    ("mlp_training", _mlp_training,
     lambda: (_f32(8, 16, seed=1) * 0.3, _f32(16, 2, seed=2) * 0.3, _f32(32, 8, seed=3),
              _f32(32, 2, seed=4)), 1),
    ("grad_of_scan", ember.grad(scan_loss), lambda: (_f32(3), _f32(6, 3, seed=4)), 2),
]
_IDS = [p[0] for p in PROGRAMS]


def _scans(f, args, **options) -> list:
    exe = ember.jit(f, backend="cuda", **options).lower(*args).executable
    return [e for k, _, e in getattr(exe, "segments", []) if isinstance(e, cuda_loops.CUDAScan)]


@needs_nvrtc
@pytest.mark.parametrize("name,f,make,nscans", PROGRAMS, ids=_IDS)
def test_scan_programs_compile_to_ptx(name: str, f, make, nscans: int) -> None:
    args = make()
    exe = ember.jit(f, backend="cuda").lower(*args).executable
    scans = [e for k, _, e in exe.segments if k == "loop"]
    assert len(scans) == nscans and all(isinstance(s, cuda_loops.CUDAScan) for s in scans)
    text = ember.jit(f, backend="cuda").lower(*args).compile().as_text()
    assert text.count("steps on the device, launched back to back on one stream and captured into one "
                      "CUDA graph") == nscans
    for arch in ("compute_80", "compute_90"):
        for _, _, e in exe.segments:  # the loops' bodies and the device segments around them
            ptx = e.ptx(arch).decode()
            assert f".target sm_{arch[-2:]}" in ptx
            assert ptx.count(".entry ") == len(e.body.kernels if hasattr(e, "body") else e.schedule.kernels)


@needs_nvrtc
def test_a_program_of_one_scan_is_one_translation_unit() -> None:
    """``as_text()`` of a program that is only a scan: the loop's description, then the body's
    kernels, compilable as it is."""
    f = lambda c, xs: lax.scan(lambda c, x: (c * 2.0 + x, c + 1.0), c, xs)  # noqa: E731
    text = ember.jit(f, backend="cuda").lower(_f32(3), _f32(9, 3)).compile().as_text()
    assert text.startswith("// scan: 9 steps on the device") and "__global__" in text
    assert b".entry" in cuda_runtime.compile_ptx(text, "compute_80")


def test_launches_per_call_follow_the_shared_schedule() -> None:
    """Hand-derived: 7 steps of the fori body's kernels; copies: the 5 carries in (the counter and
    the 4 of the loop), then per step the two the body passes along (``keep``, ``b`` into ``a``)."""
    (scan,) = _scans(_fori, (_f32(4), _f32(4, seed=3)))
    k = len(scan.body.kernels)
    assert cuda_loops.launches_per_call(scan) == {"kernel_launches": 7 * k, "copies": 5 + 7 * 2}


@needs_nvrtc
def test_a_static_scan_over_a_named_axis_is_one_device_loop() -> None:
    """Under a named axis the scan (static length) is built once for every binding, its sizes
    kernel parameters, and its body compiles to PTX."""
    f = lambda x: lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c) + jnp.sum(c) * 0.1, x)  # noqa: E731
    c = ember.jit(f, backend="cuda", dynamic_axes=(("n",),)).lower(np.ones(5, np.float32))
    run = c.specialize(n=5).run
    assert c.specialize(n=300).run.exe is run.exe
    (scan,) = [e for k, _, e in run.exe.segments if k == "loop"]
    assert isinstance(scan, cuda_loops.CUDAScan) and "const int sz0" in scan.source
    assert "// scan: 3 steps on the device" in c.compile(n=2).as_text()
    for arch in ("compute_80", "compute_90"):
        assert b".entry" in scan.ptx(arch)
    # the plan's sizes follow the binding: one step of 300 float32 values is 1200 bytes
    plan = scan.schedule.plan({"n": 300}, cuda_runtime.nbytes)
    assert plan.outputs[1:] == [("carry", 1, 1)] and plan.buffers["carry", 1, 1] == 1200


def test_a_scan_the_device_cannot_run_names_what_stops_it() -> None:
    def sorting(c, xs):
        return lax.scan(lambda c, x: (jnp.sort(c + x), c), c, xs)

    def waiting(c, xs):  # (a while in a scan body steps from the host; one in a while body does not)
        inner = lambda v: lax.while_loop(lambda u: jnp.sum(u) < 1.0, lambda u: u + 1.0, v)  # noqa: E731
        body = lambda c, x: (lax.while_loop(lambda v: jnp.sum(v) < 10.0, lambda v: inner(v) * 2.0, c + x), c)  # noqa: E731
        return lax.scan(body, c, xs)

    args = (_f32(3), _f32(4, 3))
    with pytest.raises(NotImplementedError, match=r"cuda backend has no kernel for primitive 'sort': in the "
                       r"body of a 'scan'"):
        ember.jit(sorting, backend="cuda").lower(*args)
    with pytest.raises(NotImplementedError, match=r"primitive 'while': in the body of a 'while'"):
        ember.jit(waiting, backend="cuda").lower(*args)
    # with host_fallback=True the scan runs on the host as a whole: its text says so
    text = ember.jit(sorting, backend="cuda", host_fallback=True).lower(*args).compile().as_text()
    assert "// host segment: scan" in text


@needs_device
@pytest.mark.parametrize("graphs", ["1", "0"])
@pytest.mark.parametrize("name,f,make,nscans", PROGRAMS, ids=_IDS)
def test_scan_programs_run_on_the_device(name: str, f, make, nscans: int, graphs: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", graphs)
    args = make()
    want = ember.tree.leaves(ember.jit(f, backend="native")(*args))
    g = ember.jit(f, backend="cuda")
    for _ in range(2):  # the second call replays the captured graph
        got = ember.tree.leaves(g(*args))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


@needs_device
@pytest.mark.parametrize("n", [0, 1, 4, 7])
@pytest.mark.parametrize("reverse", [False, True])
def test_trip_counts_on_the_device(n: int, reverse: bool) -> None:
    def f(c, k, xs):
        def body(carry, x):
            c, k = carry
            return (jnp.tanh(c) + x, k), (c * 2.0, 1.0)
        return lax.scan(body, (c, k), xs, reverse=reverse)
    args = (_f32(3), _f32(2, seed=1), _f32(n, 3, seed=2))
    want = ember.tree.leaves(ember.jit(f, backend="native")(*args))
    got = ember.tree.leaves(ember.jit(f, backend="cuda")(*args))
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


@needs_device
def test_a_scan_on_device_arrays_keeps_them_there() -> None:
    from ember._src.gpu.device_array import DeviceArray

    def h(x):
        return jnp.sum(lax.fori_loop(0, 4, lambda i, c: jnp.cos(c) + c * 0.5, jnp.exp(x) * 0.1))
    f = ember.jit(h)
    x = _f32(64)
    dx = ember.device_put(x, "cuda:0")
    f(dx)
    before = dict(cuda_runtime.TRANSFERS)
    out = f(dx)
    assert isinstance(out, DeviceArray) and cuda_runtime.TRANSFERS == before
    np.testing.assert_allclose(np.asarray(out), np.asarray(ember.jit(h, backend="native")(x)), rtol=1e-5)


@needs_device
def test_a_static_scan_over_a_named_axis_runs_on_the_device() -> None:
    f = lambda x: lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c) + jnp.sum(c) * 0.1, x)  # noqa: E731
    g = ember.jit(f, backend="cuda", dynamic_axes=(("n",),))
    for n in (5, 300, 5):
        x = _f32(n, seed=n)
        np.testing.assert_allclose(np.asarray(g(x)), np.asarray(ember.jit(f, backend="native")(x)),
                                   rtol=1e-5, atol=1e-6)


@needs_nvrtc
@pytest.mark.parametrize("graphs", ["1", "0"])
def test_the_launch_layer_issues_the_schedule(graphs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a device, through a recording driver: the loop's launches and copies are those of
    the shared schedule, in its order, at its offsets (a reverse scan's first step reads the last
    ``xs`` slice); the first call captures them into one graph and every call launches it once."""
    import gc

    drv = RecordingDriver()
    install(drv, monkeypatch)
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", graphs)
    (lowered,) = _scans(_reverse_scan, (_f32(2, 3), _f32(5, 2, 3)))
    scan = cuda_loops.CUDAScan(lowered.prog)  # (its own: its buffers are the fake driver's)
    args = [np.zeros(v.aval.shape, v.aval.dtype) for v in scan.prog.invars]
    counts = cuda_loops.launches_per_call(scan)
    names = [k.name for k in scan.body.kernels]
    for call in range(2):
        before = len(drv.calls)
        outs = scan.run_device(args)
        new = drv.calls[before:]
        loop = drv.captured if graphs == "1" else new
        if graphs == "1":
            assert [c[0] for c in new].count("graph_launch") == 1
            assert [c[0] for c in new].count("instantiate") == (1 if call == 0 else 0)
            assert not any(c[0] == "launch" for c in new)
            assert len(drv.captured) == counts["kernel_launches"] + counts["copies"]  # captured once
        launches = [c[1] for c in loop if c[0] == "launch"]
        assert launches == names * 5 and len(launches) == counts["kernel_launches"]
        slots = next(iter(scan._bound.values())).slots
        x_copies = [c for c in loop if c[0] == "dtod" and c[1] == int(slots["x", 0].ptr)]
        step = 2 * 3 * 4  # one (2, 3) float32 slice
        assert [c[2] - int(slots["xs", 0].ptr) for c in x_copies[-5:]] == [4 * step, 3 * step, 2 * step,
                                                                           step, 0]
        # the outputs: new buffers, copied from the final carry set and the stacked ys
        assert len(outs) == len(scan.prog.outvars)
        assert {c[2] for c in new[-len(outs):]} == {int(slots[s].ptr) for s in
                                                    scan.schedule.plan({}, cuda_runtime.nbytes).outputs}
    del scan, outs, slots
    gc.collect()  # (the fake buffers die while the fake driver is in place)


def test_the_cuda_pool_reuses_freed_buffers_by_size_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a recording driver: the pool WebGPU uses (``gpu/pool.py``) over ``cuMemAlloc``. A
    buffer whose array died serves the next request of its power-of-two class (no allocation);
    ``memory_stats`` reports it; out of memory, the pooled buffers are freed and the request retried
    before the error."""
    import gc

    drv = RecordingDriver()
    install(drv, monkeypatch)
    a = cuda_runtime._alloc(1000)  # class 1024
    assert drv.allocs == [1024] and a.size == 1024
    ptr = int(a.ptr)
    del a
    b = cuda_runtime._alloc(700)  # the same class: the freed buffer again
    c = cuda_runtime._alloc(100)  # class 256: a new buffer
    assert int(b.ptr) == ptr and drv.allocs == [1024, 256]
    stats = cuda_runtime._STATE["pool"].stats()
    assert stats["bytes_in_use"] == 1024 + 256 and stats["reused"] == 1 and stats["num_allocs"] == 2
    c_ptr = int(c.ptr)
    del c  # pooled
    drv.refuse = 1  # the device refuses once: the pool empties itself and retries
    d = cuda_runtime._alloc(5000)
    assert drv.frees == [c_ptr] and d.size == 8192
    assert cuda_runtime._STATE["pool"].stats()["pool_bytes"] == 0
    del b, d
    gc.collect()
