"""transformers' MobileNet V1 and V2 pad each strided convolution TensorFlow's way ("SAME"), by a
branch on a size; the importer replaces their ``apply_tf_padding`` during the export by a
branch-free form (``torch_import/tf_padding.py``), so their image sizes stay dynamic. The form
against the originals, and both models against torch eager at sizes of every parity."""

import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need torch")
T = pytest.importorskip("transformers", reason="needs transformers")

from transformers.models.mobilenet_v1 import modeling_mobilenet_v1 as v1  # noqa: E402
from transformers.models.mobilenet_v2 import modeling_mobilenet_v2 as v2  # noqa: E402

from ember._src.torch_import import tf_padding  # noqa: E402
from tests.torch.models import check_dynamic_image_model  # noqa: E402


@pytest.mark.parametrize("kernel", [1, 2, 3, 5])
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_same_padding_equals_both_branches(kernel, stride):
    for size in range(1, 40):
        r = size % stride
        want = max(kernel - stride, 0) if r == 0 else max(kernel - r, 0)
        assert tf_padding.same_padding(size, kernel, stride) == want, (size, kernel, stride)


@pytest.mark.parametrize("module,dilated", [(v1, False), (v2, True)])
def test_the_replacement_pads_as_the_original(module, dilated):
    make = dict((m.rsplit(".", 1)[1], f) for m, _, f in tf_padding.PATCHES)[module.__name__.rsplit(".", 1)[1]]
    patched = make(module.apply_tf_padding)
    g = torch.Generator().manual_seed(0)
    for k, s, d in ((3, 2, 1), (3, 1, 1), (1, 2, 1), (5, 2, 2), (2, 3, 1), (4, 2, 3)):
        conv = torch.nn.Conv2d(2, 2, k, stride=s, dilation=d)
        for h, w in ((7, 8), (8, 7), (1, 1), (9, 12), (13, 5)):
            x = torch.randn(1, 2, h, w, generator=g)
            want = module.apply_tf_padding(x, conv)
            got = patched(x, conv)
            assert got.shape == want.shape, (k, s, d, h, w)
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert module.apply_tf_padding is patched.__wrapped__  # (the module itself is left alone)


def _check(model, sizes):
    return check_dynamic_image_model(model, (64, 64), sizes)


def test_mobilenet_v2_dynamic_image_size():
    """MobileNetV2 exported with a fixed size before (``int()`` of the size in its padding): now
    five sizes, odd and even, with one compile; the patched function is restored afterwards.
    (Weights of ``initializer_range`` 0.2: the default's outputs are ~1e-24.)"""
    original = v2.apply_tf_padding
    torch.manual_seed(0)
    model = T.MobileNetV2Model(T.MobileNetV2Config(depth_multiplier=0.35, image_size=64,
                                                    initializer_range=0.2)).eval()
    _check(model, ((2, 64, 64), (1, 96, 80), (3, 48, 64), (1, 77, 53), (1, 33, 35)))
    assert v2.apply_tf_padding is original


def test_mobilenet_v1_odd_image_sizes():
    """MobileNetV1's export assumed even sizes at each scale (a guard rejected 65 x 64): it now
    runs at every size."""
    torch.manual_seed(0)
    model = T.MobileNetV1Model(T.MobileNetV1Config(image_size=64, depth_multiplier=0.25,
                                                    initializer_range=0.3)).eval()
    _check(model, ((2, 64, 64), (1, 65, 64), (1, 77, 53), (3, 33, 96)))
