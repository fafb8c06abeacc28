"""InferenceSession(weights="bfloat16"): logits against the float32 session, the PARAMS bytes
counted by hand, save/load (safetensors BF16) in a process without torch, bad arguments."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the session tests import a model with torch")
pytest.importorskip("transformers", reason="the session tests use a transformers model")

import ember  # noqa: E402
import ember.torch as et  # noqa: E402
from ember._src.torch_import.bf16 import product_weights  # noqa: E402
from tests.torch import models  # noqa: E402

_PRODUCTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight",
             "lm_head.weight")


@pytest.fixture(scope="module")
def sessions():
    m = models.imported_gpt2()
    return m, ember.InferenceSession(m), ember.InferenceSession(m, weights="bfloat16")


def test_gpt2_logits_within_2e_2_of_float32(sessions):
    _, s32, s16 = sessions
    assert (s32.weights, s16.weights) == ("float32", "bfloat16")
    for shape in ((2, 11), (1, 40)):  # one compile serves both
        ids = np.random.default_rng(shape[1]).integers(0, 100, shape)
        a, b = s32.run({"input_ids": ids})["logits"], s16.run({"input_ids": ids})["logits"]
        err = np.abs(a - b).max()
        assert 0 < err < 2e-2, err  # bfloat16 weights change the values, a little
    assert s16.cache_info()["compiles"] == 1


def test_gpt2_params_arena_by_hand(sessions):
    m, s32, s16 = sessions
    chosen = product_weights(m.graph)
    assert chosen == {k for k in m.params if k.endswith(_PRODUCTS)}  # linear layers and the tied head
    sizes = {k: int(np.prod(np.shape(v))) for k, v in m.params.items()}
    f32 = 4 * sum(sizes.values())
    tied = "transformer.wte.weight"  # the input embedding: the head's values, its bits shared
    assert tied in m.params and tied not in chosen
    bf16 = sum(2 * n if k in chosen else 0 if k == tied else 4 * n for k, n in sizes.items())
    assert s32.memory(batch=1, seq=16)["PARAMS"] == f32
    assert s16.memory(batch=1, seq=16)["PARAMS"] == bf16
    weights = sum(sizes[k] for k in chosen) + sizes[tied]
    assert f32 - bf16 == 2 * weights + 2 * sizes[tied]  # half of each weight's bytes, the tied table's all


def test_mlp_session():
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.ReLU(), torch.nn.Linear(96, 10)).eval()
    x = torch.randn(5, 48)
    m = et.import_module(net, (x,), dynamic_axes={"input": ("batch", None)})
    assert product_weights(m.graph) == {"0.weight", "2.weight"}  # not the biases
    s32, s16 = ember.InferenceSession(m), ember.InferenceSession(m, weights="bfloat16")
    xs = np.random.default_rng(0).standard_normal((33, 48)).astype(np.float32)
    a, b = s32.run({"input": xs})[s32.output_names[0]], s16.run({"input": xs})[s16.output_names[0]]
    assert 0 < np.abs(a - b).max() < 2e-2
    with torch.inference_mode():
        np.testing.assert_allclose(a, net(torch.from_numpy(xs)).numpy(), atol=1e-5)
    assert s32.memory(batch=1)["PARAMS"] - s16.memory(batch=1)["PARAMS"] == 2 * (48 * 96 + 96 * 10)


def test_bad_weights_argument():
    m = models.imported_gpt2()
    with pytest.raises(ValueError, match="weights must be one of"):
        ember.InferenceSession(m, weights="float16")
    with pytest.raises(ValueError, match="weights"):
        ember.InferenceSession(m, weights=None)


_LOAD = """
import sys
sys.modules["torch"] = None  # `import torch` raises ImportError
sys.modules["transformers"] = None
import numpy as np, ember
s = ember.InferenceSession.load(sys.argv[1])
assert s.weights == "bfloat16", s.weights
np.save(sys.argv[3], s.run({"input_ids": np.load(sys.argv[2])})["logits"])
"""


def _dtypes(path: str) -> dict:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}


def test_save_load_without_torch(sessions, tmp_path):
    m, _, s16 = sessions
    d = tmp_path / "gpt2-bf16"
    s16.save(str(d))
    kinds = _dtypes(str(d / "weights.safetensors"))
    bf16 = {k for k, v in kinds.items() if v == "BF16"}
    assert bf16 == product_weights(m.graph) | {"transformer.wte.weight"}
    assert kinds["transformer.wpe.weight"] == "F32"
    ids = np.random.default_rng(5).integers(0, 100, (1, 9))
    np.save(tmp_path / "ids.npy", ids)
    src = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    (tmp_path / "load.py").write_text(_LOAD)
    cmd = [sys.executable, str(tmp_path / "load.py"), str(d), str(tmp_path / "ids.npy"),
           str(tmp_path / "out.npy")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), s16.run({"input_ids": ids})["logits"],
                               rtol=1e-6, atol=1e-6)
