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


def _xlnet():  # arange(seq, -seq, -1.0) of its relative positions, -size, x[-512:] of its memory
    return T.XLNetModel(T.XLNetConfig(d_model=32, n_layer=2, n_head=4, d_inner=64, vocab_size=100))


def _fnet():  # torch.fft.fftn(...).real of its token mixing (_fft_c2c, view_as_real)
    return T.FNetModel(T.FNetConfig(**SMALL, use_tpu_fourier_optimizations=False))


ARCHS = {"qwen2_moe": _qwen2_moe, "roberta": _roberta, "bloom": _bloom, "mpt": _mpt, "xlnet": _xlnet,
         "fnet": _fnet}


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
    with pytest.raises(ShapeError, match="seq: 17.*a condition torch's export assumed"):
        m(np.ones((1, 17), np.int64))  # torch's guard
    with pytest.raises(ShapeError, match="seq: 17"):
        m.jit()(np.ones((1, 17), np.int64))  # the program's own shape constraint


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
    for call in (m, m.jit()):  # torch's guard, a constraint of the program
        with pytest.raises(ShapeError, match="seq: 9.*torch's export assumed"):
            call(np.ones((1, 9), np.float32))


def _efficientnet():
    """EfficientNet-B0's structure at 64 px with its batch norms' statistics drawn at random (at
    their initial values every output is 0)."""
    cfg = T.EfficientNetConfig(image_size=64, width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280)
    model = T.EfficientNetModel(cfg)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
                mod.weight.copy_(torch.rand(mod.weight.shape, generator=g) + 0.5)
                mod.bias.copy_(torch.randn(mod.bias.shape, generator=g) * 0.1)
    return model.eval()


def test_efficientnet_dynamic_batch():
    """EfficientNet failed three ways before: its depthwise convolutions export padding=[0] (one
    entry for two dims), its pooler is AvgPool2d(1280, ceil_mode=True) over a 2 x 2 image, and a
    fused elementwise chain was deep enough to exhaust the kernel builder's recursion. Both outputs
    against PyTorch at three batch sizes, one compile."""
    model = _efficientnet()
    axes = {"pixel_values": ("batch", None, None, None)}
    m = et.import_module(model, (torch.randn(2, 3, 64, 64),), dynamic_axes=axes)
    g = torch.Generator().manual_seed(6)
    for b in (2, 1, 3):
        x = torch.randn(b, 3, 64, 64, generator=g)
        with torch.inference_mode():
            out = model(x)
        for got, want in zip(m(x.numpy()), (out.last_hidden_state, out.pooler_output)):
            want = want.numpy()
            assert np.abs(want).max() > 0.1
            np.testing.assert_allclose(np.asarray(got), want, atol=2e-5 * np.abs(want).max(), rtol=0)
    assert m._jitted.cache_info()["compiles"] == 1


def test_convnext_dynamic_image_size():
    """ConvNeXt with a dynamic batch, height and width: its stem (4 x 4, stride 4) gives
    ``1 + (h - 4) // 4`` rows, which a later reshape calls ``h // 4``; the two now compare equal.
    Four sizes against PyTorch, one compile."""
    model = T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1])).eval()
    x0 = torch.randn(2, 3, 64, 64)
    m = et.import_module(model, (x0,), dynamic_axes={"pixel_values": ("batch", None, "h", "w")})
    g = torch.Generator().manual_seed(7)
    for b, h, w in ((2, 64, 64), (1, 96, 80), (3, 48, 64), (1, 77, 53)):
        x = torch.randn(b, 3, h, w, generator=g)
        with torch.inference_mode():
            want = model(x).last_hidden_state.numpy()
        got = np.asarray(m(x.numpy())[0])
        np.testing.assert_allclose(got, want, atol=2e-5 * np.abs(want).max(), rtol=0)
    assert m._jitted.cache_info()["compiles"] == 1


def _dynamic_image_check(model, out, sizes, seed, example=(64, 64)):
    """``model`` imported with a dynamic batch, height and width (from an example of 2 images of
    ``example`` size), against PyTorch at ``sizes`` (``out`` picks the compared outputs), one
    compile."""
    x0 = torch.randn(2, 3, *example)
    m = et.import_module(model, (x0,), dynamic_axes={"pixel_values": ("batch", None, "h", "w")})
    g = torch.Generator().manual_seed(seed)
    for b, h, w in sizes:
        x = torch.randn(b, 3, h, w, generator=g)
        with torch.inference_mode():
            wants = out(model(x))
        gots = m(x.numpy())
        gots = gots if isinstance(gots, (tuple, list)) else [gots]
        for got, want in zip(gots, wants):
            want = want.numpy()
            assert np.abs(want).max() > 1e-3 and np.asarray(got).shape == want.shape
            np.testing.assert_allclose(np.asarray(got), want, atol=2e-5 * np.abs(want).max(), rtol=0)
    assert m._jitted.cache_info()["compiles"] == 1
    return m


def test_efficientnet_dynamic_image_size():
    """EfficientNet's pooler, AvgPool2d(1280, ceil_mode=True), over a feature map of symbolic size
    raised NotImplementedError; it is now one window over the map (a map past 1280 raises) and the
    flatten after it restates the pooled size as 1. Both outputs at four sizes."""
    _dynamic_image_check(_efficientnet(), lambda o: (o.last_hidden_state, o.pooler_output),
                         ((2, 64, 64), (1, 96, 80), (3, 48, 64), (1, 77, 53)), 8)


def test_upernet_dynamic_image_size():
    """UperNet (ConvNeXt backbone) at dynamic image sizes: its pyramid pooling module pools a map of
    symbolic size adaptively to 1, 2, 3 and 6 bins (slices at symbolic bounds: it raised) and
    upsamples bilinearly to another map's symbolic size (NotImplementedError before). Logits at four
    sizes."""
    bb = T.ConvNextConfig(hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                          out_features=["stage1", "stage2", "stage3", "stage4"])
    model = T.UperNetForSemanticSegmentation(T.UperNetConfig(backbone_config=bb, hidden_size=16,
                                                             auxiliary_in_channels=32)).eval()
    sizes = ((2, 64, 64), (1, 96, 80), (1, 77, 53), (2, 130, 64))
    _dynamic_image_check(model, lambda o: (o.logits,), sizes, 9)


def test_swin_dynamic_image_size():
    """Swin at dynamic image sizes: its window partition pads a map of ``X = h // 4`` rows to a
    multiple of the window (``X + (4 - X % 4) % 4``) and views it as ``X_pad // 4`` windows of 4,
    which needs ``X_pad // (X_pad // 4) == 4`` (the size algebra now writes the padded size as
    ``4 ((h + 12) // 16)``); its patch merge reads ``x[:, 0::2]`` and ``x[:, 1::2]`` of a symbolic
    axis (step slices raised) and concatenates them (torch's export vouches they are equal). The
    export at 64 x 64 takes the no-padding branch at both stages, so it holds at multiples of 32;
    another size fails a guard torch recorded, as torch's own exported module would."""
    model = T.SwinModel(T.SwinConfig(image_size=64, embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                                     window_size=4)).eval()
    m = _dynamic_image_check(model, lambda o: (o.last_hidden_state, o.pooler_output),
                             ((2, 64, 64), (1, 96, 128), (3, 32, 64), (1, 160, 32)), 10)
    with pytest.raises(ShapeError, match="h: 96, w: 80.*a condition torch's export assumed"):
        m(np.zeros((1, 3, 96, 80), np.float32))


def test_dinov2_dynamic_image_size():
    """DINOv2 resizes its 8 x 8 grid of position embeddings to the patch grid by bicubic
    upsampling (an op without a handler before), to ``(h // 8) x (w // 8)``, and its token count is
    ``1 + (h // 8) (w // 8)`` (a size power in torch's export). Exported at a size other than its
    configured 64 x 64, it runs at every size; exported at 64 x 64, torch skips the resize and
    assumes that size (guards), so other sizes raise naming the guard."""
    model = T.Dinov2Model(T.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=64, image_size=64, patch_size=8)).eval()
    out = lambda o: (o.last_hidden_state, o.pooler_output)  # noqa: E731
    _dynamic_image_check(model, out, ((2, 64, 64), (1, 96, 80), (3, 48, 64), (1, 77, 53)), 11,
                         example=(72, 56))
    m = _dynamic_image_check(model, out, ((1, 64, 64), (3, 64, 64)), 12)
    with pytest.raises(ShapeError, match=r"h: 80.*torch's export assumed: "
                                          r"\(\(h // 8\) \* \(h // 8\)\) == 64\): axis 1 is 100, not 64"):
        m(np.zeros((1, 3, 80, 80), np.float32))
