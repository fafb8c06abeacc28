"""``vmap``: the batching interpreter.

A :class:`BatchTracer` carries a value of the enclosing level together with the position of the
vmapped axis in it (``batch_dim``), or ``None`` when the value does not vary along the mapped axis.
:class:`BatchTrace` hands each primitive to its ``batch(vals, dims, **params)`` rule (declared
beside the primitive); primitives whose operands are all unbatched are bound directly.

:func:`batch_program` vmaps a sub-:class:`~ember._src.program.Program` (for the batching rules of
primitives that hold programs: custom derivatives, control flow).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ember._src import core
from ember._src import shapes as sh
from ember._src import tree as tu
from ember._src.core import ShapedArray
from ember._src.prims import movement as mv
from ember._src.program import eval_program, trace_to_program
from ember.errors import TracerError

__all__ = ["BatchTrace", "BatchTracer", "batch_program", "matchaxis", "moveaxis", "vmap"]

NotMapped = None


class BatchTracer(core.Tracer):
    """A value inside ``vmap``: ``val`` holds the whole batch; ``batch_dim`` is its mapped axis."""

    __slots__ = ("_trace", "val", "batch_dim")

    def __init__(self, trace: BatchTrace, val: Any, batch_dim: int | None):
        self._trace = trace
        self.val = val
        self.batch_dim = batch_dim

    @property
    def aval(self) -> ShapedArray:
        a = core.get_aval(self.val)
        if self.batch_dim is None:
            return a
        shape = a.shape[:self.batch_dim] + a.shape[self.batch_dim + 1:]
        return ShapedArray(shape, a.dtype, a.weak_type)

    def full_lower(self) -> Any:
        if self.batch_dim is None:
            return core.full_lower(self.val)
        return self


class AxisData:
    """The global data of one ``vmap`` level: the mapped axis' size and optional name."""

    __slots__ = ("size", "name")

    def __init__(self, size: sh.Dim, name: Any = None):
        self.size = size
        self.name = name

    def __repr__(self) -> str:
        return f"AxisData(size={self.size}, name={self.name!r})"


class BatchTrace(core.Trace):
    """Processes primitives with their batching rules."""

    def pure(self, val: Any) -> BatchTracer:
        return BatchTracer(self, val, None)

    lift = pure

    @property
    def axis_data(self) -> AxisData:
        return self.main.global_data

    def process_primitive(self, prim: core.Primitive, tracers: list, params: dict) -> list:
        vals = [t.val for t in tracers]
        dims = [t.batch_dim for t in tracers]
        if getattr(prim, "collective", False):
            return self._collective(prim, vals, dims, params)
        if all(d is None for d in dims):
            out = prim.bind(*vals, **params)
            outs = out if prim.multiple_results else [out]
            return [BatchTracer(self, o, None) for o in outs]
        if prim.batch is None:
            why = prim.not_applicable.get("batch")
            raise NotImplementedError(f"vmap: primitive {prim.name!r} has no batching rule"
                                      + (f" ({why})" if why else ""))
        outs, out_dims = prim.batch(vals, dims, **params)
        outs, out_dims = list(outs), list(out_dims)
        if len(outs) != len(out_dims):  # pragma: no cover - a broken rule
            raise AssertionError(f"batching rule of {prim.name} returned {len(outs)} values and "
                                 f"{len(out_dims)} dims")
        return [BatchTracer(self, o, d) for o, d in zip(outs, out_dims)]


    # parameters of collectives that name an axis of the member's value (shifted by one when this
    # level's mapped axis is put in front of a value a lower level's collective evaluates)
    _AXIS_PARAMS = ("axis", "scatter_dimension", "split_axis", "concat_axis")

    def _collective(self, prim: core.Primitive, vals: list, dims: list, params: dict) -> list:
        """A collective (``_src/collectives.py``): evaluated here when it names this level's axis,
        otherwise passed to the level that owns its name with this axis leading."""
        if params.get("axis_name") == self.axis_data.name:
            from ember._src.collectives import apply_collective
            outs, out_dims = apply_collective(prim, vals, dims, self.axis_data, params)
            return [BatchTracer(self, o, d) for o, d in zip(outs, out_dims)]
        if all(d is None for d in dims):
            out = prim.bind(*vals, **params)
            return [BatchTracer(self, o, None) for o in (out if prim.multiple_results else [out])]
        vals = [moveaxis(v, d, 0) if d not in (None, 0) else
                (broadcast_batch(v, self.axis_data.size, 0) if d is None else v) for v, d in zip(vals, dims)]
        shifted = {k: (v + 1 if k in self._AXIS_PARAMS and isinstance(v, int) and v >= 0 else v)
                   for k, v in params.items()}
        out = prim.bind(*vals, **shifted)
        return [BatchTracer(self, o, 0) for o in (out if prim.multiple_results else [out])]


# ---------------------------------------------------------------------------------------------
# Helpers shared by batching rules
# ---------------------------------------------------------------------------------------------


def moveaxis(x: Any, src: int, dst: int) -> Any:
    """Move axis ``src`` of ``x`` to position ``dst`` (negative positions count from the end)."""
    return mv.moveaxis(x, src, dst)


def broadcast_batch(x: Any, size: sh.Dim, axis: int) -> Any:
    """Insert a new axis of ``size`` at ``axis`` of ``x`` (a value that does not vary over it)."""
    a = core.get_aval(x)
    axis = sh.normalize_axis(axis, a.ndim + 1, "out_axes")
    shape = (*a.shape[:axis], size, *a.shape[axis:])
    dims = tuple(i if i < axis else i + 1 for i in range(a.ndim))
    return mv.broadcast_in_dim(x, shape, dims)


def matchaxis(x: Any, src: int | None, dst: int | None, size: sh.Dim, *, what: str = "value") -> Any:
    """Bring ``x`` (batched at ``src`` or unbatched) to batch position ``dst`` (``None``: unbatched)."""
    if dst is None:
        if src is not None:
            raise ValueError(f"vmap: {what} is batched but was required to be unbatched "
                             "(out_axes=None for an output that depends on a mapped input)")
        return x
    if src is None:
        return broadcast_batch(x, size, dst)
    nd = core.get_aval(x).ndim
    return moveaxis(x, src, sh.normalize_axis(dst, nd, "out_axes"))


# ---------------------------------------------------------------------------------------------
# vmap of a flat function / of a Program
# ---------------------------------------------------------------------------------------------


def batch_flat(fun: Callable, vals: Sequence[Any], dims: Sequence[int | None], size: sh.Dim,
               axis_name: Any = None) -> tuple[list, list]:
    """Run the flat ``fun(*xs) -> list`` vmapped; returns ``(outs, out_dims)`` (dims may be ``None``)."""
    with core.new_main(BatchTrace, AxisData(size, axis_name)) as main:
        trace = BatchTrace(main)
        tracers = [BatchTracer(trace, v, d) if d is not None else v for v, d in zip(vals, dims)]
        outs = fun(*tracers)
        res_vals, res_dims = [], []
        for o in outs:
            if isinstance(o, BatchTracer) and o._trace.main is main:
                res_vals.append(o.val)
                res_dims.append(o.batch_dim)
            else:
                if isinstance(o, core.Tracer) and o._trace.main.level > main.level:
                    raise TracerError("vmap: an output was traced by a transformation nested inside "
                                      "this vmap (a leaked tracer)")
                res_vals.append(o)
                res_dims.append(None)
    return res_vals, res_dims


def batch_program(program: Any, in_dims: Sequence[int | None], axis_size: sh.Dim, *,
                  instantiate: bool | Sequence[bool] = False, axis_name: Any = None,
                  consts: Sequence[Any] | None = None) -> tuple[Any, list]:
    """vmap a Program: returns ``(batched_program, out_dims)``.

    ``in_dims[i]`` is the mapped axis of input ``i`` (``None``: unbatched). In the result every
    batched output is batched at axis 0 (``out_dims[i] == 0``) and unbatched ones have ``None``;
    ``instantiate`` (one bool, or one per output) forces outputs to be batched (broadcasting them).
    The batched program takes the inputs with their mapped axes where ``in_dims`` says. The
    constants (``consts``, default ``program.consts``) are unbatched values; they are captured as
    the constants of the result (possibly tracers of enclosing transformations). A value that is
    batched must be an input: closure-convert sub-programs (constants -> inputs) before batching.
    """
    in_dims = list(in_dims)
    if len(in_dims) != len(program.invars):
        raise ValueError(f"batch_program: {len(in_dims)} in_dims for {len(program.invars)} inputs")
    consts = program.consts if consts is None else tuple(consts)
    if len(consts) != len(program.constvars):
        raise ValueError(f"batch_program: {len(consts)} constants for {len(program.constvars)} constvars")
    n_out = len(program.outvars)
    inst = [bool(instantiate)] * n_out if isinstance(instantiate, bool) else list(instantiate)
    if len(inst) != n_out:
        raise ValueError(f"batch_program: {len(inst)} instantiate flags for {n_out} outputs")
    in_avals = []
    for i, (v, d) in enumerate(zip(program.invars, in_dims)):
        a = v.aval
        if d is not None:
            d = in_dims[i] = sh.normalize_axis(d, a.ndim + 1, "in_dims")
            a = ShapedArray((*a.shape[:d], axis_size, *a.shape[d:]), a.dtype, a.weak_type)
        in_avals.append(a)
    out_dims_box: list = []

    def flat(*args: Any) -> list:
        outs, dims = batch_flat(lambda *xs: eval_program(program, consts, xs), args, in_dims,
                                axis_size, axis_name)
        res, res_dims = [], []
        for o, d, force in zip(outs, dims, inst):
            if d is None and not force:
                res.append(o)
                res_dims.append(None)
            else:
                res.append(matchaxis(o, d, 0, axis_size))
                res_dims.append(0)
        out_dims_box.append(res_dims)
        return res

    prog, _ = trace_to_program(flat, in_avals)
    return prog, out_dims_box[0]


# ---------------------------------------------------------------------------------------------
# The public vmap
# ---------------------------------------------------------------------------------------------


def _is_none(x: Any) -> bool:
    return x is None


def _arg_names(fun: Callable, n: int) -> list[str]:
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(n):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
            names.append(params[i].name)
        else:
            names.append(f"args[{i}]")
    return names


def _leaf_paths(tree: Any, prefix: str) -> list[str]:
    """A readable path for every leaf of ``tree`` (``x``, ``x[0]``, ``x['w']``)."""
    out: list[str] = []

    def rec(x: Any, path: str) -> None:
        n = tu._node_of(x)
        if n is None:
            out.append(path)
            return
        node, children, aux = n
        is_map = isinstance(node, type) and issubclass(node, dict)
        for i, c in enumerate(children):
            rec(c, f"{path}[{aux[i]!r}]" if is_map else f"{path}[{i}]")

    rec(tree, prefix)
    return out


def _broadcast_prefix(spec: Any, tree: Any, what: str) -> list:
    """One entry of the prefix tree ``spec`` per leaf of ``tree`` (``None`` entries are leaves)."""
    spec_leaves, spec_def = tu.flatten(spec, is_leaf=_is_none)
    try:
        subtrees, _ = tu.flatten_up_to(spec_def, tree)
    except ValueError as e:
        raise ValueError(f"vmap {what} specification must be a tree prefix of the corresponding "
                         f"value, got specification {spec!r} for value tree {tu.structure(tree)}: {e}") \
            from None
    out = []
    for s, sub in zip(spec_leaves, subtrees):
        out.extend([s] * len(tu.leaves(sub)))
    return out


def _check_axis_spec(a: Any, what: str) -> None:
    if a is not None and not (isinstance(a, int) and not isinstance(a, bool)):
        raise TypeError(f"vmap {what} must be an int, None, or a (nested) container of those; got "
                        f"{a!r} of type {type(a).__name__}")


def _leaf_is_array(x: Any) -> bool:
    try:
        core.get_aval(x)
        return True
    except TypeError:
        return False


def vmap(fun: Callable, in_axes: Any = 0, out_axes: Any = 0, axis_size: int | None = None,
         axis_name: Any = None) -> Callable:
    """Vectorize ``fun`` over an axis of its inputs, as ``jax.vmap``.

    ``in_axes`` is an int, ``None`` (not mapped) or a pytree prefix of the positional arguments
    (a tuple with one entry per argument, nested containers for pytree arguments); negative axes
    count from the end. Keyword arguments are always mapped over axis 0. ``out_axes`` is the same
    for the outputs; an output that does not depend on a mapped input is broadcast along the new
    axis (unless its ``out_axes`` entry is ``None``). ``axis_size`` is needed when no input is
    mapped. ``vmap`` nests, and composes with ``jit`` in either order.
    """
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if isinstance(out_axes, list):
        out_axes = tuple(out_axes)
    for a in tu.flatten(in_axes, is_leaf=_is_none)[0]:
        _check_axis_spec(a, "in_axes")
    for a in tu.flatten(out_axes, is_leaf=_is_none)[0]:
        _check_axis_spec(a, "out_axes")
    if axis_size is not None and not isinstance(axis_size, (int, sh.DimExpr)):
        raise TypeError(f"vmap axis_size must be an int, got {axis_size!r}")

    @functools.wraps(fun)
    def batched(*args: Any, **kwargs: Any) -> Any:
        if isinstance(in_axes, tuple) and len(in_axes) != len(args):
            raise ValueError(f"vmap in_axes must be an int, None, or a tuple of entries corresponding "
                             f"to the positional arguments passed to the function, but got "
                             f"len(in_axes)={len(in_axes)}, len(args)={len(args)}")
        leaves, in_tree = tu.flatten((args, kwargs))
        axes = _broadcast_prefix(in_axes, args, "in_axes") + [0] * len(tu.leaves(kwargs))
        names = _arg_names(fun, len(args))
        paths = [p for i, a in enumerate(args) for p in _leaf_paths(a, names[i])] + \
            [p for k in sorted(kwargs) for p in _leaf_paths(kwargs[k], k)]
        dims: list[int | None] = []
        sizes: list[tuple[sh.Dim, str]] = []
        for x, ax, path in zip(leaves, axes, paths):
            if ax is None:
                dims.append(None)
                continue
            if not _leaf_is_array(x):
                raise TypeError(f"vmap: argument {path} of type {type(x).__name__} is not an array, but "
                                f"in_axes maps it along axis {ax} (use None for non-array arguments)")
            a = core.get_aval(x)
            if not -a.ndim <= ax < a.ndim:
                raise ValueError(f"vmap was requested to map argument {path} along axis {ax}, which implies "
                                 f"that its rank should be at least {ax + 1 if ax >= 0 else -ax}, but it is "
                                 f"only {a.ndim} (its type is {a.str_short()})")
            d = ax % a.ndim
            dims.append(d)
            sizes.append((a.shape[d], f"axis {ax} of argument {path} of type {a.str_short()}"))
        size = _mapped_size(sizes, axis_size)
        out_store: list = []

        def flat(*xs: Any) -> list:
            a, k = tu.unflatten(in_tree, xs)
            out = fun(*a, **k)
            out_leaves, out_tree = tu.flatten(out)
            out_store.append((out, out_tree))
            return out_leaves

        outs, out_dims = batch_flat(flat, leaves, dims, size, axis_name)
        out, out_tree = out_store[0]
        oaxes = _broadcast_prefix(out_axes, out, "out_axes")
        res = []
        for i, (o, d, dst) in enumerate(zip(outs, out_dims, oaxes)):
            if not _leaf_is_array(o):
                raise TypeError(f"vmap: output {i} of type {type(o).__name__} is not an array")
            if dst is None and d is not None:
                raise ValueError(f"vmap has mapped output (output {i}) but out_axes is None for it")
            res.append(matchaxis(o, d, dst, size, what=f"output {i}"))
        return tu.unflatten(out_tree, res)

    return batched


def _mapped_size(sizes: list[tuple[sh.Dim, str]], axis_size: sh.Dim | None) -> sh.Dim:
    if not sizes:
        if axis_size is None:
            raise ValueError("vmap must have at least one non-None value in in_axes (or pass "
                             "axis_size= to map over an axis that no input has)")
        return axis_size
    first = sizes[0][0]
    if all(s == first for s, _ in sizes) and (axis_size is None or axis_size == first):
        return first
    lines = []
    if axis_size is not None:
        lines.append(f"  * axis_size was given as {axis_size}")
    by_size: dict[Any, list[str]] = {}
    for s, where in sizes:
        by_size.setdefault(sh.dim_str(s), []).append(where)
    for s, wheres in by_size.items():
        more = f" (and {len(wheres) - 3} more)" if len(wheres) > 3 else ""
        lines.append(f"  * {'one axis' if len(wheres) == 1 else f'{len(wheres)} axes'} had {s}: "
                     + "; ".join(wheres[:3]) + more)
    raise ValueError("vmap got inconsistent sizes for array axes to be mapped:\n" + "\n".join(lines))

