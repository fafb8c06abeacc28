"""Models built on ``nn.MultiheadAttention`` imported with ember.torch, against torch: an encoder
stack (post-norm ReLU), a small ViT (pre-norm GELU), ``nn.MultiheadAttention`` itself, with dynamic
batch and sequence axes and one compile; and what the native passes make of the export (the
attention one ``attention`` step, the fused in-projection one unbatched GEMM)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")

import ember.torch as et  # noqa: E402
from ember._src.native.rewrite import passes  # noqa: E402

TOL = 1e-4


def _program(m, *examples):
    """The imported function's program after the native passes."""
    return passes.run_passes(m.jit(backend="native").lower(*examples).program)


def _check_program(prog, layers: int) -> None:
    """One attention step per layer and every product a plain 2-D GEMM (no batch of per-position
    products of a broadcast weight)."""
    names = [e.prim.name for e in prog.eqns]
    assert names.count("attention") == layers, names
    assert "dot_general" not in names
    gemms = [e for e in prog.eqns if e.prim.name == "native_gemm"]
    assert len(gemms) >= 4 * layers
    assert all(len(e.inputs[0].aval.shape) == 2 for e in gemms), [e.inputs[0].aval for e in gemms]


def _run(m, x: np.ndarray) -> np.ndarray:
    return np.asarray(m(x))


def _torch(model, x: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return model(torch.from_numpy(x)).numpy()


def test_encoder_stack_dynamic_batch_and_sequence():
    """Post-norm ReLU layers (the ViT test below has pre-norm GELU ones)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()
    rng = np.random.default_rng(1)
    example = rng.standard_normal((2, 10, 32)).astype(np.float32)
    m = et.import_module(model, (torch.from_numpy(example),), dynamic_axes={"src": ("batch", "seq", None)})
    _check_program(_program(m, example), 1)
    # the head splits index the projection linearly (refine_transposes): no remainder by the batch
    src = m.jit(backend="native").lower(example).compile(batch=2, seq=10).as_text()
    assert "% em_d_batch" not in src
    for b, n in ((2, 10), (1, 7), (3, 19)):
        x = rng.standard_normal((b, n, 32)).astype(np.float32)
        np.testing.assert_allclose(_run(m, x), _torch(model, x), rtol=TOL, atol=TOL)
    assert m._jitted.cache_info()["compiles"] == 1


def _vit():
    """A small ViT from the benchmark's builder (``benchmarks/bench_encoders.py``)."""
    import importlib.util
    import pathlib
    import sys

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "bench_encoders.py"
    spec = importlib.util.spec_from_file_location("bench_encoders_for_test", path)
    be = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(be)
    finally:
        sys.path.remove(str(path.parent))
    return be.vit(image=32, patch=8, d=32, layers=1, heads=4, mlp=64, classes=5, seed=2)


def test_vit_dynamic_batch():
    model = _vit()
    rng = np.random.default_rng(3)
    example = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    m = et.import_module(model, (torch.from_numpy(example),), dynamic_axes={"x": ("batch", None, None, None)})
    _check_program(_program(m, example), 1)
    for b in (2, 1, 3):
        x = rng.standard_normal((b, 3, 32, 32)).astype(np.float32)
        np.testing.assert_allclose(_run(m, x), _torch(model, x), rtol=TOL, atol=TOL)
    assert m._jitted.cache_info()["compiles"] == 1


class _SelfAttention(torch.nn.Module):
    def __init__(self, batch_first: bool, need_weights: bool):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(32, 4, batch_first=batch_first)
        self.need_weights = need_weights

    def forward(self, x):
        out, w = self.mha(x, x, x, need_weights=self.need_weights)
        return (out, w) if self.need_weights else out


def test_multihead_attention_module_sequence_first():
    """``batch_first=False`` (the encoder tests cover ``True``)."""
    torch.manual_seed(4)
    model = _SelfAttention(False, need_weights=False).eval()
    rng = np.random.default_rng(5)
    axes = ("seq", "batch", None)
    example = rng.standard_normal((3, 9, 32)).astype(np.float32)
    m = et.import_module(model, (torch.from_numpy(example),), dynamic_axes={"x": axes})
    names = [e.prim.name for e in _program(m, example).eqns]
    assert names.count("attention") == 1 and "dot_general" not in names
    for shape in ((3, 9, 32), (1, 5, 32), (4, 2, 32)):
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(_run(m, x), _torch(model, x), rtol=TOL, atol=TOL)


def test_multihead_attention_with_weights():
    """``need_weights=True``: torch writes the attention out (the weights are an output too)."""
    torch.manual_seed(6)
    model = _SelfAttention(True, need_weights=True).eval()
    x = np.random.default_rng(7).standard_normal((2, 6, 32)).astype(np.float32)
    m = et.import_module(model, (torch.from_numpy(x),))
    got = m(x)
    with torch.inference_mode():
        want = model(torch.from_numpy(x))
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=TOL, atol=TOL)
