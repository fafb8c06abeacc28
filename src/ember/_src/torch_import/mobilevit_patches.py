"""MobileViT's patch unfolding and folding, kept symbolic in the image size.

transformers' ``MobileViTLayer.unfolding`` rounds the feature map up to a multiple of the patch
size with ``int(math.ceil(h / p) * p)`` (a float of a size, which torch's export fixes) and resizes
the map only where the size changed (a Python branch on the size); ``folding`` reads the channel
count as a ``-1`` of a view, whose inference torch's reshape decomposition guards. So MobileViT had
no dynamic image size. During an export with symbolic sizes the replacement rounds up with a
floor division and always resizes, in and back out: a bilinear resize to the same size is the
identity (every source index falls on a pixel, weight 1 and 0), so the values are the original's
wherever a size is already a multiple, except that a 0 weight on an infinite neighbour gives NaN.
With static sizes (ints) both methods are the originals. ``export.py`` lists the modules that
import torch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ember._src.torch_import.patching import Patch


def _symbolic(*sizes: Any) -> bool:
    return any(isinstance(s, torch.SymInt) for s in sizes)


def unfold(layer: Any, features: Tensor) -> tuple[Tensor, dict]:
    """``features`` (b, c, h, w) resized to multiples of the patch size and cut into patches
    ``(b * patch area, patch count, c)``, with what :func:`fold` needs."""
    ph, pw = layer.patch_height, layer.patch_width
    b, c, h, w = features.shape
    nh, nw = (h + ph - 1) // ph, (w + pw - 1) // pw
    x = F.interpolate(features, size=(nh * ph, nw * pw), mode="bilinear", align_corners=False)
    x = x.reshape(b * c * nh, ph, nw, pw).transpose(1, 2).reshape(b, c, nh * nw, ph * pw)
    patches = x.transpose(1, 3).reshape(b * ph * pw, nh * nw, c)
    info = {"orig_size": (h, w), "batch_size": b, "channels": c, "interpolate": True,
            "num_patches": nh * nw, "num_patches_width": nw, "num_patches_height": nh}
    return patches, info


def fold(layer: Any, patches: Tensor, info: dict) -> Tensor:
    """The inverse of :func:`unfold`: patches back to a (b, c, h, w) map of the original size."""
    ph, pw = layer.patch_height, layer.patch_width
    b, c = info["batch_size"], info["channels"]
    nh, nw = info["num_patches_height"], info["num_patches_width"]
    x = patches.contiguous().view(b, ph * pw, nh * nw, patches.shape[-1]).transpose(1, 3)
    x = x.reshape(b * c * nh, nw, ph, pw).transpose(1, 2).reshape(b, c, nh * ph, nw * pw)
    return F.interpolate(x, size=info["orig_size"], mode="bilinear", align_corners=False)


def _unfolding(original: Any) -> Any:
    def unfolding(self: Any, features: Tensor) -> tuple[Tensor, dict]:
        if not _symbolic(*features.shape[2:]):
            return original(self, features)
        return unfold(self, features)

    unfolding.__wrapped__ = original
    return unfolding


def _folding(original: Any) -> Any:
    def folding(self: Any, patches: Tensor, info: dict) -> Tensor:
        if not _symbolic(*info["orig_size"]):
            return original(self, patches, info)
        return fold(self, patches, info)

    folding.__wrapped__ = original
    return folding


_MODULE = "transformers.models.mobilevit.modeling_mobilevit"
PATCHES: tuple[Patch, ...] = (
    (_MODULE, "MobileViTLayer.unfolding", _unfolding),
    (_MODULE, "MobileViTLayer.folding", _folding),
)
