"""Funnel Transformer with a dynamic sequence length. transformers builds its relative position
embeddings from Python lists of positions, which fixed the length in torch's export; the importer
computes them from arithmetic progressions during the export (``torch_import/funnel_positions.py``).
Its attention also exports an in-place multiply of part of a dynamic axis (``slice_scatter``) and a
size squared (``python.pow``): both have handlers, tested here on small modules too."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")
pytest.importorskip("transformers", reason="needs transformers")

from transformers import FunnelBaseModel, FunnelConfig, FunnelModel  # noqa: E402
from transformers.models.funnel import modeling_funnel  # noqa: E402

import ember.torch as et  # noqa: E402
from ember._src.torch_import import funnel_positions  # noqa: E402
from ember.errors import ShapeError  # noqa: E402


def _config(**kw):
    base = dict(vocab_size=100, block_sizes=[1, 1], d_model=32, n_head=2, d_head=16, d_inner=64,
                num_decoder_layers=1, initializer_range=0.3)
    return FunnelConfig(**{**base, **kw})


@pytest.mark.parametrize("separate_cls", [True, False])
@pytest.mark.parametrize("truncate_seq", [True, False])
@pytest.mark.parametrize("blocks", [1, 2, 3, 4])
def test_positions_equal_the_original_method(separate_cls, truncate_seq, blocks):
    """The replacement's embeddings are the original's, bit for bit, at every length the original
    computes (lengths 1 to 40; block 0 has no pooled table)."""
    structure = modeling_funnel.FunnelAttentionStructure(
        _config(block_sizes=[1] * blocks, separate_cls=separate_cls, truncate_seq=truncate_seq)).eval()
    original = modeling_funnel.FunnelAttentionStructure.get_position_embeds
    patched = funnel_positions._position_embeds(original)
    compared = 0
    for n in range(1, 41):
        try:
            want = original(structure, n, torch.float32, torch.device("cpu"))
        except (RuntimeError, IndexError):
            continue
        got = patched(structure, n, torch.float32, torch.device("cpu"))
        assert len(got) == len(want) == blocks
        for (g0, g1), (w0, w1) in zip(got, want):
            torch.testing.assert_close(g0, w0, rtol=0, atol=0)
            assert (g1 is None) == (w1 is None)
            if w1 is not None:
                torch.testing.assert_close(g1, w1, rtol=0, atol=0)
        compared += 1
    assert compared >= 25


def test_factorized_attention_keeps_the_original():
    structure = modeling_funnel.FunnelAttentionStructure(_config(attention_type="factorized")).eval()
    original = modeling_funnel.FunnelAttentionStructure.get_position_embeds
    got = funnel_positions._position_embeds(original)(structure, 12, torch.float32, torch.device("cpu"))
    want = original(structure, 12, torch.float32, torch.device("cpu"))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("make,blocks,lengths,refused", [
    (FunnelModel, [1, 1], (16, 10, 6, 40), 9),
    (FunnelBaseModel, [1, 1, 1], (16, 8, 12, 40), 10),
])
def test_funnel_with_a_dynamic_sequence(make, blocks, lengths, refused):
    """Imported once with a dynamic batch and sequence, against torch eager at several lengths.
    torch's export simplifies the pooled sizes under the example length's remainders (its own
    exported program raises at an odd length for an even example, and with three blocks at some
    lengths that are not multiples of 4); the import raises a ShapeError there too."""
    torch.manual_seed(0)
    model = make(_config(block_sizes=blocks)).eval()
    im = et.import_module(model, kwargs={"input_ids": torch.randint(0, 100, (2, 16))},
                          dynamic_axes={"input_ids": ("batch", "seq")})
    g = torch.Generator().manual_seed(1)
    for b, n in zip((2, 1, 3, 2), lengths):
        ids = torch.randint(0, 100, (b, n), generator=g)
        with torch.inference_mode():
            want = model(input_ids=ids).last_hidden_state.numpy()
        got = np.asarray(im(ids.numpy()))
        assert got.shape == want.shape and np.abs(want).max() > 1e-2
        np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(want).max(), rtol=0)
    assert im._jitted.cache_info()["compiles"] == 1
    with pytest.raises(ShapeError, match="torch's export"):
        im(torch.randint(0, 100, (1, refused)).numpy())
    assert not hasattr(modeling_funnel.FunnelAttentionStructure.get_position_embeds, "__wrapped__")


class _ScaleAView(torch.nn.Module):
    """``y[:, :, 1 : s + 1] *= m``: an in-place op on part of a dynamic axis (``slice_scatter``)."""

    def forward(self, x, m):
        y = x * 2
        y[:, :, 1 : x.shape[1] + 1] *= m
        return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_slice_scatter_of_part_of_a_dynamic_axis(dtype):
    def rand(*shape, g):
        return torch.randn(*shape, generator=g).mul(4).to(dtype)

    model = _ScaleAView()
    g = torch.Generator().manual_seed(0)
    im = et.import_module(model, (rand(2, 3, 7, g=g), rand(2, 3, 3, g=g)),
                          dynamic_axes={"x": ("b", "s", "t"), "m": ("b", "s", "s")})
    assert any(n.op == "aten.slice_scatter.default" for n in im.graph.nodes)
    # (a size-0 axis is traced as a static program of its own: docs/dynamic_axes.md)
    for b, s, t in ((2, 3, 7), (1, 5, 6), (3, 2, 9), (1, 4, 5), (1, 1, 2), (2, 0, 4)):
        x, m = rand(b, s, t, g=g), rand(b, s, s, g=g)
        want = model(x, m).numpy()
        got = np.asarray(im(x.numpy(), m.numpy()))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        assert got.dtype == want.dtype
        if s:
            assert im._jitted.cache_info()["compiles"] == 1


class _Squared(torch.nn.Module):
    """The first ``s ** 2 - 1`` of a row's ``s * s`` values: a size squared in the graph."""

    def forward(self, x):
        return x.flatten(1)[:, : x.shape[1] ** 2 - 1] + 1


def test_a_size_squared():
    model = _Squared()
    im = et.import_module(model, (torch.randn(2, 3, 3),), dynamic_axes={"x": ("b", "s", "s")})
    g = torch.Generator().manual_seed(0)
    for b, s in ((2, 3), (1, 5), (3, 2)):
        x = torch.randn(b, s, s, generator=g)
        got = np.asarray(im(x.numpy()))
        assert got.shape == (b, s * s - 1)
        np.testing.assert_allclose(got, model(x).numpy(), rtol=0, atol=0)
