"""More transformers architectures (tiny configs, random weights) imported with a dynamic batch and
sequence, against PyTorch eager at three sizes with one compile: each failed to import before its
fix (named per case), or was claimed by the docs without a test (Qwen2-MoE)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")
T = pytest.importorskip("transformers", reason="the architecture tests need transformers")

import ember.torch as et  # noqa: E402
from ember.errors import ShapeError  # noqa: E402

SMALL = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64, vocab_size=100)


def _qwen2_moe():  # mixture of experts with a shared expert (transformers' grouped product)
    return T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(**SMALL, num_key_value_heads=2, moe_intermediate_size=32,
                                                  shared_expert_intermediate_size=32, num_experts=4,
                                                  num_experts_per_tok=2))


def _roberta():  # its token-type buffer is gathered with an index cut to the sequence (aten.gather)
    return T.RobertaModel(T.RobertaConfig(**SMALL))


def _bloom():  # its ALiBi bias is tiled over the batch (aten.repeat with a symbolic count)
    return T.BloomForCausalLM(T.BloomConfig(hidden_size=32, n_head=4, n_layer=2, vocab_size=100))


def _mpt(max_seq_len=2048):  # its position bias is cut with max(0, 2048 - seq) (python.sym_max)
    return T.MptForCausalLM(T.MptConfig(d_model=32, n_heads=4, n_layers=2, vocab_size=100,
                                        max_seq_len=max_seq_len))


ARCHS = {"qwen2_moe": _qwen2_moe, "roberta": _roberta, "bloom": _bloom, "mpt": _mpt}


def _out(o):
    o = o.logits if hasattr(o, "logits") else o.last_hidden_state if hasattr(o, "last_hidden_state") else o
    return o[0] if isinstance(o, (tuple, list)) else o


def _import(model):
    torch.manual_seed(0)
    kw = {"input_ids": torch.randint(1, 100, (2, 7))}
    if "CausalLM" in type(model).__name__:
        kw["use_cache"] = False
    return et.import_module(model, (), kw, dynamic_axes={"input_ids": ("batch", "seq")}), kw


@pytest.mark.parametrize("name", list(ARCHS))
def test_dynamic_batch_and_sequence(name):
    torch.manual_seed(1)
    model = ARCHS[name]().eval()
    m, kw = _import(model)
    g = torch.Generator().manual_seed(2)
    for shape in ((2, 7), (1, 3), (3, 12)):
        x = torch.randint(1, 100, shape, generator=g)
        with torch.inference_mode():
            want = _out(model(**{**kw, "input_ids": x})).numpy()
        got = np.asarray(_out(m(x.numpy())))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=2e-5 * np.abs(want).max(), rtol=0)
    assert m._jitted.cache_info()["compiles"] == 1


def test_mpt_past_its_position_bias_raises():
    """MPT's position bias covers max_seq_len positions: a longer sequence is a ShapeError naming the
    binding (torch raises too), and the longest one matches torch."""
    torch.manual_seed(3)
    model = _mpt(max_seq_len=16).eval()
    m, _ = _import(model)
    x = torch.randint(1, 100, (1, 16))
    with torch.inference_mode():
        want = model(input_ids=x).logits.numpy()
    np.testing.assert_allclose(np.asarray(m(x.numpy())), want, atol=2e-5 * np.abs(want).max(), rtol=0)
    with pytest.raises(RuntimeError):
        with torch.inference_mode():
            model(input_ids=torch.randint(1, 100, (1, 17)))
    with pytest.raises(ShapeError, match="seq: 17"):
        m(np.ones((1, 17), np.int64))


class _SizeMinMax(torch.nn.Module):
    """Python max/min of sizes (torch.sym_max / sym_min in the export): a window cut to at most 5
    positions, and a bias that covers 8 positions cut to the sequence's last ones."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.arange(8.0))

    def forward(self, x):
        n = x.shape[1]
        head = x[:, : min(n, 5)].sum(1, keepdim=True)
        return x + head + self.bias[max(0, 8 - n):]


def test_python_max_min_of_sizes():
    """sym_max decided by the axis's range is not recorded by torch here: the bias slice's size
    ``8 - max(0, 8 - seq)`` is cut to ``seq`` at the add (identity for seq <= 8); the window
    ``min(seq, 5)`` stays symbolic. Three lengths on both sides of 5, one compile; 9 raises."""
    model = _SizeMinMax()
    m = et.import_module(model, (torch.randn(2, 6),), dynamic_axes={"x": ("batch", "seq")})
    for shape in ((2, 6), (1, 3), (3, 8), (1, 1)):
        x = torch.randn(*shape)
        np.testing.assert_allclose(np.asarray(m(x.numpy())), model(x).numpy(), rtol=1e-6, atol=1e-6)
    assert m._jitted.cache_info()["compiles"] == 1
    with pytest.raises(ShapeError, match="seq: 9"):
        m(np.ones((1, 9), np.float32))
