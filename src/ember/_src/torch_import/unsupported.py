"""ATen ops of torch's core opset (and a few others exports keep) that have no handler, each with
the reason; :class:`~.interpret.UnsupportedOpError` quotes it and docs/FEATURES.md lists it."""

from __future__ import annotations

_BACKWARD = ("a training graph's gradient op: import the forward model and differentiate it with "
             "ember.grad")
_RANDOM = "torch's random stream cannot be reproduced: pass the random tensor as an input"
_STRIDES = "ember arrays have no strides or storage offsets (values, not views)"

NOT_SUPPORTED: dict[str, str] = {
    "aten._adaptive_avg_pool2d_backward.default": _BACKWARD,
    "aten.avg_pool2d_backward.default": _BACKWARD,
    "aten.convolution_backward.default": _BACKWARD,
    "aten.embedding_dense_backward.default": _BACKWARD,
    "aten.max_pool2d_with_indices_backward.default": _BACKWARD,
    "aten.native_group_norm_backward.default": _BACKWARD,
    "aten.native_layer_norm_backward.default": _BACKWARD,
    "aten.rand.default": _RANDOM,
    "aten.randn.default": _RANDOM,
    "aten.randperm.default": _RANDOM,
    "aten.sym_stride.int": _STRIDES,
    "aten.sym_storage_offset.default": _STRIDES,
    "aten.sym_is_contiguous.default": _STRIDES,
    "aten.resize_.default": "an in-place resize of a tensor's storage (absent from functional exports)",
    "aten.nonzero.default": "the output's shape depends on the values (data-dependent shape)",
    "aten._local_scalar_dense.default": "`.item()`: a Python value read from a tensor while tracing",
    "aten._native_batch_norm_legit.default": ("batch norm in training mode updates the running statistics "
                                              "in place: export in eval mode"),
    "aten.atan2.out": "an `out=` variant, absent from the functional graphs torch.export produces",
    "aten._embedding_bag.default": "not yet: bags by offsets (a segment sum/mean/max)",
    "aten._pdist_forward.default": "not yet: condensed pairwise distances (`_cdist_forward` is supported)",
    "aten.col2im.default": "not yet: `F.fold` (a scatter-add of patches)",
    "aten.grid_sampler_2d.default": "not yet: bilinear sampling at computed coordinates",
    "aten.adaptive_max_pool2d.default": "not yet: values and indices of adaptive windows",
    "aten._upsample_bilinear2d_aa.default": "not yet: antialiased resampling",
}
