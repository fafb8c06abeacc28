"""MobileViT with dynamic image sizes. transformers rounds each feature map up to a multiple of the
patch size through a float (``int(math.ceil(h / p) * p)``) and resizes it only where the size
changed, which fixed the size in torch's export; during a symbolic export the importer rounds with a
floor division and always resizes (``torch_import/mobilevit_patches.py``). The replacement against
the originals, and the model against torch eager at several sizes with one compile."""

import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")
pytest.importorskip("transformers", reason="needs transformers")

from transformers import MobileViTConfig, MobileViTModel  # noqa: E402
from transformers.models.mobilevit import modeling_mobilevit  # noqa: E402

from ember._src.torch_import import mobilevit_patches  # noqa: E402
from tests.torch.models import check_dynamic_image_model  # noqa: E402


def _model():
    torch.manual_seed(0)
    cfg = MobileViTConfig(image_size=64, hidden_sizes=[16, 24, 32],
                          neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64], num_attention_heads=2,
                          initializer_range=0.2)
    return MobileViTModel(cfg).eval()


def test_unfold_and_fold_equal_the_originals():
    """At every size, multiples of the patch size or not, the branch-free unfolding gives the
    original's patches and the folding its map (a resize to the same size is the identity)."""
    model = _model()
    layer = next(m for m in model.modules() if isinstance(m, modeling_mobilevit.MobileViTLayer))
    g = torch.Generator().manual_seed(0)
    for h, w in ((8, 8), (7, 9), (1, 1), (12, 5), (2, 3)):
        x = torch.randn(2, 3, h, w, generator=g)
        want, want_info = modeling_mobilevit.MobileViTLayer.unfolding(layer, x)
        got, info = mobilevit_patches.unfold(layer, x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert {k: v for k, v in info.items() if k != "interpolate"} == \
            {k: v for k, v in want_info.items() if k != "interpolate"}
        y = torch.randn_like(got)
        want_map = modeling_mobilevit.MobileViTLayer.folding(layer, y, want_info)
        torch.testing.assert_close(mobilevit_patches.fold(layer, y, info), want_map, rtol=0, atol=0)
    # static sizes keep the original methods
    patched = mobilevit_patches._unfolding(modeling_mobilevit.MobileViTLayer.unfolding)
    x = torch.randn(1, 3, 8, 8, generator=g)
    assert patched(layer, x)[1]["interpolate"] is False


def test_mobilevit_dynamic_image_size():
    """Exported at 128 x 128 (its last stage then has two patches a side: at 64 x 64, one, and
    torch's reshape decomposition specializes that size), every image size runs, odd ones too."""
    check_dynamic_image_model(_model(), (128, 128), ((2, 128, 128), (1, 96, 160), (1, 130, 154), (1, 64, 64)),
                              seed=1)
    assert not hasattr(modeling_mobilevit.MobileViTLayer.unfolding, "__wrapped__")
