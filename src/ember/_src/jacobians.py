"""Jacobians and Hessians: ``jacfwd`` (one JVP per input basis vector, batched with ``vmap``),
``jacrev`` (one VJP per output basis vector, batched) and ``hessian`` (``jacfwd`` of ``jacrev``),
over the forward and reverse modes of :mod:`ember._src.ad`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import tree as tu
from ember._src.ad import (
    _arg_name,
    _check_input_dtypes,
    _flatten_fun,
    _float0_zeros,
    _instantiate_out,
    _is_diff_dtype,
    _split_argnums,
    linearize_flat,
)
from ember._src.ad_util import float0, instantiate
from ember._src.batching import vmap as _v
from ember._src.core import ShapedArray
from ember._src.prims import movement as mv

__all__ = ["hessian", "jacfwd", "jacrev"]


def _size(aval: ShapedArray) -> int:
    n = 1
    for d in aval.shape:
        if not isinstance(d, (int, np.integer)):
            raise TypeError(f"Jacobians need static shapes, got {aval.str_short()}")
        n *= int(d)
    return n


def _basis(avals: Sequence[ShapedArray], dtype_of: Callable[[ShapedArray], Any]) -> list[np.ndarray]:
    """Split rows of an identity matrix into one ``(N, *shape)`` block per leaf (N: total size)."""
    sizes = [_size(a) for a in avals]
    total = sum(sizes)
    out, off = [], 0
    for a, n in zip(avals, sizes):
        block = np.zeros((total, n), dtype=dtype_of(a))
        block[off:off + n] = np.eye(n, dtype=block.dtype)
        out.append(block.reshape((total, *(int(d) for d in a.shape))))
        off += n
    return out


def _unstack_jac(batched: Any, blocks: Sequence[ShapedArray], lead: ShapedArray, lead_first: bool) -> list:
    """Split a ``(N, *lead.shape)`` batched value into one Jacobian block per basis leaf.

    ``lead_first``: the result is ``lead.shape + block.shape`` (jacfwd when ``lead`` is the
    output); otherwise ``block.shape + lead.shape`` (jacrev, where ``lead`` is the input).
    """
    res, off = [], 0
    nl = len(lead.shape)
    for b in blocks:
        n = _size(b)
        piece = mv.slice_in_dim(batched, off, off + n, 1, 0)
        piece = mv.reshape(piece, (*b.shape, *lead.shape))
        if lead_first:
            nb = len(b.shape)
            piece = mv.transpose(piece, (*range(nb, nb + nl), *range(nb)))
        res.append(piece)
        off += n
    return res


def _vmap(f: Callable) -> Callable:
    return _v(f)


def _check_jac_inputs(fun: Callable, nums: Sequence[int], dyn: Sequence[Any], what: str,
                      holomorphic: bool) -> None:
    for i, x in zip(nums, dyn):
        for leaf in tu.leaves(x):
            a = core.get_aval(leaf)
            if holomorphic and not dt.is_complex(a.dtype):
                raise TypeError(f"{what} with holomorphic=True requires complex inputs, but "
                                f"{_arg_name(fun, i)} has dtype {a.dtype}")
            if not holomorphic and not dt.is_float(a.dtype):
                raise TypeError(f"{what} requires real-valued inputs (input dtype that is a sub-dtype of "
                                f"np.floating), but {_arg_name(fun, i)} has dtype {a.dtype}"
                                + (". For holomorphic differentiation, pass holomorphic=True."
                                   if dt.is_complex(a.dtype) else ""))


def _jac_tree(out_tree: tu.PyTreeDef, in_tree: tu.PyTreeDef, blocks: list[list], single: bool) -> Any:
    """Nest Jacobian blocks ``blocks[out_leaf][in_leaf]``: output structure outside, input inside."""
    inner = [tu.unflatten(in_tree, row) for row in blocks]
    if single:
        inner = [x[0] for x in inner]
    return tu.unflatten(out_tree, inner)


def _result(blocks: list[list], dyn: tuple, argnums: int | Sequence[int], out_tree: tu.PyTreeDef,
            aux: list | None, aux_tree: tu.PyTreeDef | None) -> Any:
    """The Jacobian pytree of ``blocks`` (output structure outside, ``argnums`` structure inside),
    paired with the auxiliary outputs ``aux`` when there are some (``has_aux``)."""
    in_struct = tu.structure(dyn[0]) if isinstance(argnums, int) else tu.structure(dyn)
    jac = _jac_tree(out_tree, in_struct, blocks, False)
    return jac if aux is None else (jac, tu.unflatten(aux_tree, aux))


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False) -> Callable:
    """The Jacobian of ``fun`` by forward mode: linearize once, push the standard basis through.

    The result has the output structure outside and the ``argnums`` structure inside; each block
    has shape ``out.shape + in.shape``.
    """

    @functools.wraps(fun)
    def jac_f(*args: Any, **kwargs: Any) -> Any:
        nums, rebuild = _split_argnums(fun, argnums, args, "jacfwd")
        dyn = tuple(args[i] for i in nums)
        _check_jac_inputs(fun, nums, dyn, "jacfwd", holomorphic)
        leaves, in_tree = tu.flatten(dyn)
        flat, store = _flatten_fun(lambda *d: fun(*rebuild(d), **kwargs), in_tree, has_aux)
        lin = linearize_flat(flat, leaves, n_aux=lambda: store[0][2])
        out_tree, aux_tree, n_aux = store[0]
        n_main = len(lin.primals_out) - n_aux
        if not holomorphic:
            for a in lin.out_avals:
                if dt.is_complex(a.dtype):
                    raise TypeError("jacfwd: the function has complex outputs; pass holomorphic=True")
        in_avals = lin.in_avals
        basis = _basis(in_avals, lambda a: a.dtype)

        def push(*ts: Any) -> list:
            return [instantiate(t) for t in lin.jvp(list(ts))]

        batched = _vmap(push)(*basis) if basis and _size_total(in_avals) else \
            [np.zeros((0, *a.shape), a.dtype) for a in lin.out_avals]
        blocks = [_unstack_jac(b, in_avals, a, True) for b, a in zip(batched, lin.out_avals)]
        aux = lin.primals_out[n_main:] if has_aux else None
        return _result(blocks, dyn, argnums, out_tree, aux, aux_tree)

    return jac_f


def _size_total(avals: Sequence[ShapedArray]) -> int:
    return sum(_size(a) for a in avals)


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False, allow_int: bool = False) -> Callable:
    """The Jacobian of ``fun`` by reverse mode: one VJP, pulling back the output standard basis."""

    @functools.wraps(fun)
    def jac_f(*args: Any, **kwargs: Any) -> Any:
        nums, rebuild = _split_argnums(fun, argnums, args, "jacrev")
        dyn = tuple(args[i] for i in nums)
        _check_input_dtypes(fun, nums, dyn, "jacrev", holomorphic, allow_int)
        leaves, in_tree = tu.flatten(dyn)
        flat, store = _flatten_fun(lambda *d: fun(*rebuild(d), **kwargs), in_tree, has_aux)
        lin = linearize_flat(flat, leaves, n_aux=lambda: store[0][2])
        out_tree, aux_tree, n_aux = store[0]
        n_main = len(lin.primals_out) - n_aux
        for a in lin.out_avals:
            if holomorphic and not dt.is_complex(a.dtype):
                raise TypeError(f"jacrev with holomorphic=True requires complex outputs, got {a.dtype}")
            if not holomorphic and not dt.is_float(a.dtype):
                raise TypeError(f"jacrev requires real-valued outputs (output dtype that is a sub-dtype of "
                                f"np.floating), but got {a.dtype}"
                                + (". For holomorphic differentiation, pass holomorphic=True."
                                   if dt.is_complex(a.dtype) else ""))
        in_avals = lin.in_avals
        basis = _basis(lin.out_avals, lambda a: a.dtype)

        def pull(*cts: Any) -> list:
            return [_instantiate_out(c, a) for c, a in zip(lin.transpose(list(cts)), in_avals)]

        if basis and _size_total(lin.out_avals):
            batched = _vmap(pull)(*basis)
        else:
            batched = [np.zeros((0, *a.shape), a.dtype if _is_diff_dtype(a.dtype) else float0)
                       for a in in_avals]
        # batched[i]: (M, *in_i.shape); split rows by output leaf
        per_in = [_unstack_jac(b, lin.out_avals, a, False) if _is_diff_dtype(a.dtype) else
                  [_float0_zeros(ShapedArray((*o.shape, *a.shape), a.dtype)) for o in lin.out_avals]
                  for b, a in zip(batched, in_avals)]
        blocks = [[per_in[i][j] for i in range(len(in_avals))] for j in range(len(lin.out_avals))]
        aux = lin.primals_out[n_main:] if has_aux else None
        return _result(blocks, dyn, argnums, out_tree, aux, aux_tree)

    return jac_f


def hessian(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
            holomorphic: bool = False) -> Callable:
    """The Hessian of the scalar ``fun``: ``jacfwd(jacrev(fun))`` (forward-over-reverse)."""
    return jacfwd(jacrev(fun, argnums, has_aux=has_aux, holomorphic=holomorphic), argnums,
                  has_aux=has_aux, holomorphic=holomorphic)
