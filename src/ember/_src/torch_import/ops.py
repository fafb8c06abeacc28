"""One handler per ATen op: how an exported PyTorch graph's call becomes ember operations.

The registry maps an op's name as ``torch.export`` prints it (``"aten.addmm.default"``) to a
:class:`Handler`: the function that builds the result from ember values (arrays, Python scalars,
sizes that may be symbolic dims under ``jit`` with named axes) and a one-line description for the
supported-op table. Each handler is checked against PyTorch in ``tests/torch/test_ops.py``.
This module does not import torch: dtypes arrive as ``torch.dtype`` objects and are mapped by name.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import ember.numpy as jnp
from ember import lax, nn
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src.dynamic import dimension_as_value


@dataclass(frozen=True)
class Handler:
    """How one ATen op lowers to ember."""

    name: str
    fn: Callable[..., Any]
    doc: str


HANDLERS: dict[str, Handler] = {}


def handler(*names: str, doc: str) -> Callable[[Callable], Callable]:
    """Register ``fn`` as the lowering of every op in ``names``."""
    def register(fn: Callable) -> Callable:
        for n in names:
            if n in HANDLERS:
                raise ValueError(f"ATen op {n} has two handlers")
            HANDLERS[n] = Handler(n, fn, doc)
        return fn
    return register


_TORCH_DTYPES = {
    "float32": np.float32, "float": np.float32, "float64": np.float64, "double": np.float64,
    "float16": np.float16, "half": np.float16, "bfloat16": dt.bfloat16, "int64": np.int64,
    "long": np.int64, "int32": np.int32, "int": np.int32, "int16": np.int16, "int8": np.int8,
    "uint8": np.uint8, "bool": np.bool_, "complex64": np.complex64, "complex128": np.complex128,
}


def np_dtype(d: Any) -> np.dtype | None:
    """The NumPy dtype of a ``torch.dtype`` (None stays None)."""
    if d is None:
        return None
    name = str(d).replace("torch.", "")
    if name not in _TORCH_DTYPES:
        raise TypeError(f"torch dtype {d} has no ember counterpart")
    return np.dtype(_TORCH_DTYPES[name])


def _shape(x: Any) -> tuple:
    return tuple(jnp.shape(x))


def _size(v: Any) -> Any:
    """A size argument: an int, or a symbolic dim (kept as is)."""
    return v if isinstance(v, sh.DimExpr) else int(v)


def _as_value(v: Any, dtype: Any = None) -> Any:
    """A scalar (possibly a symbolic size) as something arithmetic accepts."""
    if isinstance(v, sh.DimExpr):
        return dimension_as_value(v, dtype or np.int64)
    return v


# -- elementwise --------------------------------------------------------------------------------

_BINARY = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "maximum": jnp.maximum,
           "minimum": jnp.minimum, "eq": jnp.equal, "ne": jnp.not_equal, "lt": jnp.less,
           "le": jnp.less_equal, "gt": jnp.greater, "ge": jnp.greater_equal, "atan2": jnp.arctan2,
           "bitwise_and": jnp.bitwise_and, "bitwise_or": jnp.bitwise_or, "bitwise_xor": jnp.bitwise_xor,
           "logical_and": jnp.logical_and, "logical_or": jnp.logical_or, "logical_xor": jnp.logical_xor,
           "remainder": jnp.remainder, "fmod": jnp.fmod}


def _binary(fn: Callable) -> Callable:
    def run(a: Any, b: Any, *, alpha: Any = 1) -> Any:
        a, b = _as_value(a), _as_value(b)
        if alpha != 1:
            b = jnp.multiply(b, alpha)
        return fn(a, b)
    return run


for _name, _fn in _BINARY.items():
    handler(*(f"aten.{_name}.{o}" for o in ("Tensor", "Scalar")),
            doc=f"elementwise {_name} with broadcasting")(_binary(_fn))


@handler("aten.div.Tensor", "aten.div.Scalar", doc="true division")
def _div(a: Any, b: Any) -> Any:
    return jnp.true_divide(_as_value(a), _as_value(b))


@handler("aten.div.Tensor_mode", "aten.div.Scalar_mode", doc="division rounded by rounding_mode")
def _div_mode(a: Any, b: Any, *, rounding_mode: str | None = None) -> Any:
    a, b = _as_value(a), _as_value(b)
    if rounding_mode is None:
        return jnp.true_divide(a, b)
    if rounding_mode == "floor":
        return jnp.floor_divide(a, b)
    out = jnp.trunc(jnp.true_divide(a, b))
    rt = jnp.result_type(a, b)
    return out if jnp.issubdtype(rt, jnp.floating) else out.astype(rt)


@handler("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar", doc="power")
def _pow(a: Any, b: Any) -> Any:
    if isinstance(b, (int, float)) and float(b) == 2.0:
        return jnp.multiply(a, a)
    return jnp.power(_as_value(a), _as_value(b))


_UNARY = {"neg": jnp.negative, "exp": jnp.exp, "log": jnp.log, "sqrt": jnp.sqrt, "rsqrt": lax.rsqrt,
          "tanh": jnp.tanh, "sigmoid": nn.sigmoid, "sin": jnp.sin, "cos": jnp.cos, "abs": jnp.abs,
          "reciprocal": jnp.reciprocal, "erf": lax.erf, "relu": nn.relu, "logical_not": jnp.logical_not,
          "bitwise_not": jnp.invert, "floor": jnp.floor, "ceil": jnp.ceil, "log1p": jnp.log1p,
          "expm1": jnp.expm1, "sign": jnp.sign, "isnan": jnp.isnan, "exp2": jnp.exp2, "round": jnp.round,
          "trunc": jnp.trunc, "silu": nn.silu, "log2": jnp.log2}
for _name, _fn in _UNARY.items():
    handler(f"aten.{_name}.default", doc=f"elementwise {_name}")(lambda x, _f=_fn: _f(x))


@handler("aten.gelu.default", doc="GELU, exact (erf) or tanh approximation")
def _gelu(x: Any, *, approximate: str = "none") -> Any:
    return nn.gelu(x, approximate=approximate == "tanh")


@handler("aten.clamp.default", "aten.clamp.Tensor", doc="clamp to [min, max]")
def _clamp(x: Any, min: Any = None, max: Any = None) -> Any:  # noqa: A002
    return jnp.clip(x, min, max)


@handler("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar",
         doc="select by a boolean condition")
def _where(c: Any, a: Any, b: Any) -> Any:
    return jnp.where(c, _as_value(a), _as_value(b))


# -- identities and conversions -------------------------------------------------------------------

for _name in ("clone.default", "alias.default", "detach.default", "lift_fresh_copy.default",
              "contiguous.default"):
    handler(f"aten.{_name}", doc="identity (ember arrays are immutable)")(lambda x, **_: x)


@handler("aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
         "aten.sym_constrain_range_for_size.default", doc="export-time check: nothing at run time")
def _noop(*args: Any, **kwargs: Any) -> None:
    return None


@handler("aten._to_copy.default", "aten.to.dtype", doc="dtype conversion")
def _to_copy(x: Any, dtype: Any = None, **_: Any) -> Any:
    d = np_dtype(dtype)
    return x if d is None else jnp.asarray(x).astype(d)


@handler("aten.sym_size.int", doc="the (possibly symbolic) size of a dimension")
def _sym_size(x: Any, dim: int) -> Any:
    return _shape(x)[dim]


@handler("aten.scalar_tensor.default", doc="a 0-d array")
def _scalar_tensor(v: Any, *, dtype: Any = None, **_: Any) -> Any:
    return jnp.asarray(_as_value(v), dtype=np_dtype(dtype) or np.float32)


@handler("aten.full.default", doc="an array filled with a value")
def _full(size: Sequence, fill: Any, *, dtype: Any = None, **_: Any) -> Any:
    d = np_dtype(dtype) or (np.float32 if isinstance(fill, float) else np.int64 if isinstance(fill, int)
                            and not isinstance(fill, bool) else np.bool_)
    return jnp.full(tuple(_size(s) for s in size), _as_value(fill, d), dtype=d)


@handler("aten.full_like.default", doc="an array shaped like another, filled with a value")
def _full_like(x: Any, fill: Any, *, dtype: Any = None, **_: Any) -> Any:
    return jnp.full_like(x, _as_value(fill), dtype=np_dtype(dtype))


handler("aten.zeros_like.default", doc="zeros shaped like an array")(
    lambda x, *, dtype=None, **_: jnp.zeros_like(x, dtype=np_dtype(dtype)))
handler("aten.ones_like.default", doc="ones shaped like an array")(
    lambda x, *, dtype=None, **_: jnp.ones_like(x, dtype=np_dtype(dtype)))


@handler("aten.arange.start_step", "aten.arange.start", "aten.arange.default", doc="evenly spaced values")
def _arange(start: Any, end: Any = None, step: Any = 1, *, dtype: Any = None, **_: Any) -> Any:
    if end is None:
        start, end = 0, start
    d = np_dtype(dtype) or (np.int64 if all(isinstance(v, (int, sh.DimExpr)) for v in (start, end, step))
                            else np.float32)
    if isinstance(start, sh.DimExpr) or isinstance(end, sh.DimExpr):
        if step != 1:
            raise NotImplementedError("arange with symbolic bounds needs step 1")
        n = end - start
        out = lax.iota(d, n)
        return out if isinstance(start, int) and start == 0 else jnp.add(out, _as_value(start, d))
    return jnp.arange(start, end, step, dtype=d)


# -- shapes -------------------------------------------------------------------------------------------


@handler("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", doc="reshape")
def _view(x: Any, size: Sequence) -> Any:
    return jnp.reshape(x, tuple(_size(s) for s in size))


@handler("aten.permute.default", doc="transpose by a permutation")
def _permute(x: Any, dims: Sequence[int]) -> Any:
    return jnp.transpose(x, tuple(int(d) for d in dims))


@handler("aten.t.default", doc="2-d transpose")
def _t(x: Any) -> Any:
    return jnp.transpose(x)


@handler("aten.transpose.int", doc="swap two axes")
def _transpose(x: Any, a: int, b: int) -> Any:
    return jnp.swapaxes(x, a, b)


@handler("aten.unsqueeze.default", doc="insert a size-1 axis")
def _unsqueeze(x: Any, dim: int) -> Any:
    return jnp.expand_dims(x, dim if dim >= 0 else dim + len(_shape(x)) + 1)


@handler("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", doc="remove size-1 axes")
def _squeeze(x: Any, dim: Any = None) -> Any:
    shape = _shape(x)
    dims = range(len(shape)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    keep = tuple(d % len(shape) for d in dims if isinstance(shape[d], int) and shape[d] == 1) if shape else ()
    return jnp.squeeze(x, keep) if keep else x


@handler("aten.expand.default", doc="broadcast to a size (-1 keeps a dim)")
def _expand(x: Any, size: Sequence, **_: Any) -> Any:
    shape = _shape(x)
    lead = len(size) - len(shape)
    target = tuple(shape[i - lead] if (isinstance(s, int) and s == -1) else _size(s)
                   for i, s in enumerate(size))
    return jnp.broadcast_to(x, target)


@handler("aten.slice.Tensor", doc="a strided slice of one axis")
def _slice(x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Any:
    shape = _shape(x)
    dim = dim % len(shape)
    n = shape[dim]
    start = 0 if start is None else start
    if end is None or (isinstance(end, int) and isinstance(n, int) and end >= n) or \
            (isinstance(end, int) and end >= 2**62):
        end = n
    if isinstance(start, int) and start < 0 and isinstance(n, int):
        start = max(start + n, 0)
    if isinstance(end, int) and end < 0 and isinstance(n, int):
        end = max(end + n, 0)
    if isinstance(start, int) and start == 0 and end is n and step == 1:
        return x
    if isinstance(start, sh.DimExpr) or isinstance(end, sh.DimExpr) or isinstance(n, sh.DimExpr):
        if step != 1:
            raise NotImplementedError("slice with symbolic bounds needs step 1")
        return lax.slice_in_dim(x, start, end, 1, dim)
    return lax.slice_in_dim(x, int(start), int(end), int(step), dim)


@handler("aten.split_with_sizes.default", doc="split an axis into pieces of given sizes")
def _split_with_sizes(x: Any, sizes: Sequence, dim: int = 0) -> list:
    out, pos = [], 0
    for s in sizes:
        out.append(lax.slice_in_dim(x, pos, pos + s, 1, dim % len(_shape(x))))
        pos = pos + s
    return out


@handler("aten.split.Tensor", doc="split an axis into equal pieces")
def _split(x: Any, size: int, dim: int = 0) -> list:
    n = _shape(x)[dim]
    return _split_with_sizes(x, [min(size, n - i) for i in range(0, n, size)], dim)


@handler("aten.cat.default", doc="concatenate along an axis")
def _cat(xs: Sequence, dim: int = 0) -> Any:
    return jnp.concatenate(list(xs), axis=dim)


@handler("aten.stack.default", doc="stack along a new axis")
def _stack(xs: Sequence, dim: int = 0) -> Any:
    return jnp.stack(list(xs), axis=dim)


@handler("aten.index.Tensor", doc="advanced indexing with index arrays (None keeps an axis)")
def _index(x: Any, indices: Sequence) -> Any:
    """NumPy's advanced indexing, built from ``take``/``take_along_axis`` so that it also works
    along axes of symbolic size (the masks exports build index ``arange(seq)``)."""
    nd = len(_shape(x))
    adv = [(ax, jnp.asarray(i)) for ax, i in enumerate(indices) if i is not None]
    adv = [(ax, i.astype(np.int64) if i.dtype == np.bool_ else i) for ax, i in adv]
    if any(i.dtype == np.bool_ for _, i in adv):
        raise NotImplementedError("boolean mask indexing")
    if len(adv) == 1:
        ax, i = adv[0]
        return jnp.take(x, i, axis=ax)
    axes = [ax for ax, _ in adv]
    rest = [d for d in range(nd) if d not in axes]
    y = jnp.transpose(x, axes + rest)
    idx = jnp.broadcast_arrays(*[i for _, i in adv])
    p = len(_shape(idx[0]))
    y = jnp.take(y, idx[0], axis=0)  # shape P + (d_1, ..., rest)
    for k in range(1, len(idx)):
        tail = len(_shape(y)) - p - 1
        ind = jnp.reshape(idx[k], (*_shape(idx[k]), 1) + (1,) * tail)
        y = jnp.squeeze(jnp.take_along_axis(y, ind, axis=p), axis=p)
    if axes == list(range(axes[0], axes[0] + len(axes))) and axes[0] > 0:  # adjacent: P goes in place
        before = axes[0]
        order = list(range(p, p + before)) + list(range(p)) + list(range(p + before, len(_shape(y))))
        y = jnp.transpose(y, order)
    return y


@handler("aten.select.int", doc="one index of an axis")
def _select(x: Any, dim: int, index: int) -> Any:
    return jnp.take(x, index, axis=dim)


@handler("aten.embedding.default", doc="rows of a table by index")
def _embedding(weight: Any, indices: Any, *args: Any) -> Any:
    return jnp.take(weight, indices, axis=0)


# -- reductions and normalization ------------------------------------------------------------------


def _dims(dim: Any, x: Any) -> Any:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    return tuple(dim) if isinstance(dim, (list, tuple)) else dim


@handler("aten.sum.dim_IntList", "aten.sum.default", doc="sum over axes")
def _sum(x: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    return jnp.sum(x, axis=_dims(dim, x), keepdims=keepdim, dtype=np_dtype(dtype))


@handler("aten.mean.dim", "aten.mean.default", doc="mean over axes")
def _mean(x: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    return jnp.mean(x, axis=_dims(dim, x), keepdims=keepdim, dtype=np_dtype(dtype))


@handler("aten.amax.default", doc="maximum over axes")
def _amax(x: Any, dim: Any = (), keepdim: bool = False) -> Any:
    return jnp.max(x, axis=_dims(dim, x), keepdims=keepdim)


@handler("aten.amin.default", doc="minimum over axes")
def _amin(x: Any, dim: Any = (), keepdim: bool = False) -> Any:
    return jnp.min(x, axis=_dims(dim, x), keepdims=keepdim)


@handler("aten.any.dim", "aten.any.dims", "aten.any.default", doc="logical or over axes")
def _any(x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    return jnp.any(x, axis=_dims(dim, x), keepdims=keepdim)


@handler("aten.all.dim", "aten.all.default", doc="logical and over axes")
def _all(x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    return jnp.all(x, axis=_dims(dim, x), keepdims=keepdim)


@handler("aten.argmax.default", doc="index of the maximum")
def _argmax(x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    return jnp.argmax(x, axis=dim, keepdims=keepdim).astype(np.int64)


@handler("aten.cumsum.default", doc="cumulative sum")
def _cumsum(x: Any, dim: int, *, dtype: Any = None) -> Any:
    d = np_dtype(dtype)
    if d is None and jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == np.bool_:
        d = d or np.int64
    return jnp.cumsum(x, axis=dim, dtype=d)


@handler("aten._softmax.default", doc="softmax along an axis")
def _softmax(x: Any, dim: int, half_to_float: bool = False) -> Any:
    return nn.softmax(x, axis=dim)


@handler("aten._log_softmax.default", doc="log-softmax along an axis")
def _log_softmax(x: Any, dim: int, half_to_float: bool = False) -> Any:
    return nn.log_softmax(x, axis=dim)


@handler("aten.native_layer_norm.default", doc="layer norm over the trailing axes (output, mean, rstd)")
def _layer_norm(x: Any, normalized_shape: Sequence, weight: Any, bias: Any, eps: float) -> tuple:
    axes = tuple(range(-len(normalized_shape), 0))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    xc = x - mean
    var = jnp.mean(xc * xc, axis=axes, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    out = xc * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


@handler("aten._native_batch_norm_legit_no_training.default", doc="batch norm in eval mode")
def _batch_norm(x: Any, weight: Any, bias: Any, mean: Any, var: Any, momentum: float, eps: float) -> tuple:
    shape = (1, -1) + (1,) * (len(_shape(x)) - 2)
    scale = lax.rsqrt(jnp.reshape(var, shape) + eps)
    out = (x - jnp.reshape(mean, shape)) * scale
    if weight is not None:
        out = out * jnp.reshape(weight, shape)
    if bias is not None:
        out = out + jnp.reshape(bias, shape)
    empty = jnp.zeros((0,), x.dtype)
    return out, empty, empty


# -- products and convolutions ---------------------------------------------------------------------


@handler("aten.mm.default", "aten.bmm.default", "aten.matmul.default", doc="matrix product")
def _mm(a: Any, b: Any) -> Any:
    return jnp.matmul(a, b)


@handler("aten.addmm.default", doc="beta * bias + alpha * (a @ b)")
def _addmm(bias: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
    prod = jnp.matmul(a, b)
    if alpha != 1:
        prod = prod * alpha
    return prod + (bias if beta == 1 else bias * beta)


@handler("aten.linear.default", doc="x @ w.T + b")
def _linear(x: Any, w: Any, b: Any = None) -> Any:
    out = jnp.matmul(x, jnp.transpose(w))
    return out if b is None else out + b


@handler("aten.convolution.default", doc="N-d convolution (NCHW, groups, stride, padding, dilation)")
def _convolution(x: Any, w: Any, b: Any, stride: Sequence, padding: Sequence, dilation: Sequence,
                 transposed: bool, output_padding: Sequence, groups: int) -> Any:
    if transposed:
        raise NotImplementedError("transposed convolution is not imported yet")
    nd = len(_shape(x)) - 2
    spatial = "DHW"[-nd:] if nd <= 3 else None
    if spatial is None:
        raise NotImplementedError(f"{nd}-d convolution")
    dn = ("NC" + spatial, "OI" + spatial, "NC" + spatial)
    out = lax.conv_general_dilated(x, w, tuple(stride), [(int(p), int(p)) for p in padding],
                                   rhs_dilation=tuple(dilation), dimension_numbers=dn,
                                   feature_group_count=int(groups))
    if b is not None:
        out = out + jnp.reshape(b, (1, -1) + (1,) * nd)
    return out


def _pool(x: Any, kernel: Sequence, stride: Sequence, padding: Sequence, init: float, op: Callable) -> Any:
    nd = len(kernel)
    stride = stride or kernel
    window = (1, 1, *kernel)
    strides = (1, 1, *stride)
    pads = ((0, 0), (0, 0), *((int(p), int(p)) for p in padding)) if padding else "VALID"
    return lax.reduce_window(x, init, op, window, strides, pads if nd else "VALID")


@handler("aten.max_pool2d_with_indices.default", doc="2-d max pooling (the indices are not computed)")
def _max_pool2d(x: Any, kernel: Sequence, stride: Sequence = (), padding: Sequence = (0, 0),
                dilation: Sequence = (1, 1), ceil_mode: bool = False) -> tuple:
    if ceil_mode or any(d != 1 for d in dilation):
        raise NotImplementedError("max_pool2d with ceil_mode or dilation")
    out = _pool(x, kernel, stride, padding, -np.inf, lax.max)
    return out, None


@handler("aten.avg_pool2d.default", doc="2-d average pooling")
def _avg_pool2d(x: Any, kernel: Sequence, stride: Sequence = (), padding: Sequence = (0, 0),
                ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: Any = None) -> Any:
    if ceil_mode or (any(padding) and not count_include_pad) or divisor_override:
        raise NotImplementedError("avg_pool2d with ceil_mode / count_include_pad=False / divisor_override")
    s = _pool(x, kernel, stride, padding, 0.0, lax.add)
    return s / float(math.prod(kernel))


@handler("aten._adaptive_avg_pool2d.default", "aten.adaptive_avg_pool2d.default",
         doc="adaptive average pooling (output sizes dividing the input)")
def _adaptive_avg_pool2d(x: Any, output_size: Sequence) -> Any:
    h, w = _shape(x)[-2:]
    oh, ow = (int(s) for s in output_size)
    if h % oh or w % ow:
        raise NotImplementedError("adaptive_avg_pool2d with an output size that does not divide the input")
    n, c = _shape(x)[:2]
    return jnp.mean(jnp.reshape(x, (n, c, oh, h // oh, ow, w // ow)), axis=(3, 5))


# -- Python operators on sizes and tuples --------------------------------------------------------------

PYTHON_OPS: dict[Callable, Callable] = {
    operator.getitem: operator.getitem, operator.add: operator.add, operator.sub: operator.sub,
    operator.mul: operator.mul, operator.floordiv: operator.floordiv, operator.mod: operator.mod,
    operator.neg: operator.neg, operator.eq: operator.eq, operator.ne: operator.ne, operator.lt: operator.lt,
    operator.le: operator.le, operator.gt: operator.gt, operator.ge: operator.ge,
    operator.truediv: operator.truediv,
}


# -- ops of the training IR (used when a graph is imported without decomposition) ----------------------


@handler("aten.layer_norm.default", doc="layer norm over the trailing axes")
def _layer_norm_plain(x: Any, normalized_shape: Sequence, weight: Any = None, bias: Any = None,
                      eps: float = 1e-5, cudnn_enable: bool = True) -> Any:
    return _layer_norm(x, normalized_shape, weight, bias, eps)[0]


@handler("aten.dropout.default", "aten.feature_dropout.default", doc="identity (inference)")
def _dropout(x: Any, p: float = 0.5, train: bool = False) -> Any:
    if train and p:
        raise NotImplementedError("dropout in training mode: import the model in eval() mode")
    return x


handler("aten.__and__.Tensor", doc="bitwise/logical and")(_binary(jnp.bitwise_and))
for _name in ("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"):
    handler(f"aten.{_name}.default", doc=f"elementwise {_name}")(_binary(_BINARY[_name]))
handler("aten.__or__.Tensor", doc="bitwise/logical or")(_binary(jnp.bitwise_or))


@handler("aten.diff.default", doc="n-th discrete difference")
def _diff(x: Any, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Any:
    return jnp.diff(x, n=n, axis=dim, prepend=prepend, append=append)


HANDLERS["aten.new_ones.default"] = Handler(
    "aten.new_ones.default", lambda x, size, *, dtype=None, **_: jnp.ones(
        tuple(_size(s) for s in size), np_dtype(dtype) or x.dtype), "ones with another array's dtype")
HANDLERS["aten.new_zeros.default"] = Handler(
    "aten.new_zeros.default", lambda x, size, *, dtype=None, **_: jnp.zeros(
        tuple(_size(s) for s in size), np_dtype(dtype) or x.dtype), "zeros with another array's dtype")


@handler("aten.to.dtype_layout", "aten.to.device", "aten.type_as.default", doc="dtype conversion")
def _to_layout(x: Any, *args: Any, dtype: Any = None, **_: Any) -> Any:
    if args and hasattr(args[0], "dtype") and not isinstance(args[0], str):
        return jnp.asarray(x).astype(args[0].dtype)
    cand = [a for a in args if "dtype" in type(a).__name__ or str(a).startswith("torch.")]
    d = np_dtype(dtype if dtype is not None else (cand[-1] if cand and "device" not in str(cand[-1])
                                                   else None))
    return x if d is None else jnp.asarray(x).astype(d)


@handler("aten.scaled_dot_product_attention.default",
         doc="attention: softmax(q k^T * scale + mask) v, with is_causal and grouped-query heads")
def _sdpa(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
          scale: float | None = None, enable_gqa: bool = False) -> Any:
    if dropout_p:
        raise NotImplementedError("attention dropout: import the model in eval() mode")
    qs, ks = _shape(q), _shape(k)
    if qs[-3] != ks[-3]:  # grouped-query attention: repeat each key/value head
        rep = qs[-3] // ks[-3]
        k = jnp.repeat(k, rep, axis=-3)
        v = jnp.repeat(v, rep, axis=-3)
    d = qs[-1]
    s = (1.0 / math.sqrt(d)) if scale is None else scale
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * s
    L, S = qs[-2], ks[-2]
    if is_causal:
        rows = lax.broadcasted_iota(np.int32, (L, S), 0)
        cols = lax.broadcasted_iota(np.int32, (L, S), 1)
        scores = jnp.where(cols <= rows, scores, -np.inf)
    if attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            scores = jnp.where(attn_mask, scores, -np.inf)
        else:
            scores = scores + attn_mask
    return jnp.matmul(nn.softmax(scores, axis=-1), v)


@handler("aten.gather.default", doc="torch.gather: values along an axis at index positions")
def _gather(x: Any, dim: int, index: Any, sparse_grad: bool = False) -> Any:
    return jnp.take_along_axis(x, index, axis=dim)
