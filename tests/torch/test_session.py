"""InferenceSession: run, validation, memory, save/load without torch, thread safety."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the session tests import a model with torch")
pytest.importorskip("transformers", reason="the session tests use a transformers model")

import ember  # noqa: E402
import ember.torch as et  # noqa: E402
from ember._src.session import SessionError  # noqa: E402
from ember.errors import DTypeError, ShapeError  # noqa: E402
from tests.helpers import run_in_threads  # noqa: E402
from tests.torch import models  # noqa: E402


@pytest.fixture(scope="module")
def gpt2_session():
    return models.gpt2(), ember.InferenceSession(models.imported_gpt2())


def _ref(model, ids):
    with torch.inference_mode():
        return model(input_ids=torch.from_numpy(ids), use_cache=False).logits.numpy()


def test_run_numpy_in_out(gpt2_session):
    model, s = gpt2_session
    ids = np.random.default_rng(0).integers(0, 100, (2, 11))
    out = s.run({"input_ids": ids})
    assert list(out) == ["logits"] and isinstance(out["logits"], np.ndarray)
    np.testing.assert_allclose(out["logits"], _ref(model, ids), atol=1e-4)
    # int32 ids are accepted (cast to the exported int64)
    np.testing.assert_allclose(s.run({"input_ids": ids.astype(np.int32)})["logits"], out["logits"])


def test_bad_inputs(gpt2_session):
    _, s = gpt2_session
    ids = np.zeros((1, 5), np.int64)
    with pytest.raises(SessionError, match=r"missing inputs \['input_ids'\]"):
        s.run({})
    with pytest.raises(SessionError, match=r"unknown inputs \['mask'\]"):
        s.run({"input_ids": ids, "mask": ids})
    with pytest.raises(DTypeError, match="input 'input_ids' must be int64, got float32"):
        s.run({"input_ids": ids.astype(np.float32)})
    with pytest.raises(ShapeError, match="must have 2 dims"):
        s.run({"input_ids": ids[0]})
    with pytest.raises(ShapeError, match="axis 'seq' = 0 is outside"):
        s.run({"input_ids": np.zeros((1, 0), np.int64)})


def test_exported_range_is_enforced():
    class M(torch.nn.Module):
        def forward(self, x):
            return x[:, :4] * 2

    seq = torch.export.Dim("seq", min=5, max=16)
    ep = torch.export.export(M(), (torch.randn(2, 8),), dynamic_shapes={"x": {1: seq}}, strict=False)
    s = ember.InferenceSession(et.import_module(ep))
    np.testing.assert_allclose(s.run({"x": np.ones((2, 5), np.float32)})["output"], 2 * np.ones((2, 4)))
    with pytest.raises(ShapeError, match=r"axis 'x_dim1' = 17 is outside the exported range \[5, 16\]"):
        s.run({"x": np.ones((2, 17), np.float32)})


def test_threads(gpt2_session):
    model, s = gpt2_session
    rng = np.random.default_rng(1)
    feeds = [rng.integers(0, 100, (1, n)) for n in (3, 9, 17, 5)]
    refs = [_ref(model, f) for f in feeds]
    errors = []

    def work(i):
        try:
            for _ in range(3):
                np.testing.assert_allclose(s.run({"input_ids": feeds[i]})["logits"], refs[i], atol=1e-4)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    run_in_threads(work, range(4))
    assert not errors


def test_memory(gpt2_session):
    model, s = gpt2_session
    m = s.memory(batch=1, seq=64)
    n_params = sum(p.numel() * 4 for p in model.state_dict().values() if p.dtype == torch.float32)
    assert m["PARAMS"] >= 0.9 * n_params  # the tied lm_head may be stored once
    assert m["INPUTS"] == 64 * 8 and m["OUTPUTS"] == 64 * 100 * 4
    m2 = s.memory(batch=1, seq=128)
    assert m2["ACTIVATIONS"] > m["ACTIVATIONS"] > 0
    with pytest.raises(SessionError, match="give a size for each named axis"):
        s.memory(seq=3)


_LOAD_WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None  # `import torch` raises ImportError
sys.modules["transformers"] = None
import numpy as np, ember
from ember._src.native import prepare
prepare(wait=True)  # the GEMM kernel and dispatcher loaded: the same generated program every time
s = ember.InferenceSession.load(sys.argv[1])
out = s.run({"input_ids": np.load(sys.argv[2])})["logits"]
np.save(sys.argv[3], out)
info = s.cache_info()
print("compiler_runs", info["compiler_runs"], "disk_cache_hits", info["disk_cache_hits"])
assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
"""


def test_save_load_in_a_process_without_torch(gpt2_session, tmp_path):
    model, s = gpt2_session
    s.run({"input_ids": np.zeros((1, 3), np.int64)})  # compiled (or found in the disk cache) here
    d = tmp_path / "gpt2"
    s.save(str(d))
    assert sorted(os.listdir(d)) == ["metadata.json", "program.json", "weights.safetensors"]
    meta = json.loads((d / "metadata.json").read_text())
    assert meta["inputs"] == [{"name": "input_ids", "dtype": "int64", "axes": ["batch", "seq"]}]
    ids = np.random.default_rng(2).integers(0, 100, (1, 13))
    np.save(tmp_path / "ids.npy", ids)
    src = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    script = tmp_path / "load.py"
    script.write_text(_LOAD_WITHOUT_TORCH)
    cmd = [sys.executable, str(script), str(d), str(tmp_path / "ids.npy"), str(tmp_path / "out.npy")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), _ref(model, ids), atol=1e-4)
    # a second process finds the program the first one compiled in the disk cache (the parent may
    # have compiled another variant while the GEMM kernel was still building on a cold cache)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "compiler_runs 0 " in r.stdout, r.stdout
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), _ref(model, ids), atol=1e-4)


def test_load_errors(gpt2_session, tmp_path):
    _, s = gpt2_session
    d = tmp_path / "s"
    s.save(str(d))
    meta = json.loads((d / "metadata.json").read_text())
    with pytest.raises(SessionError, match="not a saved session"):
        ember.InferenceSession.load(str(tmp_path / "nothing"))
    (d / "metadata.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(SessionError, match="version 99"):
        ember.InferenceSession.load(str(d))
    (d / "metadata.json").write_text(json.dumps(meta))
    w = d / "weights.safetensors"
    raw = bytearray(w.read_bytes())
    raw[-5] ^= 0xFF
    w.write_bytes(bytes(raw))
    with pytest.raises(SessionError, match="weights.safetensors is damaged"):
        ember.InferenceSession.load(str(d))
    (d / "metadata.json").write_text("{not json")
    with pytest.raises(SessionError, match="metadata.json is damaged"):
        ember.InferenceSession.load(str(d))


def test_safetensors_roundtrip(tmp_path):
    import ml_dtypes

    from ember._src.torch_import import safetensors as st
    rng = np.random.default_rng(3)
    ts = {"a": rng.standard_normal((3, 4)).astype(np.float32), "b": np.arange(5, dtype=np.int64),
          "c": np.zeros((0, 2), np.float64), "d": np.array([True, False]),
          "e": rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16), "f": np.arange(4, dtype=np.float16),
          "g": np.arange(3, dtype=np.uint8), "h": np.array(-7, np.int32), "i": np.arange(2, dtype=np.int8)}
    st.save(str(tmp_path / "x.safetensors"), ts, {"k": "v"})
    back, meta = st.load(str(tmp_path / "x.safetensors"))
    assert meta == {"k": "v"} and set(back) == set(ts)
    for k in ts:
        assert back[k].dtype == ts[k].dtype and back[k].shape == ts[k].shape
        np.testing.assert_array_equal(back[k].astype(np.float64), ts[k].astype(np.float64))
    raw = (tmp_path / "x.safetensors").read_bytes()
    (tmp_path / "bad.safetensors").write_bytes(raw[:-3])
    with pytest.raises(st.SafetensorsError, match="not fully covered"):
        st.load(str(tmp_path / "bad.safetensors"))


def _write_by_hand(path, tensors):
    """The layout written by ember's own writer before the safetensors package (names sorted, the
    header padded with spaces to 8 bytes), built here with struct and json."""
    import struct
    codes = {"float32": "F32", "int64": "I64", "bool": "BOOL", "float16": "F16", "uint16": "BF16"}
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a, code = tensors[name]
        data = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": code or codes[a.dtype.name], "shape": list(a.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "ember.session"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def test_safetensors_reads_files_written_by_hand(tmp_path):
    """Files in the layout of the earlier hand-written writer load, bfloat16 bits included (checked
    against the bit pattern: bfloat16 is the top half of a float32)."""
    from ember._src.torch_import import safetensors as st
    x = np.array([1.0, -2.5, 3.140625], np.float32)
    bf_bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    ts = {"w": (x, None), "ids": (np.arange(3), None), "m": (np.array([True]), None),
          "bf": (bf_bits, "BF16"), "z": (np.zeros((0, 3), np.float32), None)}
    _write_by_hand(str(tmp_path / "old.safetensors"), ts)
    back, meta = st.load(str(tmp_path / "old.safetensors"))
    assert meta == {"format": "ember.session"}
    np.testing.assert_array_equal(back["w"], x)
    np.testing.assert_array_equal(back["ids"], np.arange(3))
    assert back["m"].dtype == np.bool_ and back["z"].shape == (0, 3)
    assert str(back["bf"].dtype) == "bfloat16"
    np.testing.assert_array_equal(back["bf"].astype(np.float32), x)


def test_mutated_buffers_are_session_state(tmp_path):
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", torch.zeros(3))
            self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

        def forward(self, x):
            self.total.add_(x.sum(0))
            self.calls.add_(1)
            return x * self.total

    m = et.import_module(Counter(), (torch.ones(2, 3),), dynamic_axes={"x": ("batch", None)})
    assert sorted(m.state_names) == ["calls", "total"]
    s = ember.InferenceSession(m)
    ref, rng = Counter(), np.random.default_rng(5)
    for b in (2, 4, 1):
        x = rng.standard_normal((b, 3)).astype(np.float32)
        out = s.run({"x": x})["output"]
        np.testing.assert_allclose(out, ref(torch.from_numpy(x)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(s.state["total"], ref.total.numpy(), rtol=1e-6)
    assert int(s.state["calls"]) == 3
    s.save(str(tmp_path / "c"))
    s.reset_state()
    assert float(np.abs(s.state["total"]).max()) == 0.0
    again = ember.InferenceSession.load(str(tmp_path / "c"))  # a program with state passes the schema
    assert sorted(again.state) == ["calls", "total"] and float(np.abs(again.state["total"]).max()) == 0.0
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(again.run({"x": x})["output"], Counter()(torch.from_numpy(x)).numpy())


def _machine_paths(tmp_path) -> list[str]:
    """Absolute directories of this machine a saved session must not reveal."""
    import site
    dirs = {os.getcwd(), os.path.expanduser("~"), sys.prefix, os.path.dirname(os.path.abspath(__file__)),
            os.path.dirname(torch.__file__), str(tmp_path), *site.getsitepackages()}
    return sorted(d for d in dirs if len(d) > 4)


def test_saved_files_hold_no_absolute_paths(gpt2_session, tmp_path):
    _, s = gpt2_session
    s.save(str(tmp_path / "plain"))
    d = tmp_path / "plain"
    program = json.loads((d / "program.json").read_text())
    sources = [n["source"] for n in program["nodes"] if n["source"]]
    assert len(sources) > 50
    assert any(x.startswith("transformers/models/gpt2/modeling_gpt2.py:") for x in sources), sources[:5]
    raw = (d / "weights.safetensors").read_bytes()
    texts = {n: (d / n).read_text() for n in ("program.json", "metadata.json")}
    texts["weights header"] = raw[8:8 + int.from_bytes(raw[:8], "little")].decode()
    for name, text in texts.items():
        for p in _machine_paths(tmp_path):
            assert p not in text, f"{name} holds {p}"
    assert not any(os.path.isabs(x.split(":")[0]) for x in sources)
    # kept on request (debugging on the machine that saved it)
    s.save(str(tmp_path / "debug"), keep_source_paths=True)
    kept = [n["source"] for n in json.loads((tmp_path / "debug" / "program.json").read_text())["nodes"]]
    assert any(os.path.isabs(x.split(":")[0]) and os.path.exists(x.split(":")[0]) for x in kept)


def test_session_saved_by_the_earlier_writer_loads():
    """tests/torch/data/session_v1_linear was saved by ember before the safetensors package wrote the
    weights (relu(x W^T + b) * 2 + [1, 2, 3], W = arange(12)/10 - 0.5, b = [0.25, -1, 0.5], the 2 a
    float16 buffer): it loads and runs."""
    import pathlib
    d = pathlib.Path(__file__).parent / "data" / "session_v1_linear"
    s = ember.InferenceSession.load(str(d))
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    w = np.arange(12.0).reshape(3, 4) / 10 - 0.5
    want = np.maximum(x @ w.T + [0.25, -1.0, 0.5], 0) * 2 + [1, 2, 3]
    np.testing.assert_allclose(s.run({"x": x})["output"], want, rtol=1e-5, atol=1e-5)
