"""The devices API with the GPU backends: listing, device_put, and the messages where a backend
cannot run."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember._src.jit import BACKENDS


def test_default_devices_stay_the_cpu() -> None:
    """JAX's rule: ``devices()`` is the default backend's (the CPU); ``"all"`` adds the GPUs present."""
    assert [str(d) for d in ember.devices()] == ["cpu"]
    names = [str(d) for d in ember.devices("all")]
    assert names[0] == "cpu"
    for p, n in (("webgpu", "webgpu:0"), ("cuda", "cuda:0")):
        assert (n in names) == (BACKENDS[p].unavailable_reason() is None)


def test_an_unavailable_backend_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    why = "webgpu: no WebGPU adapter found (no adapter); install the 'wgpu' Python package"
    monkeypatch.setattr(BACKENDS["webgpu"], "unavailable_reason", lambda: why)
    with pytest.raises(RuntimeError, match="install the 'wgpu'"):
        ember.devices("webgpu")
    assert [str(d) for d in ember.devices("all")] == ["cpu"] or "cuda:0" in str(ember.devices("all"))
    # jit without a backend keeps running on the CPU
    np.testing.assert_array_equal(np.asarray(ember.jit(lambda x: x * 2)(np.arange(3.0))), [0.0, 2.0, 4.0])


def test_device_put_onto_an_unavailable_gpu_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    why = "cuda: no CUDA device found (no CUDA device); running CUDA kernels needs an NVIDIA GPU"
    monkeypatch.setattr(BACKENDS["cuda"], "unavailable_reason", lambda: why)
    from ember._src.gpu import cuda_runtime
    monkeypatch.setattr(cuda_runtime, "unavailable_reason", lambda: why)
    with pytest.raises(RuntimeError, match="cuda:0 is unavailable: cuda: no CUDA device found"):
        ember.device_put(np.ones(2, np.float32), "cuda:0")
    with pytest.raises(RuntimeError, match="no CUDA device found"):
        with ember.default_device("cuda:0"):
            pass
    np.testing.assert_array_equal(np.asarray(ember.device_put(np.ones(2), ember.devices()[0])), [1.0, 1.0])
    assert type(ember.device_put(np.ones(2), "cpu")) is ember.Array


def test_a_default_device_variable_naming_no_device_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    from ember._src import devices

    monkeypatch.setenv("EMBER_DEFAULT_DEVICE", "tpu:3")
    with pytest.warns(RuntimeWarning, match=r"EMBER_DEFAULT_DEVICE: unknown device 'tpu:3'.*using the host"):
        assert devices.env_names_gpu() is False
    monkeypatch.setenv("EMBER_DEFAULT_DEVICE", "cpu")
    assert devices.env_names_gpu() is False and devices.default_device_now() is None
    monkeypatch.delenv("EMBER_DEFAULT_DEVICE")
    assert devices.default_device_now() is None
    assert devices.parse_device("webgpu") == devices.Device(0, "webgpu", "webgpu")
    assert str(devices.parse_device(ember.devices()[0])) == "cpu"
