"""Device-resident arrays on WebGPU (executed on Mesa's software Vulkan driver where there is no
GPU): ``device_put``/``device_get``, ``jit`` and eager ops running where their inputs live, the
default device, the buffer pool and its out-of-memory error. Values are compared with NumPy."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.devices import Device
from ember._src.gpu import residency, webgpu
from ember._src.gpu.device_array import DeviceArray
from ember._src.gpu.pool import DeviceOutOfMemory
from ember.errors import DeletedArrayError

_WHY = webgpu.unavailable_reason()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"no WebGPU adapter: {_WHY}")

WEBGPU = Device(0, "webgpu", "webgpu")


def _transfers() -> dict:
    return dict(webgpu.TRANSFERS)


def _rng_f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


def test_device_put_keeps_a_device_buffer_and_copies_back_on_request() -> None:
    x = _rng_f32(3, 5)
    before = _transfers()
    d = ember.device_put(x, "webgpu:0")
    assert isinstance(d, DeviceArray) and isinstance(d, ember.Array)
    assert d._value is None and isinstance(d.handle, webgpu.WebGPUBuffer)  # no host copy is held
    assert d.device == WEBGPU == ember.devices("webgpu")[0] and d.devices() == {WEBGPU}
    assert (d.shape, d.dtype, d.ndim, d.size, d.nbytes) == ((3, 5), np.float32, 2, 15, 60)
    assert webgpu.TRANSFERS["host_to_device"] == before["host_to_device"] + 1
    assert webgpu.TRANSFERS["device_to_host"] == before["device_to_host"]
    np.testing.assert_array_equal(np.asarray(d), x)
    np.testing.assert_array_equal(ember.device_get({"a": [d]})["a"][0], x)
    assert "device=webgpu:0" in repr(d) and d.block_until_ready() is d
    back = ember.device_put(d, "cpu")
    assert type(back) is ember.Array and back.device == "cpu"
    np.testing.assert_array_equal(np.asarray(back), x)
    b = ember.device_put(np.array([True, False, True]), ember.devices("webgpu")[0])
    np.testing.assert_array_equal(np.asarray(b), [True, False, True])
    i = ember.device_put(np.arange(-3, 3, dtype=np.int32), "webgpu")
    np.testing.assert_array_equal(np.asarray(i), np.arange(-3, 3))


def test_chained_jit_calls_stay_on_the_device() -> None:
    """JAX's rule: a jit of device inputs runs there and its outputs stay there, so two chained
    calls make no host copy (the runtime's transfer counter does not move)."""
    x, w = _rng_f32(8, 16), _rng_f32(16, 4, seed=1)
    f = ember.jit(lambda x, w: jnp.tanh(x @ w) * 0.5)
    g = ember.jit(lambda y: jnp.sum(jnp.exp(y), axis=1))
    dx, dw = ember.device_put((x, w), "webgpu:0")
    g(f(dx, dw))  # compiles
    before = _transfers()
    y = f(dx, dw)
    z = g(y)
    assert _transfers() == before
    assert isinstance(y, DeviceArray) and isinstance(z, DeviceArray) and z.device == WEBGPU
    want_y = np.tanh(x.astype(np.float64) @ w) * 0.5
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(z), np.exp(want_y).sum(1), rtol=1e-5)
    assert _transfers()["device_to_host"] == before["device_to_host"] + 2  # the two np.asarray


def test_jit_outputs_that_are_inputs_or_constants_get_device_buffers() -> None:
    x = _rng_f32(4)
    c = np.arange(4, dtype=np.float32)
    f = ember.jit(lambda x: (x, jnp.asarray(c), x + 1))
    dx = ember.device_put(x, "webgpu:0")
    a, b, s = f(dx)
    assert all(isinstance(t, DeviceArray) for t in (a, b, s))
    np.testing.assert_array_equal(np.asarray(a), x)
    np.testing.assert_array_equal(np.asarray(b), c)
    np.testing.assert_allclose(np.asarray(s), x + 1)
    del a, b, s, dx
    np.testing.assert_array_equal(np.asarray(f(ember.device_put(x, "webgpu:0"))[1]), c)  # constant intact


def test_host_arguments_mixed_with_device_ones_are_copied_to_the_device() -> None:
    x, y = _rng_f32(5), _rng_f32(5, seed=2)
    f = ember.jit(lambda a, b: a * b)
    out = f(ember.device_put(x, "webgpu:0"), y)
    assert isinstance(out, DeviceArray)
    np.testing.assert_allclose(np.asarray(out), x * y, rtol=1e-6)


class _FakeCudaBuffer:
    device = Device(0, "cuda", "cuda")

    def download(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        raise AssertionError("nothing may be copied before the device check")


def test_mixing_devices_in_one_call_names_both() -> None:
    x = ember.device_put(_rng_f32(3), "webgpu:0")
    on_cuda = DeviceArray(_FakeCudaBuffer(), ember.ShapedArray((3,), np.dtype(np.float32)))
    with pytest.raises(ValueError, match=r"different devices, webgpu:0 and cuda:0"):
        ember.jit(lambda a, b: a + b)(x, on_cuda)
    with pytest.raises(ValueError, match=r"webgpu:0 and cuda:0"):
        x + on_cuda


def test_an_explicit_backend_wins() -> None:
    x = _rng_f32(6)
    d = ember.device_put(x, "webgpu:0")
    on_cpu = ember.jit(lambda a: jnp.sin(a) + 1, backend="native")(d)
    assert type(on_cpu) is ember.Array
    np.testing.assert_allclose(np.asarray(on_cpu), np.sin(x) + 1, rtol=1e-6)
    host_in = ember.jit(lambda a: a * 3, backend="webgpu")(x)  # host inputs: outputs copied back
    assert type(host_in) is ember.Array
    np.testing.assert_allclose(np.asarray(host_in), x * 3)


def test_eager_ops_on_device_arrays_run_there_and_are_cached() -> None:
    x = _rng_f32(4, 3)
    d = ember.device_put(x, "webgpu:0")
    results = {"add": (d + 1.0, x + 1), "exp": (jnp.exp(d), np.exp(x)), "sum": (jnp.sum(d, axis=0), x.sum(0)),
               "index": (d[1], x[1]), "matmul": (d @ d.T, x @ x.T), "cmp": (d > 0, x > 0),
               "astype": (d.astype(jnp.int32), x.astype(np.int32))}
    for name, (got, want) in results.items():
        assert isinstance(got, DeviceArray), name
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-6, atol=1e-6, err_msg=name)
    n = len(residency._EAGER)
    before = _transfers()
    e = jnp.exp(d)
    assert len(residency._EAGER) == n and _transfers() == before  # the cached executable, no copies
    np.testing.assert_allclose(np.asarray(e), np.exp(x), rtol=2e-6)
    assert float(jnp.max(d)) == pytest.approx(float(x.max()))


def test_grad_of_device_arrays_runs_on_the_device() -> None:
    w, x = _rng_f32(3, 2), _rng_f32(5, 3, seed=3)

    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    want = ember.jit(ember.grad(loss), backend="native")(w, x)
    got = ember.jit(ember.grad(loss))(*ember.device_put((w, x), "webgpu:0"))
    assert isinstance(got, DeviceArray)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


def test_default_device_places_constructors_and_runs_jit_there() -> None:
    f = ember.jit(lambda a: a * 2.0 + 1.0)
    x = np.arange(3, dtype=np.float32)
    for _ in range(4):  # warm: the call may be served by the C dispatcher on the CPU
        assert type(f(x)) is ember.Array
    with ember.default_device("webgpu:0") as dev:
        assert dev == WEBGPU
        made = {"zeros": (jnp.zeros(3), np.zeros(3)), "arange": (jnp.arange(4), np.arange(4)),
                "asarray": (jnp.asarray([1.0, 2.0]), [1.0, 2.0]), "eye": (jnp.eye(2), np.eye(2)),
                "full_like": (jnp.full_like(x, 7), np.full(3, 7)), "linspace": (jnp.linspace(0, 1, 5),
                                                                              np.linspace(0, 1, 5))}
        for name, (got, want) in made.items():
            assert isinstance(got, DeviceArray) and got.device == WEBGPU, name
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, err_msg=name)
        y = f(x)
        assert isinstance(y, DeviceArray)
        np.testing.assert_allclose(np.asarray(y), x * 2 + 1)
        with ember.default_device("cpu"):
            assert type(jnp.zeros(2)) is ember.Array and type(f(x)) is ember.Array
    assert type(f(x)) is ember.Array and type(jnp.ones(2)) is ember.Array
    assert isinstance(jnp.ones(2, device="webgpu:0"), DeviceArray)


def test_the_default_device_from_the_environment() -> None:
    code = ("import numpy as np, ember, ember.numpy as jnp\n"
            "a = jnp.ones(3)\n"
            "y = ember.jit(lambda v: v + 1)(np.ones(2, np.float32))\n"
            "print(type(a).__name__, a.device, type(y).__name__, np.asarray(y).tolist())\n")
    env = {**os.environ, "EMBER_DEFAULT_DEVICE": "webgpu:0", "XDG_RUNTIME_DIR": os.environ.get(
        "XDG_RUNTIME_DIR", "/tmp")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["DeviceArray", "webgpu:0", "DeviceArray", "[2.0,", "2.0]"]


def test_the_pool_reuses_freed_buffers() -> None:
    pool = webgpu.pool()
    x = _rng_f32(3000)  # 12000 bytes: the 16 KiB class
    first = ember.device_put(x, "webgpu:0")
    s1 = ember.memory_stats("webgpu:0")
    del first  # the array's finalizer gives the buffer back
    s2 = ember.memory_stats("webgpu:0")
    assert s2["bytes_in_use"] == s1["bytes_in_use"] - 16384
    assert s2["pool_bytes"] == s1["pool_bytes"] + 16384
    again = ember.device_put(x * 2, WEBGPU)
    s3 = WEBGPU.memory_stats()
    assert s3["num_allocs"] == s2["num_allocs"] and s3["reused"] == s2["reused"] + 1
    assert s3["bytes_in_use"] == s1["bytes_in_use"] and s3["peak_bytes_in_use"] >= s3["bytes_in_use"]
    np.testing.assert_array_equal(np.asarray(again), x * 2)
    st = pool.stats()
    assert st["bytes_reserved"] == st["bytes_in_use"] + st["pool_bytes"]
    again.delete()
    with pytest.raises(DeletedArrayError):
        np.asarray(again)


def test_out_of_memory_is_a_clear_error_after_emptying_the_pool() -> None:
    pool = webgpu.pool()
    keep = ember.device_put(_rng_f32(64), "webgpu:0")
    tmp = ember.device_put(_rng_f32(4096), "webgpu:0")
    del tmp  # now pooled
    assert ember.memory_stats("webgpu:0")["pool_bytes"] > 0
    old = pool.limit
    pool.set_limit(ember.memory_stats("webgpu:0")["bytes_in_use"] + 65536)
    try:
        assert ember.memory_stats("webgpu:0")["bytes_limit"] == pool.limit
        with pytest.raises(DeviceOutOfMemory, match=r"webgpu:0: out of memory allocating 1048576 bytes"):
            ember.device_put(np.zeros(1 << 18, np.float32), "webgpu:0")
        assert ember.memory_stats("webgpu:0")["pool_bytes"] == 0  # emptied before giving up
        ok = ember.device_put(np.ones(1024, np.float32), "webgpu:0")  # fits under the limit
        np.testing.assert_array_equal(np.asarray(ok), np.ones(1024))
    finally:
        pool.set_limit(old)
    np.testing.assert_array_equal(np.asarray(keep).shape, (64,))


def test_unsupported_dtypes_and_devices_are_clear_errors() -> None:
    with pytest.raises(TypeError, match="dtype float64.*x32"):
        ember.device_put(np.ones(2, np.float64), "webgpu:0")
    with pytest.raises(ValueError, match="unknown device 'tpu:0'"):
        ember.device_put(np.ones(2, np.float32), "tpu:0")
    with pytest.raises(ValueError, match="zeros: unknown device"):
        jnp.zeros(2, device="metal")


def test_host_fallback_programs_take_and_return_device_arrays() -> None:
    """A host segment (sort) between device segments: device values cross to the host only there."""
    def f(x):
        return jnp.exp(jnp.sort(x * 2.0)) + 1.0
    x = _rng_f32(9)
    jf = ember.jit(f, backend="webgpu", host_fallback=True)
    out = jf(ember.device_put(x, "webgpu:0"))
    assert isinstance(out, DeviceArray)
    np.testing.assert_allclose(np.asarray(out), np.exp(np.sort(x * 2)) + 1, rtol=1e-5)


def test_asarray_of_a_device_array_stays_there_and_leaks_are_reported() -> None:
    x = _rng_f32(4)
    d = ember.device_put(x, "webgpu:0")
    for got in (jnp.asarray(d, jnp.int32), jnp.array(d, dtype=jnp.int32), jnp.asarray(d)):
        assert isinstance(got, DeviceArray) and got.device == WEBGPU
    np.testing.assert_array_equal(np.asarray(jnp.asarray(d, jnp.int32)), x.astype(np.int32))
    assert type(jnp.asarray(d, device="cpu")) is ember.Array
    with ember.check_leaks() as leaks:
        kept = d * 2.0
    assert [(shape, str(dtype)) for shape, dtype, _ in leaks] == [((4,), "float32")]
    del kept
