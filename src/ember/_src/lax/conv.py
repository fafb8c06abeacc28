"""Convolutions: ``lax.conv_general_dilated`` and its wrappers ``conv``, ``conv_with_general_padding``
and ``conv_transpose``, plus ``conv_dimension_numbers``, with JAX's names and semantics.

No new primitive: the input is dilated and padded with one ``lax.pad`` (interior padding), the
kernel-window taps are gathered with strided static slices (``sum(kernel_size)`` slices, stacked on
new axes: "im2col") and contracted with the kernel by one ``dot_general``. The work happens in a
channels-last layout (taps ``(N, out..., K..., C)``, kernel ``(K..., I, O)``), so that contraction
is a plain ``(N*out, K*C) @ (K*C, O)`` matrix product with no transposes of the big buffer.
Feature and batch groups become batch dimensions of that ``dot_general`` through reshapes. So
convolutions differentiate (slice/pad/concatenate/dot_general are linear), vmap and run on the
native backend unchanged.

Cost: the im2col buffer holds ``prod(kernel spatial size)`` copies of the (strided) input, so very
large kernels use proportionally more memory than a direct convolution loop would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ember._src import core
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.array import Array, asarray_eager
from ember._src.lax.windows import (
    PADDING_STRINGS,
    dilate_and_pad,
    dilate_dim,
    normalize_pads,
    padtype_to_pads,
    positive_ints,
    window_taps,
)
from ember._src.prims import conv as convp
from ember._src.prims import dot as dotp
from ember._src.prims import movement as mv
from ember.errors import DTypeError, ShapeError

ArrayLike = Any


class ConvDimensionNumbers(NamedTuple):
    """Axis layout of a convolution, as ``jax.lax.ConvDimensionNumbers``.

    ``lhs_spec = (batch axis, feature axis, spatial axes...)``, ``rhs_spec = (output-feature axis,
    input-feature axis, spatial axes...)``, ``out_spec = (batch axis, feature axis, spatial axes...)``;
    the spatial axes of the three are listed in the same (kernel) order.
    """

    lhs_spec: tuple[int, ...]
    rhs_spec: tuple[int, ...]
    out_spec: tuple[int, ...]


def _as_operand(x: ArrayLike) -> Any:
    return x if isinstance(x, (Array, core.Tracer)) else asarray_eager(x)


def _spec_perms(specs: Sequence[str]) -> ConvDimensionNumbers:
    lhs, rhs, out = specs
    pairs = (("N", "C"), ("O", "I"), ("N", "C"))
    for i, (spec, (a, b)) in enumerate(zip(specs, pairs)):
        if not isinstance(spec, str) or spec.count(a) != 1 or spec.count(b) != 1:
            raise TypeError(f"conv dimension_numbers[{i}] must contain '{a}' and '{b}' exactly once, "
                            f"got {spec!r}")
        if len(set(spec)) != len(spec):
            raise TypeError(f"conv dimension_numbers[{i}] has duplicate characters: {spec!r}")
    spatial = [set(s) - set(p) for s, p in zip(specs, pairs)]
    if not spatial[0] == spatial[1] == spatial[2]:
        raise TypeError(f"conv dimension_numbers must have the same spatial characters, got {tuple(specs)}")

    def perm(spec: str, pair: tuple[str, str]) -> tuple[int, ...]:
        sp = [i for i, c in enumerate(spec) if c not in pair]
        sp.sort(key=lambda i: rhs.index(spec[i]))
        return (spec.index(pair[0]), spec.index(pair[1]), *sp)

    return ConvDimensionNumbers(perm(lhs, pairs[0]), perm(rhs, pairs[1]), perm(out, pairs[2]))


def conv_dimension_numbers(lhs_shape: Sequence[int], rhs_shape: Sequence[int],
                           dimension_numbers: Any) -> ConvDimensionNumbers:
    """Canonical :class:`ConvDimensionNumbers` from ``None`` (``NC...``/``OI...``/``NC...``), a tuple of
    three layout strings such as ``("NHWC", "HWIO", "NHWC")``, or a ``ConvDimensionNumbers``."""
    nd = len(lhs_shape)
    if len(rhs_shape) != nd:
        raise ShapeError(f"convolution requires lhs and rhs of equal rank, got {len(lhs_shape)} and "
                         f"{len(rhs_shape)}")
    if nd < 2:
        raise ShapeError(f"convolution operands need rank >= 2 (batch and feature axes), got rank {nd}")
    if dimension_numbers is None:
        iota = tuple(range(nd))
        return ConvDimensionNumbers(iota, iota, iota)
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        dn = dimension_numbers
    elif len(dimension_numbers) == 3 and all(isinstance(s, str) for s in dimension_numbers):
        if any(len(s) != nd for s in dimension_numbers):
            raise ShapeError(f"conv dimension_numbers {tuple(dimension_numbers)} do not match operand "
                             f"rank {nd}")
        dn = _spec_perms(dimension_numbers)
    elif len(dimension_numbers) == 3:
        dn = ConvDimensionNumbers(*(tuple(int(i) for i in s) for s in dimension_numbers))
    else:
        raise TypeError(f"conv dimension_numbers must be None, three layout strings or a "
                        f"ConvDimensionNumbers, got {dimension_numbers!r}")
    for name, spec in zip(("lhs_spec", "rhs_spec", "out_spec"), dn):
        if sorted(spec) != list(range(nd)):
            raise ShapeError(f"conv dimension_numbers.{name} = {spec} is not a permutation of range({nd})")
    return dn


def _use_primitive(xa: core.ShapedArray, wa: core.ShapedArray, dn: ConvDimensionNumbers, ldil: Sequence[int],
                   B: int, preferred_element_type: Any) -> bool:
    """Whether the ``conv`` primitive covers this convolution (2-D, no input dilation, no batch
    groups, float32/float64, static features and kernel; batch, height and width may be symbolic); the
    im2col composite runs otherwise."""
    if xa.ndim != 4 or any(v != 1 for v in ldil) or B != 1 or xa.dtype not in (dt.float32, dt.float64):
        return False
    if preferred_element_type is not None and dt.canonicalize(preferred_element_type) != xa.dtype:
        return False
    return isinstance(xa.shape[dn.lhs_spec[1]], int) and all(isinstance(v, int) for v in wa.shape)


def conv_general_dilated(lhs: ArrayLike, rhs: ArrayLike, window_strides: Sequence[int], padding: Any,
                         lhs_dilation: Sequence[int] | None = None,
                         rhs_dilation: Sequence[int] | None = None, dimension_numbers: Any = None,
                         feature_group_count: int = 1, batch_group_count: int = 1, precision: Any = None,
                         preferred_element_type: Any = None) -> Any:
    """General n-d convolution (cross-correlation) with strides, padding, input ("transposed conv")
    and kernel ("atrous") dilation, layouts and grouping, as ``jax.lax.conv_general_dilated``.

    ``out[n, o, y] = sum_{c, k} lhs'[n, g(o) * C_g + c, y * stride + k * rhs_dilation] * rhs[o, c, k]``
    where ``lhs'`` is ``lhs`` dilated by ``lhs_dilation`` and padded by ``padding``: a string
    (``"SAME"``, ``"SAME_LOWER"``, ``"VALID"``) or one ``(low, high)`` pair per spatial axis (negative
    values crop). ``dimension_numbers``: ``None`` (``NC...``, ``OI...``, ``NC...``), three layout
    strings like ``("NHWC", "HWIO", "NHWC")``, or a :class:`ConvDimensionNumbers`.
    ``feature_group_count`` splits the input features into groups (depthwise for ``C`` groups);
    ``batch_group_count`` splits the batch into groups convolved with separate output features.
    ``precision`` is validated as JAX reads it (``lax.Precision``) and has no other effect.
    """
    dotp.canonicalize_precision(precision)
    x0 = x = _as_operand(lhs)
    w0 = w = _as_operand(rhs)
    xa, wa = core.get_aval(x), core.get_aval(w)
    if xa.dtype != wa.dtype:
        raise DTypeError(f"conv_general_dilated requires operands of the same dtype, got {xa.dtype} and "
                         f"{wa.dtype}")
    if xa.dtype == dt.bool_:
        raise DTypeError("conv_general_dilated does not support bool operands")
    dn = conv_dimension_numbers(xa.shape, wa.shape, dimension_numbers)
    d = xa.ndim - 2
    name = "conv_general_dilated"
    strides = positive_ints(window_strides, d, name, "window_strides")
    ldil = positive_ints(lhs_dilation, d, name, "lhs_dilation")
    rdil = positive_ints(rhs_dilation, d, name, "rhs_dilation")
    G, B = int(feature_group_count), int(batch_group_count)
    if G < 1 or B < 1:
        raise ValueError(f"{name}: feature_group_count and batch_group_count must be >= 1, got {G}, {B}")
    if G > 1 and B > 1:
        raise ValueError(f"{name}: at most one of feature_group_count and batch_group_count may exceed 1")
    # channels-last working layouts: lhs (N, spatial..., C), rhs (spatial..., I, O), so that the
    # taps (N, out..., K..., C) contract with the kernel as one plain matrix product
    x = mv.transpose(x, (dn.lhs_spec[0], *dn.lhs_spec[2:], dn.lhs_spec[1]))
    w = mv.transpose(w, (*dn.rhs_spec[2:], dn.rhs_spec[1], dn.rhs_spec[0]))
    xs, ws = core.get_aval(x).shape, core.get_aval(w).shape
    N, C, O, cin, K = xs[0], xs[-1], ws[-1], ws[-2], ws[:d]
    if any(k < 1 for k in K):
        raise ShapeError(f"{name}: kernel spatial sizes must be positive, got {sh.shape_str(K)}")
    if C != cin * G:
        raise ShapeError(f"{name}: lhs has {C} input features but rhs expects {cin} x feature_group_count "
                         f"{G} = {cin * G}")
    if O % G or O % B:
        raise ShapeError(f"{name}: rhs output features ({O}) must be divisible by feature_group_count ({G}) "
                         f"and batch_group_count ({B})")
    if N % B:
        raise ShapeError(f"{name}: lhs batch ({N}) must be divisible by batch_group_count ({B})")
    if isinstance(padding, str):
        if padding.upper() not in PADDING_STRINGS:
            raise ValueError(f"{name}: unknown padding {padding!r}; use one of {PADDING_STRINGS} or pairs")
        if any(v != 1 for v in ldil):
            raise ValueError(f"{name}: string padding is not supported with lhs_dilation; give explicit "
                             f"pairs or use conv_transpose")
        pads = padtype_to_pads(xs[1:1 + d], [dilate_dim(k, r) for k, r in zip(K, rdil)], strides, padding)
    else:
        pads = normalize_pads(padding, d, name)
    if _use_primitive(xa, wa, dn, ldil, B, preferred_element_type):  # (symbolic pads: "SAME", symbolic sizes)
        return convp.conv(x0, w0, strides, pads, rdil, dn, G)
    spatial = tuple(range(1, 1 + d))
    x = dilate_and_pad(x, mv.full((), 0, xa.dtype), spatial, pads, ldil)
    taps = window_taps(x, spatial, K, strides, rdil, at=1 + d)  # (N, out..., K..., C)
    out_sp = core.get_aval(taps).shape[1:1 + d]
    k_lhs = tuple(range(1 + d, 1 + 2 * d))
    k_rhs = tuple(range(d))
    pet = None if preferred_element_type is None else dt.canonicalize(preferred_element_type)
    if G == 1 and B == 1:  # (N, out..., O)
        y = dotp.dot_general(taps, w, (((*k_lhs, 1 + 2 * d), (*k_rhs, d)), ((), ())),
                             preferred_element_type=pet)
    elif G > 1:
        taps = mv.reshape(taps, (N, *out_sp, *K, G, cin))
        w = mv.reshape(w, (*K, cin, G, O // G))
        y = dotp.dot_general(taps, w, (((*k_lhs, 2 + 2 * d), (*k_rhs, d)), ((1 + 2 * d,), (d + 1,))),
                             preferred_element_type=pet)  # (G, N, out..., O/G)
        y = mv.transpose(y, (*range(1, 2 + d), 0, 2 + d))
        y = mv.reshape(y, (N, *out_sp, O))
    else:
        taps = mv.reshape(taps, (B, N // B, *core.get_aval(taps).shape[1:]))
        w = mv.reshape(w, (*K, cin, B, O // B))
        y = dotp.dot_general(taps, w, (((*(a + 1 for a in k_lhs), 2 + 2 * d), (*k_rhs, d)), ((0,), (d + 1,))),
                             preferred_element_type=pet)  # (B, N/B, out..., O/B)
        y = mv.transpose(y, (*range(1, 2 + d), 0, 2 + d))
        y = mv.reshape(y, (N // B, *out_sp, O))
    # y is (N', spatial..., O); lay it out as out_spec
    perm = [0] * (d + 2)
    perm[dn.out_spec[0]] = 0
    perm[dn.out_spec[1]] = d + 1
    for i in range(d):
        perm[dn.out_spec[2 + i]] = 1 + i
    return mv.transpose(y, tuple(perm))


def conv(lhs: ArrayLike, rhs: ArrayLike, window_strides: Sequence[int], padding: Any,
         precision: Any = None, preferred_element_type: Any = None) -> Any:
    """``conv_general_dilated`` with ``NC...``/``OI...`` layouts and no dilation, as ``jax.lax.conv``."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def conv_with_general_padding(lhs: ArrayLike, rhs: ArrayLike, window_strides: Sequence[int], padding: Any,
                              lhs_dilation: Sequence[int] | None, rhs_dilation: Sequence[int] | None,
                              precision: Any = None, preferred_element_type: Any = None) -> Any:
    """``conv_general_dilated`` with ``NC...``/``OI...`` layouts, as ``jax.lax.conv_with_general_padding``."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                precision=precision, preferred_element_type=preferred_element_type)


def _conv_transpose_pads(k: int, s: int, padding: str) -> tuple[int, int]:
    kind = padding.upper()
    if kind == "SAME":
        total = k + s - 2
        lo = k - 1 if s > k - 1 else -(-total // 2)
    elif kind == "VALID":
        total = k + s - 2 + max(k - s, 0)
        lo = k - 1
    else:
        raise ValueError(f"conv_transpose: string padding must be 'SAME' or 'VALID', got {padding!r}")
    return lo, total - lo


_TRANSPOSE_DEFAULT_LAYOUTS = {2: ("NC", "IO", "NC"), 3: ("NHC", "HIO", "NHC"), 4: ("NHWC", "HWIO", "NHWC"),
                              5: ("NHWDC", "HWDIO", "NHWDC")}


def conv_transpose(lhs: ArrayLike, rhs: ArrayLike, strides: Sequence[int], padding: Any,
                   rhs_dilation: Sequence[int] | None = None, dimension_numbers: Any = None,
                   transpose_kernel: bool = False, precision: Any = None,
                   preferred_element_type: Any = None) -> Any:
    """Transposed ("fractionally strided") convolution, as ``jax.lax.conv_transpose``: the input is
    dilated by ``strides`` and convolved with stride 1.

    ``padding`` is ``"SAME"``/``"VALID"`` (output ``n * s`` resp. ``n * s + max(k - s, 0)``) or explicit
    pairs for the dilated input. Layouts default to ``NHWC``/``HWIO``/``NHWC`` (by rank).
    ``transpose_kernel=True`` flips the spatial axes of the kernel and swaps its feature axes, which
    makes the result the gradient of ``conv_general_dilated`` with respect to its input.
    """
    x, w = _as_operand(lhs), _as_operand(rhs)
    xa, wa = core.get_aval(x), core.get_aval(w)
    nd = xa.ndim
    if wa.ndim != nd or nd < 2:
        raise ShapeError(f"conv_transpose requires lhs and rhs of equal rank >= 2, got {xa.ndim} and "
                         f"{wa.ndim}")
    if dimension_numbers is None:
        if nd not in _TRANSPOSE_DEFAULT_LAYOUTS:
            raise ValueError(f"conv_transpose: no default dimension_numbers for rank {nd}; pass them")
        dimension_numbers = _TRANSPOSE_DEFAULT_LAYOUTS[nd]
    dn = conv_dimension_numbers(xa.shape, wa.shape, dimension_numbers)
    d = nd - 2
    strides = positive_ints(strides, d, "conv_transpose", "strides")
    rdil = positive_ints(rhs_dilation, d, "conv_transpose", "rhs_dilation")
    k_sp = [wa.shape[a] for a in dn.rhs_spec[2:]]
    if isinstance(padding, str):
        pads: Any = [_conv_transpose_pads(dilate_dim(k, r), s, padding)
                     for k, r, s in zip(k_sp, rdil, strides)]
    else:
        pads = padding
    if transpose_kernel:
        w = mv.rev(w, tuple(dn.rhs_spec[2:]))
        perm = list(range(nd))
        o, i = dn.rhs_spec[0], dn.rhs_spec[1]
        perm[o], perm[i] = i, o
        w = mv.transpose(w, tuple(perm))
    return conv_general_dilated(x, w, (1,) * d, pads, strides, rdil, dn, precision=precision,
                                preferred_element_type=preferred_element_type)


__all__ = ["ConvDimensionNumbers", "conv", "conv_dimension_numbers", "conv_general_dilated",
           "conv_transpose", "conv_with_general_padding"]
