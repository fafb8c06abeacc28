"""``InferenceSession(imported, device=...)``: imported PyTorch models run on WebGPU (executed on
Mesa's software Vulkan driver where there is no GPU), values compared with torch."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember._src import flags
from ember._src.devices import Device
from ember._src.gpu import cuda_runtime, symbolic, webgpu

torch = pytest.importorskip("torch")
import ember.torch  # noqa: E402

_WHY = webgpu.unavailable_reason()
needs_webgpu = pytest.mark.skipif(_WHY is not None, reason=f"no WebGPU adapter: {_WHY}")


@pytest.fixture(autouse=True)
def _x32():
    """Device programs are 32-bit (WebGPU has no int64/float64): the x32 default, as users run."""
    with flags.override("jax_enable_x64", False):
        yield


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()


@needs_webgpu
def test_mlp_session_on_webgpu_matches_torch(tmp_path):
    m = _mlp()
    x = torch.randn(5, 16)
    imported = ember.torch.import_module(m, args=(x,), dynamic_axes={"input": ("batch", None)})
    s = ember.InferenceSession(imported, device="webgpu")
    assert s.device == Device(0, "webgpu", "webgpu") == ember.devices("webgpu")[0]
    before = dict(webgpu.TRANSFERS)
    for n in (5, 9):
        x = torch.randn(n, 16)
        out = next(iter(s.run({"input": x.numpy()}).values()))
        assert isinstance(out, np.ndarray) and out.shape == (n, 4)
        with torch.no_grad():
            np.testing.assert_allclose(out, m(x).numpy(), rtol=1e-5, atol=1e-5)
    assert webgpu.TRANSFERS["device_to_host"] > before["device_to_host"]  # it ran on the device
    assert s.cache_info()["traces"] == 1
    # saved, loaded onto the device again (no torch needed to load)
    s.save(str(tmp_path / "s"))
    again = ember.InferenceSession.load(str(tmp_path / "s"), device="webgpu:0")
    assert again.device == s.device
    x = torch.randn(3, 16)
    with torch.no_grad():
        np.testing.assert_allclose(next(iter(again.run({"input": x.numpy()}).values())), m(x).numpy(),
                                   rtol=1e-5, atol=1e-5)


@needs_webgpu
def test_gpt2_session_on_webgpu_two_lengths_one_trace():
    """A small GPT-2 with a dynamic sequence: the importer's index checks run on the host, the rest
    on the device; logits within float32 of torch's at three lengths, compiled once."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=50, n_positions=32)
    model = transformers.GPT2LMHeadModel(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    w = Logits().eval()
    ids = torch.randint(0, 50, (1, 6))
    imported = ember.torch.import_module(w, kwargs={"input_ids": ids},
                                         dynamic_axes={"input_ids": (None, "seq")})
    s = ember.InferenceSession(imported, device="webgpu")
    before = dict(symbolic.STATS)
    for n in (6, 11, 1):
        ids = torch.randint(0, 50, (1, n))
        got = next(iter(s.run({"input_ids": ids.numpy()}).values()))
        with torch.no_grad():
            np.testing.assert_allclose(got, w(ids).numpy(), rtol=1e-4, atol=1e-5)
        if n == 6:
            compiled = len(webgpu._STATE["pipelines"])
    assert s.cache_info()["traces"] == 1
    # one compile for every length: the device segments' kernels take the length at run time
    assert symbolic.STATS["symbolic"] == before["symbolic"] + 1
    assert symbolic.STATS["per_binding"] == before["per_binding"]
    assert len(webgpu._STATE["pipelines"]) == compiled
    # a bad index still raises (on the host), naming the input's position
    with pytest.raises(IndexError, match="out of range"):
        s.run({"input_ids": np.array([[1, 2, 99]], np.int32)})


def test_bad_device_is_a_clear_error():
    m = _mlp()
    imported = ember.torch.import_module(m, args=(torch.randn(2, 16),))
    with pytest.raises(ValueError, match="InferenceSession: device: unknown device 'tpu:0'"):
        ember.InferenceSession(imported, device="tpu:0")
    if _WHY is None:
        with pytest.raises(ValueError, match="weights='bfloat16' runs on the CPU only"):
            ember.InferenceSession(imported, weights="bfloat16", device="webgpu")
    assert ember.InferenceSession(imported, device="cpu").device == Device()
    assert ember.InferenceSession(imported).device == Device()
    if cuda_runtime.unavailable_reason() is not None:  # no CUDA device here: say why, at once
        with pytest.raises(RuntimeError, match="cuda:0 is unavailable"):
            ember.InferenceSession(imported, device="cuda")
