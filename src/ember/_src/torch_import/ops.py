"""One handler per ATen op: the op's name, its lowering to ``ember.numpy``/``ember.lax`` calls.

A handler is ``fn(ctx, *args, **kwargs)``: ``args``/``kwargs`` are the node's arguments with other
nodes' values substituted (ember Arrays, symbolic or static sizes, Python scalars), ``ctx.shape`` /
``ctx.dtype`` the output's shape and dtype as torch recorded them (the shape already evaluated for
the current binding of the named axes). Each op has a test against torch in
``tests/torch/test_ops.py`` (``CASES`` must cover every name in :data:`OPS`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

import ember
import ember.lax as lax
import ember.nn as enn
import ember.numpy as jnp
from ember._src import shapes as sh
from ember._src.prims import indexing as ix
from ember._src.prims import movement as mv
from ember._src.prims.attention import attention
from ember._src.prims.indexing import check_index
from ember.errors import ShapeError


@dataclasses.dataclass(frozen=True)
class OpHandler:
    op: str
    fn: Callable[..., Any]
    doc: str


OPS: dict[str, OpHandler] = {}


def handler(*names: str, doc: str = "") -> Callable:
    """Register ``fn`` as the lowering of each ATen op in ``names``."""
    def deco(fn: Callable) -> Callable:
        for n in names:
            if n in OPS:
                raise ValueError(f"duplicate handler for {n}")
            OPS[n] = OpHandler(n, fn, doc or (fn.__doc__ or "").strip().splitlines()[0])
        return fn
    return deco


class Ctx:
    """What a handler may know about the node beyond its arguments: the output's shape and dtype,
    the op's name (``"embedding.default"``), how error messages name the positional arguments that
    are graph values (``refs``), the user's source line, and the size range torch's export
    recorded for each named axis (``ranges``: symbolic ``max``/``min`` of sizes decide with them)."""

    def __init__(self, shape: tuple | None, dtype: str | None, name: str, refs: tuple = (),
                 source: str = "", ranges: dict | None = None):
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self.refs = refs
        self.source = source
        self.ranges = ranges or {}

    def arg(self, i: int) -> str:
        """The name of positional argument ``i`` for an error message."""
        ref = self.refs[i] if i < len(self.refs) else None
        return ref or f"argument {i}"


def size_value(n: Any, dtype: Any = None) -> Any:
    """A size (an int, or a named axis's symbolic size read at run time) as a scalar value; with
    ``dtype``, an array of that dtype."""
    v = ember.dimension_as_value(n)
    return v if dtype is None else jnp.asarray(v, dtype)


def checked_index(ctx: Ctx, idx: Any, n: Any, what: str, negative: bool = False) -> Any:
    """``idx`` after a check inside the program that each index lies in ``[0, n)`` (``[-n, n)`` when
    ``negative``) with negatives wrapped: torch raises on an index out of range where
    ``ember.numpy`` clamps or fills, so an imported gather raises ``IndexError`` naming the op,
    ``what`` (the index and the table), the first bad index and the bound."""
    idx = jnp.asarray(idx)
    if idx.dtype == np.bool_:
        raise NotImplementedError("indexing with a boolean mask (data-dependent shape)")
    idx = check_index(idx, n, f"aten.{ctx.name}: {what}", negative)
    if negative:
        idx = jnp.where(idx < 0, idx + size_value(n, idx.dtype), idx)
    return idx


def _norm(dim: int, ndim: int) -> int:
    return dim + ndim if dim < 0 else dim


def _dims(dims: Any, ndim: int) -> tuple[int, ...]:
    if dims is None or dims == []:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(_norm(d, ndim) for d in dims)


# ---- symbolic size arithmetic (Python operators on sizes) ----------------------------------------

@handler("sym.mul", doc="size * size")
def _sym_mul(ctx, a, b):
    return a * b


@handler("sym.add", doc="size + size")
def _sym_add(ctx, a, b):
    return a + b


@handler("sym.sub", doc="size - size")
def _sym_sub(ctx, a, b):
    return a - b


@handler("sym.floordiv", doc="size // size")
def _sym_floordiv(ctx, a, b):
    return a // b


@handler("sym.neg", doc="-size")
def _sym_neg(ctx, a):
    return -a


@handler("sym.mod", doc="size % size")
def _sym_mod(ctx, a, b):
    return sh.mod(a, b)


@handler("python.pow", doc="size ** n (a constant n >= 0)")
def _sym_pow(ctx, a, n):
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise NotImplementedError(f"a size raised to {n!r}: only a constant integer power >= 0 is a size")
    out = 1
    for _ in range(n):
        out = out * a
    return out


@handler("python.sym_max", doc="max(size, size)")
def _sym_max(ctx, a, b):
    return sh.dmax(a, b, ctx.ranges)


@handler("python.sym_min", doc="min(size, size)")
def _sym_min(ctx, a, b):
    return sh.dmin(a, b, ctx.ranges)


@handler("getitem", doc="element of a multi-output op")
def _getitem(ctx, xs, i):
    return xs[i]


@handler("aten.sym_size.int", doc="x.shape[dim]")
def _sym_size(ctx, x, dim):
    return x.shape[dim]


@handler("aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
         "aten.sym_constrain_range_for_size.default", "aten.sym_constrain_range.default",
         doc="checks torch recorded at export time (no-op)")
def _noop(ctx, *args, **kwargs):
    return None


# ---- elementwise ---------------------------------------------------------------------------------

def _as_recorded(ctx: Ctx, x: Any) -> Any:
    """``x`` cut to the sizes torch recorded for the node's output where a size of ``x`` is a
    symbolic expression that only equals the recorded one over the model's real sizes (MPT's
    position bias, ``2048 - max(0, 2048 - seq)`` long, added to ``seq``-long scores). The cut is the
    identity wherever the sizes agree, and a binding where they do not (a sequence past the bias's
    2048) violates the slice's bounds: a ``ShapeError`` when the call binds its sizes.

    A static size where torch recorded a symbolic one (DINOv2's 65 position embeddings added to
    ``1 + (h // 8) ** 2`` tokens, equal under a guard of an export at 64 x 64) is restated as the
    recorded size (``ensure_shape``), checked at each binding."""
    if ctx.shape is None or not hasattr(x, "shape") or len(ctx.shape) < x.ndim:
        return x
    rec = tuple(ctx.shape[len(ctx.shape) - x.ndim:])
    if any(sh.is_symbolic(d) and d != 1 and d != r for d, r in zip(x.shape, rec)):
        limits = tuple(r if sh.is_symbolic(d) and d != 1 and d != r else d for d, r in zip(x.shape, rec))
        x = lax.slice(x, (0,) * x.ndim, limits)
    if any(isinstance(d, int) and d != 1 and sh.is_symbolic(r) for d, r in zip(x.shape, rec)):
        want = tuple(r if isinstance(d, int) and d != 1 and sh.is_symbolic(r) else d
                     for d, r in zip(x.shape, rec))
        x = mv.ensure_shape(x, want, f"aten.{ctx.name} operand, whose sizes torch's export "
                                     f"recorded as {sh.shape_str(want)}")
    return x


def _binary(fn: Callable) -> Callable:
    def h(ctx, a, b, **kw):
        if kw.get("alpha", 1) != 1:
            b = b * kw["alpha"]
        return fn(_as_recorded(ctx, a), _as_recorded(ctx, b))
    h.__doc__ = f"elementwise {fn.__name__}"
    return h


for _names, _fn in [(("aten.add.Tensor", "aten.add.Scalar"), jnp.add),
                    (("aten.sub.Tensor", "aten.sub.Scalar"), jnp.subtract),
                    (("aten.mul.Tensor", "aten.mul.Scalar"), jnp.multiply),
                    (("aten.maximum.default",), jnp.maximum), (("aten.minimum.default",), jnp.minimum),
                    (("aten.eq.Tensor", "aten.eq.Scalar"), jnp.equal),
                    (("aten.ne.Tensor", "aten.ne.Scalar"), jnp.not_equal),
                    (("aten.lt.Tensor", "aten.lt.Scalar"), jnp.less),
                    (("aten.le.Tensor", "aten.le.Scalar"), jnp.less_equal),
                    (("aten.gt.Tensor", "aten.gt.Scalar"), jnp.greater),
                    (("aten.ge.Tensor", "aten.ge.Scalar"), jnp.greater_equal),
                    (("aten.bitwise_and.Tensor", "aten.bitwise_and.Scalar"), jnp.bitwise_and),
                    (("aten.bitwise_or.Tensor", "aten.bitwise_or.Scalar"), jnp.bitwise_or),
                    (("aten.logical_and.default",), jnp.logical_and),
                    (("aten.logical_or.default",), jnp.logical_or),
                    (("aten.atan2.default",), jnp.arctan2),
                    (("aten.remainder.Tensor", "aten.remainder.Scalar"), jnp.remainder),
                    (("aten.fmod.Tensor", "aten.fmod.Scalar"), jnp.fmod),
                    (("aten.bitwise_xor.Tensor", "aten.bitwise_xor.Scalar"), jnp.bitwise_xor),
                    (("aten.logical_xor.default",), jnp.logical_xor),
                    (("aten.copysign.Tensor", "aten.copysign.Scalar"), jnp.copysign),
                    (("aten.hypot.default",), jnp.hypot),
                    (("aten.fmax.default",), jnp.fmax), (("aten.fmin.default",), jnp.fmin),
                    (("aten.__lshift__.Scalar", "aten.__lshift__.Tensor"), jnp.left_shift),
                    (("aten.__rshift__.Scalar", "aten.__rshift__.Tensor"), jnp.right_shift)]:
    handler(*_names)(_binary(_fn))


@handler("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar",
         doc="elementwise power (a small whole exponent of a float tensor by multiplication, as torch)")
def _pow(ctx, a, b):
    # torch computes x ** 2.0 and x ** 3.0 (GPT-2's gelu) as x*x and x*x*x, and x ** -1.0, x ** -2.0
    # as reciprocals; integer_pow does the same and vectorizes (a powf call per element does not)
    if isinstance(b, float) and b.is_integer() and -2 <= b <= 3 and not isinstance(a, (int, float)) \
            and jnp.issubdtype(a.dtype, jnp.floating):
        b = int(b)
    return jnp.power(a, b)


@handler("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode",
         doc="division (true, trunc or floor rounding)")
def _div(ctx, a, b, rounding_mode=None):
    if rounding_mode is None:
        return jnp.true_divide(a, b)
    if rounding_mode == "floor":
        return jnp.floor_divide(a, b)
    q = jnp.true_divide(a, b)
    return jnp.trunc(q)


def _unary(fn: Callable) -> Callable:
    def h(ctx, x):
        return fn(x)
    h.__doc__ = f"elementwise {getattr(fn, '__name__', 'op')}"
    return h


for _name, _fn in [("neg", jnp.negative), ("abs", jnp.abs), ("exp", jnp.exp), ("log", jnp.log),
                   ("sqrt", jnp.sqrt), ("rsqrt", lax.rsqrt), ("sin", jnp.sin), ("cos", jnp.cos),
                   ("tanh", jnp.tanh), ("sigmoid", enn.sigmoid), ("relu", enn.relu), ("erf", lax.erf),
                   ("floor", jnp.floor), ("ceil", jnp.ceil), ("round", jnp.round), ("sign", jnp.sign),
                   ("reciprocal", jnp.reciprocal), ("log1p", jnp.log1p), ("expm1", jnp.expm1),
                   ("logical_not", jnp.logical_not), ("bitwise_not", jnp.invert), ("silu", enn.silu),
                   ("isnan", jnp.isnan), ("trunc", jnp.trunc), ("isinf", jnp.isinf),
                   ("sinh", jnp.sinh), ("cosh", jnp.cosh), ("tan", jnp.tan), ("asin", jnp.arcsin),
                   ("acos", jnp.arccos), ("atan", jnp.arctan), ("asinh", jnp.arcsinh), ("acosh", jnp.arccosh),
                   ("atanh", jnp.arctanh), ("exp2", jnp.exp2), ("log2", jnp.log2), ("log10", jnp.log10),
                   ("erfinv", lax.erf_inv), ("signbit", jnp.signbit)]:
    handler(f"aten.{_name}.default")(_unary(_fn))


@handler("aten.gelu.default", doc="GELU (erf or tanh form)")
def _gelu(ctx, x, approximate="none"):
    if approximate == "tanh":
        return enn.gelu(x, approximate=True)
    # torch's own formula, x * 0.5 * (1 + erf(x / sqrt(2))): erf has a vectorized float32 kernel on
    # the native backend (erfc, which ember.nn.gelu uses for its accuracy in the far tail, is libm's)
    return jnp.multiply(jnp.multiply(x, 0.5), jnp.add(1.0, lax.erf(jnp.multiply(x, 1.0 / math.sqrt(2.0)))))


@handler("aten.clamp.default", "aten.clamp.Tensor", "aten.hardtanh.default", doc="clamp to [min, max]")
def _clamp(ctx, x, min=None, max=None):
    if min is not None:
        x = jnp.maximum(x, min)
    if max is not None:
        x = jnp.minimum(x, max)
    return x


@handler("aten.where.self", doc="select by a boolean condition")
def _where(ctx, c, a, b):
    return jnp.where(c, a, b)


# ---- dtype, creation ------------------------------------------------------------------------------

@handler("aten._to_copy.default", doc="dtype conversion")
def _to_copy(ctx, x, dtype=None, **kw):
    return x if dtype is None else jnp.asarray(x).astype(dtype)


@handler("aten.clone.default", "aten.alias.default", "aten.lift_fresh_copy.default",
         "aten.detach.default", doc="identity")
def _identity(ctx, x, **kw):
    return x


@handler("aten.full.default", doc="a filled array")
def _full(ctx, size, value, dtype=None, **kw):
    return jnp.full(ctx.shape, value, dtype=ctx.dtype)


@handler("aten.full_like.default", doc="a filled array shaped like x")
def _full_like(ctx, x, value, **kw):
    return jnp.full(ctx.shape, value, dtype=ctx.dtype)


@handler("aten.scalar_tensor.default", doc="a 0-d array")
def _scalar_tensor(ctx, value, **kw):
    return jnp.asarray(value, dtype=ctx.dtype)


@handler("aten.arange.start_step", "aten.arange.default", "aten.arange.start", doc="evenly spaced values")
def _arange(ctx, *args, **kw):
    start, end, step = (0, args[0], 1) if len(args) == 1 else (args + (1,))[:3]
    if start == 0 and step == 1:
        return jnp.arange(end, dtype=ctx.dtype)
    return jnp.arange(start, end, step, dtype=ctx.dtype)


# ---- shapes and indexing --------------------------------------------------------------------------

@handler("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", doc="reshape")
def _view(ctx, x, shape):
    """A reshape to the recorded shape. Where ember cannot prove the element counts equal (sizes
    torch's export guarded, ``h // 8`` against ``4 * (h // 32)``) the count is restated
    (``ensure_shape``), so a binding where they differ raises ``ShapeError``, as torch's view
    raises."""
    shape = _plain_sizes(sh.size(x.shape), tuple(ctx.shape))
    n_in, n_out = sh.size(x.shape), sh.size(shape)
    if isinstance(n_in - n_out, int):
        return jnp.reshape(x, shape)
    flat = mv.ensure_shape(jnp.reshape(x, (n_in,)), (n_out,), f"aten.{ctx.name} to {sh.shape_str(shape)}")
    return jnp.reshape(flat, shape)


def _plain_sizes(n_in: Any, shape: tuple) -> tuple:
    """``shape`` with a size that holds a floor division (torch's record of a view's inferred
    ``-1``, such as ``(h * h * (t // h)) // t``) replaced by the element count divided by the other
    sizes, where that division is exact and shorter: the same size wherever the counts are equal,
    which torch's export checked, and a short expression in the generated code."""
    for i, d in enumerate(shape):
        if not isinstance(d, sh.DimExpr) or not any(a.kind == "floordiv" for a in d.atoms()):
            continue
        others = sh.size(shape[:i] + shape[i + 1:])
        if isinstance(others, int) and others == 0:
            continue
        q = sh.floordiv(n_in, others)
        exact = n_in - q * others
        if isinstance(exact, int) and exact == 0 and len(str(q)) < len(str(d)):
            shape = shape[:i] + (q,) + shape[i + 1:]
    return shape


@handler("aten.expand.default", doc="broadcast to a shape")
def _expand(ctx, x, shape, **kw):
    return jnp.broadcast_to(x, ctx.shape)


@handler("aten.permute.default", doc="transpose")
def _permute(ctx, x, dims):
    return jnp.transpose(x, _dims(dims, x.ndim))


@handler("aten.unsqueeze.default", doc="insert a size-1 axis")
def _unsqueeze(ctx, x, dim):
    return jnp.expand_dims(x, _norm(dim, x.ndim + 1))


@handler("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default", doc="drop size-1 axes")
def _squeeze(ctx, x, dims=None):
    return jnp.reshape(x, ctx.shape)


@handler("aten.slice.Tensor", doc="x[start:end:step] along dim")
def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    dim = _norm(dim, x.ndim)
    n = x.shape[dim]
    if isinstance(start, int) and start < 0:
        # (past the start of the axis torch clamps to 0: XLNet keeps x[-512:] of its seq-long memory)
        start = builtins_max(start + n, 0) if isinstance(n, int) else sh.dmax(start + n, 0, ctx.ranges)
    elif start is not None and not isinstance(start, int) and _at_most_zero(start):
        start = sh.dmax(start + n, 0, ctx.ranges)
    if isinstance(end, int) and (end >= 2 ** 62 or (isinstance(n, int) and end > n)):
        end = None
    elif isinstance(end, int) and end < 0:
        end = end + n
    elif end is not None and not isinstance(end, int) and _at_most_zero(end):
        end = end + n  # x[:-w] with a symbolic w (Longformer's window), from the end as torch
    if end is not None and not isinstance(end, int):
        if _same(end, n):
            end = None
        else:
            return lax.slice_in_dim(x, start or 0, end, step, axis=dim)
    if start is not None and not isinstance(start, int):  # x[seq - k:] (transformers' logits_to_keep)
        return lax.slice_in_dim(x, start, n if end is None else end, step, axis=dim)
    idx = [slice(None)] * x.ndim
    idx[dim] = slice(start if start != 0 else None, end, step if step != 1 else None)
    return x[tuple(idx)]


builtins_max = max


def _at_most_zero(d: Any) -> bool:
    """Whether the symbolic size expression ``d`` is provably ``<= 0`` (the negation of sizes:
    torch's export took such a slice bound as counted from the end)."""
    try:
        return bool(-d >= 0)
    except ShapeError:
        return False


_same = sh.same_dim


@handler("aten.select.int", doc="x[..., index, ...]")
def _select(ctx, x, dim, index):
    idx = [slice(None)] * x.ndim
    idx[_norm(dim, x.ndim)] = index
    return x[tuple(idx)]


@handler("aten.index.Tensor", doc="advanced indexing with integer arrays (an index out of range raises)")
def _index(ctx, x, indices):
    adv = [a for a, i in enumerate(indices) if i is not None]
    if not adv:
        return x
    names = ctx.refs[1] if len(ctx.refs) > 1 and isinstance(ctx.refs[1], (list, tuple)) else []
    names = list(names) + [None] * (len(indices) - len(names))
    idx = [checked_index(ctx, indices[a], x.shape[a],
                         f"{names[a] or 'the index'} indexes axis {a} of {ctx.arg(0)}", negative=True)
           for a in adv]
    adjacent = adv == list(range(adv[0], adv[-1] + 1))
    rest = [a for a in range(x.ndim) if a not in adv]
    xt = jnp.transpose(x, adv + rest)
    sizes = [x.shape[a] for a in adv]
    flat = None
    for i, n in zip(idx, sizes):
        flat = i if flat is None else flat * size_value(n) + i
    merged = jnp.reshape(xt, (math.prod(sizes) if all(isinstance(n, int) for n in sizes) else _prod(sizes),)
                         + tuple(xt.shape[len(adv):]))
    out = ix.take(merged, flat, axis=0, mode="clip")
    if adjacent and adv[0] > 0:
        b = flat.ndim
        order = list(range(b, b + adv[0])) + list(range(b)) + list(range(b + adv[0], out.ndim))
        out = jnp.transpose(out, order)
    return out


def _prod(sizes: list) -> Any:
    out = sizes[0]
    for s in sizes[1:]:
        out = out * s
    return out


@handler("aten.embedding.default", doc="rows of a table (an id out of range raises)")
def _embedding(ctx, w, idx, *args):
    idx = checked_index(ctx, idx, w.shape[0], f"{ctx.arg(1)} indexes the rows of {ctx.arg(0)}")
    return ix.take(w, idx, axis=0, mode="clip")


@handler("aten.index_select.default", doc="take along a dim (an index out of range raises)")
def _index_select(ctx, x, dim, index):
    dim = _norm(dim, max(x.ndim, 1))
    if x.ndim == 0:
        x = jnp.reshape(x, (1,))
    idx = checked_index(ctx, index, x.shape[dim], f"{ctx.arg(2)} indexes axis {dim} of {ctx.arg(0)}")
    return ix.take(x, jnp.reshape(idx, (-1,)), axis=dim, mode="clip")


@handler("aten.gather.default", doc="take_along_axis (an index out of range raises)")
def _gather(ctx, x, dim, index, **kw):
    dim = _norm(dim, max(x.ndim, 1))
    idx = checked_index(ctx, index, x.shape[dim] if x.ndim else 1,
                        f"{ctx.arg(2)} indexes axis {dim} of {ctx.arg(0)}")
    if x.ndim == 0:
        return jnp.reshape(x, ctx.shape)
    if tuple(idx.shape) != tuple(x.shape):  # torch's index may be smaller than x on the other dims
        # (lax.slice: a limit may be a named dynamic axis, a registered buffer cut to the sequence)
        limits = tuple(x.shape[d] if d == dim else idx.shape[d] for d in range(x.ndim))
        x = lax.slice(x, (0,) * x.ndim, limits)
    return ix.take_along_axis(x, idx, axis=dim)


@handler("aten.cat.default", doc="concatenate")
def _cat(ctx, xs, dim=0):
    xs = [x for x in xs if not (len(x.shape) == 1 and x.shape[0] == 0)] or xs[:1]
    dim = _norm(dim, xs[0].ndim)
    if ctx.shape is not None and len(xs) > 1:
        # operands whose other sizes are different expressions torch's export found equal (Swin's
        # x[0::2] and x[1::2] of an even size) are restated as the sizes torch recorded; a
        # binding where they differ raises ShapeError naming the op
        xs = [_as_recorded_except(ctx, x, dim) for x in xs]
    return jnp.concatenate(xs, axis=dim)


def _as_recorded_except(ctx, x, dim: int):
    """``x`` with its sizes off the concatenation axis ``dim`` restated as torch recorded them."""
    if x.ndim != len(ctx.shape):
        return x
    want = tuple(x.shape[d] if d == dim else ctx.shape[d] for d in range(x.ndim))
    if tuple(x.shape) == want:
        return x
    return mv.ensure_shape(x, want, f"aten.{ctx.name} operand, whose sizes torch's export "
                                    f"recorded as {sh.shape_str(want)}")


@handler("aten.split_with_sizes.default", "aten.split.Tensor", doc="split into pieces")
def _split(ctx, x, sizes, dim=0):
    dim = _norm(dim, x.ndim)
    if isinstance(sizes, int):
        n = x.shape[dim]
        sizes = [sizes] * (n // sizes) + ([n % sizes] if n % sizes else [])
    out, start = [], 0
    for s in sizes:
        if isinstance(start, int) and isinstance(s, int):
            idx = [slice(None)] * x.ndim
            idx[dim] = slice(start, start + s)
            out.append(x[tuple(idx)])
        else:  # symbolic sizes (torch checked they add up to the axis)
            out.append(lax.slice_in_dim(x, start, start + s, axis=dim))
        start = start + s
    return out


@handler("aten.constant_pad_nd.default", doc="pad with a constant")
def _pad(ctx, x, pad, value=0):
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    cfg = [(lo, hi, 0) for lo, hi in widths]
    return lax.pad(x, jnp.asarray(value, dtype=x.dtype), cfg)


# ---- reductions, scans ---------------------------------------------------------------------------

def _reduction(fn: Callable) -> Callable:
    def h(ctx, x, dim=None, keepdim=False, dtype=None, **kw):
        out = fn(x, axis=_dims(dim, x.ndim), keepdims=keepdim)
        return out
    h.__doc__ = f"{fn.__name__} over axes"
    return h


for _names, _fn in [(("aten.sum.dim_IntList", "aten.sum.default"), jnp.sum),
                    (("aten.mean.dim", "aten.mean.default"), jnp.mean),
                    (("aten.amax.default",), jnp.max), (("aten.amin.default",), jnp.min),
                    (("aten.any.dim", "aten.any.dims", "aten.any.default"), jnp.any),
                    (("aten.all.dim", "aten.all.dims", "aten.all.default"), jnp.all),
                    (("aten.prod.dim_int", "aten.prod.default"), jnp.prod)]:
    handler(*_names)(_reduction(_fn))


@handler("aten.var.correction", doc="variance with a correction")
def _var(ctx, x, dim=None, correction=None, keepdim=False):
    return jnp.var(x, axis=_dims(dim, x.ndim), ddof=1 if correction is None else correction,
                   keepdims=keepdim)


@handler("aten.max.dim", "aten.min.dim", doc="max/min with argmax/argmin along a dim")
def _maxmin_dim(ctx, x, dim, keepdim=False):
    is_max = ctx.name.startswith("max")
    val = (jnp.max if is_max else jnp.min)(x, axis=dim, keepdims=keepdim)
    arg = (jnp.argmax if is_max else jnp.argmin)(x, axis=dim, keepdims=keepdim)
    return val, arg


@handler("aten.argmax.default", "aten.argmin.default", doc="index of the max/min")
def _argmaxmin(ctx, x, dim=None, keepdim=False):
    fn = jnp.argmax if ctx.name.startswith("argmax") else jnp.argmin
    return fn(x, axis=dim, keepdims=keepdim) if dim is not None else fn(x)


@handler("aten.cumsum.default", doc="cumulative sum")
def _cumsum(ctx, x, dim, dtype=None):
    return jnp.cumsum(x, axis=_norm(dim, x.ndim))


@handler("aten._softmax.default", doc="softmax")
def _softmax(ctx, x, dim, half_to_float=False):
    return enn.softmax(x, axis=dim)


@handler("aten._log_softmax.default", doc="log-softmax")
def _log_softmax(ctx, x, dim, half_to_float=False):
    return enn.log_softmax(x, axis=dim)


# ---- linear algebra -------------------------------------------------------------------------------

@handler("aten.mm.default", "aten.bmm.default", "aten.matmul.default", doc="matrix product")
def _mm(ctx, a, b):
    return jnp.matmul(a, b)


@handler("aten.addmm.default", doc="beta * bias + alpha * a @ b")
def _addmm(ctx, bias, a, b, beta=1, alpha=1):
    out = jnp.matmul(a, b)
    if alpha != 1:
        out = out * alpha
    return out + (bias if beta == 1 else bias * beta)


# ---- normalization --------------------------------------------------------------------------------

@handler("aten.native_layer_norm.default", doc="layer norm (output, mean, rstd)")
def _layer_norm(ctx, x, shape, w, b, eps):
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    xc = x - mean
    var = jnp.mean(xc * xc, axis=axes, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    out = xc * rstd
    if w is not None:
        out = out * w
    if b is not None:
        out = out + b
    return out, mean, rstd


@handler("aten._native_batch_norm_legit_no_training.default", doc="batch norm in eval mode")
def _batch_norm(ctx, x, w, b, mean, var, momentum, eps):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale = lax.rsqrt(var + eps)
    if w is not None:
        scale = scale * w
    out = (x - jnp.reshape(mean, shape)) * jnp.reshape(scale, shape)
    if b is not None:
        out = out + jnp.reshape(b, shape)
    empty = jnp.zeros((0,), x.dtype)
    return out, empty, empty


# ---- convolution (pooling: ops_pool.py) --------------------------------------------------------

@handler("aten.convolution.default", doc="N-d convolution (grouped, strided, dilated, transposed)")
def _convolution(ctx, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    nd = x.ndim - 2
    spatial = "DHW"[-nd:] if nd <= 3 else None
    if spatial is None:
        raise NotImplementedError("convolution with more than 3 spatial dims")
    lhs, rhs = "NC" + spatial, "OI" + spatial
    # torch expands a one-element stride/padding/dilation to every spatial dim (a Conv2d built with
    # padding="valid" exports padding=[0])
    stride, padding, dilation, output_padding = (
        list(a) * nd if len(a) == 1 else list(a) for a in (stride, padding, dilation, output_padding))
    if transposed:
        k = w.shape[2:]
        pads = [(dilation[i] * (k[i] - 1) - padding[i],
                 dilation[i] * (k[i] - 1) - padding[i] + output_padding[i]) for i in range(nd)]
        if groups != 1:
            raise NotImplementedError("grouped transposed convolution")
        # torch stores (in, out, k...): flip the kernel and swap in/out
        wt = jnp.flip(jnp.swapaxes(w, 0, 1), axis=tuple(range(2, w.ndim)))
        out = lax.conv_general_dilated(x, wt, (1,) * nd, pads, lhs_dilation=tuple(stride),
                                       rhs_dilation=tuple(dilation), dimension_numbers=(lhs, rhs, lhs))
    else:
        out = lax.conv_general_dilated(x, w, tuple(stride), [(p, p) for p in padding],
                                       rhs_dilation=tuple(dilation), dimension_numbers=(lhs, rhs, lhs),
                                       feature_group_count=groups)
        require_windows(out, "aten.convolution")
    if b is not None:
        out = out + jnp.reshape(b, (1, -1) + (1,) * nd)
    return out


def require_windows(out: Any, what: str) -> None:
    """Make each symbolic spatial size of a convolution's or pooling's output (dims 2 on) at least
    1 a constraint of the program (``max(n, 1)`` restated as ``n``): torch raises where the input
    is smaller than the window, where the window count would otherwise be 0 and the result empty."""
    for i, d in enumerate(out.shape[2:]):
        lo = sh.dmax(d, 1) if sh.is_symbolic(d) else d
        if lo != d:
            why = f"{what}: no window fits axis {2 + i} of the input, which torch rejects"
            mv.require_equal_sizes(lo, d, why)


# ---- attention ------------------------------------------------------------------------------------

@handler("aten.scaled_dot_product_attention.default",
         doc="softmax(q k^T * scale + mask) v (boolean or additive mask, is_causal, GQA)")
def _sdpa(ctx, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """One fused ``attention`` step (prims/attention.py): ``is_causal`` is a flag (top-left, as
    torch), the mask an operand read in place, and a fully masked row gives zeros as torch's CPU
    kernels."""
    if dropout_p:
        raise NotImplementedError("scaled_dot_product_attention with dropout_p > 0 (export in eval mode)")
    lead = q.shape[:-2]
    if q.ndim != 4:  # fold the leading dims into [B, H]
        q, k, v = (jnp.reshape(t, (1, 1, *t.shape[-2:]) if t.ndim == 2 else
                               (math.prod(t.shape[:-3]) if t.ndim > 3 else 1, t.shape[-3], *t.shape[-2:]))
                   for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    bias = mask = None
    if attn_mask is not None:
        m = attn_mask
        if m.ndim > 4:
            m = jnp.reshape(m, (-1, *m.shape[-3:]))
        m = jnp.reshape(m, (1,) * (4 - m.ndim) + tuple(m.shape))
        if m.dtype == np.bool_:
            mask = m
        else:
            bias = m.astype(q.dtype)
    out = attention(q, k, v, bias, mask, scale=scale, causal="top_left" if is_causal else None)
    return out if len(lead) == 2 else jnp.reshape(out, (*lead, *out.shape[-2:]))


# ---- more activations -----------------------------------------------------------------------------

@handler("aten.leaky_relu.default", doc="leaky ReLU")
def _leaky_relu(ctx, x, negative_slope=0.01):
    return jnp.where(x > 0, x, x * negative_slope)


@handler("aten.elu.default", doc="ELU (scale, input_scale as torch)")
def _elu(ctx, x, alpha=1.0, scale=1.0, input_scale=1.0):
    return scale * jnp.where(x > 0, x, alpha * jnp.expm1(x * input_scale))


@handler("aten.softplus.default", doc="softplus with beta and threshold")
def _softplus(ctx, x, beta=1.0, threshold=20.0):
    bx = x * beta
    return jnp.where(bx > threshold, x, jnp.log1p(jnp.exp(jnp.minimum(bx, threshold))) / beta)


@handler("aten.hardsigmoid.default", doc="hard sigmoid")
def _hardsigmoid(ctx, x):
    return jnp.clip(x / 6.0 + 0.5, 0.0, 1.0)


@handler("aten.hardswish.default", doc="hard swish")
def _hardswish(ctx, x):
    return x * jnp.clip(x / 6.0 + 0.5, 0.0, 1.0)


# the handlers of the other families register themselves into OPS on import
from ember._src.torch_import import (  # noqa: E402,F401
    ops_fft,
    ops_image,
    ops_pool,
    ops_recurrent,
    ops_reduce,
    ops_scatter,
    ops_shape,
)
