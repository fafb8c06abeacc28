"""TensorFlow-style "SAME" padding of transformers' MobileNet V1 and V2, kept symbolic.

Their ``apply_tf_padding`` pads each strided convolution's input by ``max(k - s, 0)`` rows where
the height ``h`` is a multiple of the stride ``s`` and by ``max(k - h % s, 0)`` elsewhere: a Python
branch on a size (MobileNetV1), after ``int()`` of the size (MobileNetV2). torch's export bakes in
the example's branch (V1: other parities raise a guard error) or fixes the size (V2: no dynamic
image size at all). The replacement computes the same padding without a branch: for ``k >= s``,
``(ceil(h / s) - 1) s + k - h`` (equal to both branches), so the convolution's output is
``ceil(h / s)`` and the sizes of later layers stay short expressions (the form
``k - 1 - (h - 1) % s`` made torch's export four times slower on MobileNetV2, its nested sizes
longer); ``k < s`` keeps the maximum. ``export.py`` lists the modules that import torch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ember._src.torch_import.patching import Patch


def same_padding(size: Any, kernel: int, stride: int) -> Any:
    """The total "SAME" padding of an axis of ``size`` (an int or a torch ``SymInt``)."""
    if kernel >= stride:
        return ((size + stride - 1) // stride - 1) * stride + kernel - size
    return torch.sym_max(kernel - ((size - 1) % stride + 1), 0)


def _apply_tf_padding(dilated: bool) -> Any:
    def make(original: Any) -> Any:
        def apply_tf_padding(features: Tensor, conv_layer: torch.nn.Conv2d) -> Tensor:
            (sh, sw), (kh, kw) = conv_layer.stride, conv_layer.kernel_size
            dh, dw = conv_layer.dilation if dilated else (1, 1)
            ph = same_padding(features.shape[-2], kh, sh)
            pw = same_padding(features.shape[-1], kw, sw)
            top, left = ph // 2, pw // 2
            return F.pad(features, (left * dw, (pw - left) * dw, top * dh, (ph - top) * dh), "constant", 0.0)

        apply_tf_padding.__wrapped__ = original
        return apply_tf_padding

    return make


# MobileNetV2 scales its pads by the convolution's dilation, V1 does not
PATCHES: tuple[Patch, ...] = (
    ("transformers.models.mobilenet_v1.modeling_mobilenet_v1", "apply_tf_padding", _apply_tf_padding(False)),
    ("transformers.models.mobilenet_v2.modeling_mobilenet_v2", "apply_tf_padding", _apply_tf_padding(True)),
)
